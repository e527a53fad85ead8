#include "ir/shape_rules.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/op_def.h"
#include "ir/ops/op_rules.h"

namespace tandem::ir {

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t ea = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t eb = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (ea != eb && ea != 1 && eb != 1) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast"));
    }
    out[i] = ea == 1 ? eb : ea;
  }
  return out;
}

absl::StatusOr<TensorType> InferResultType(OpKind op, absl::Span<const TensorType> types,
                                           const Attributes& attributes) {
  const OpDef& def = Def(op);
  if (std::string problem = OperandCountProblem(op, types.size()); !problem.empty()) {
    return ops::Error(op, problem, types);
  }
  if (def.result_type == nullptr) return ops::Error(op, "a source has a declared type, not a rule", types);
  return def.result_type(op, types, attributes);
}

}  // namespace tandem::ir

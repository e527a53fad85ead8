// embedding (rows of a table by id) and its backward helper.
#include "ir/ops/op_rules.h"

namespace tandem {
namespace ir::ops {
namespace {

using K = AttributeKind;

absl::StatusOr<TensorType> LookupType(OpKind op, absl::Span<const TensorType> types, const Attributes&) {
  if (absl::Status s = RequireFloat(op, types, 0); !s.ok()) return s;
  if (absl::Status s = RequireDType(op, types, 1, DType::kI32); !s.ok()) return s;
  if (types[0].rank() != 2) return Error(op, "the table must have rank 2", types);
  Shape shape = types[1].shape;
  shape.push_back(types[0].shape[1]);
  return TensorType{types[0].dtype, shape};
}

absl::StatusOr<TensorType> LookupGradType(OpKind op, absl::Span<const TensorType> types,
                                          const Attributes& attributes) {
  if (absl::Status s = RequireDType(op, types, 0, DType::kI32); !s.ok()) return s;
  if (absl::Status s = RequireFloat(op, types, 1); !s.ok()) return s;
  const Shape& ids = types[0].shape;
  if (types[1].rank() != types[0].rank() + 1 || !std::equal(ids.begin(), ids.end(), types[1].shape.begin())) {
    return Error(op, "dy must have the ids' shape plus one feature axis", types);
  }
  return TensorType{types[1].dtype, {attributes.GetInt("num_embeddings"), types[1].shape.back()}};
}

// Reads and writes the rows it moves, not the whole table.
OpCost LookupCost(const Node& node, absl::Span<const TensorType> operands) {
  return OpCost{.bytes = 2.0 * Bytes(node.type) + Bytes(operands[1])};
}
// Zeroes the table, then adds every dy row into it.
OpCost LookupGradCost(const Node& node, absl::Span<const TensorType> operands) {
  return OpCost{.flops = static_cast<double>(operands[1].num_elements()),
                .bytes = Bytes(node.type) + 2.0 * Bytes(operands[1]) + Bytes(operands[0])};
}

constexpr OpDef kEmbeddingOps[] = {
    {.kind = OpKind::kEmbedding,
     .name = "embedding",
     .arity = 2,
     .family = OpFamily::kEmbedding,
     .result_type = LookupType,
     .gradient =
         [](const GradientArgs& a, std::vector<Tensor>& d) {
           if (a.want(0)) {
             d[0] = Apply(OpKind::kEmbeddingGrad, {a.x[1], a.dy}, Attributes{{"num_embeddings", a.x[0].shape()[0]}},
                          {});
           }
         },
     .cost = LookupCost},
    {.kind = OpKind::kEmbeddingGrad,
     .name = "embedding_grad",
     .arity = 2,
     .family = OpFamily::kEmbedding,
     .attributes = {{"num_embeddings", K::kInt}},
     .result_type = LookupGradType,
     .cost = LookupGradCost},
};

}  // namespace

absl::Span<const OpDef> EmbeddingOps() { return kEmbeddingOps; }

}  // namespace ir::ops

Tensor embedding(const Tensor& table, const Tensor& ids, SourceLoc loc) {
  return ir::ops::ApplyAt(ir::OpKind::kEmbedding, {table, ids}, {}, loc);
}

}  // namespace tandem

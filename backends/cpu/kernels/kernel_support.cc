#include "backends/cpu/kernels/kernel_support.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/parallel.h"
#include "ir/op.h"

namespace tandem::cpu::internal {

namespace {

absl::StatusOr<ir::HostTensor> Named(const ir::Node& node, absl::StatusOr<ir::HostTensor> out) {
  if (!out.ok()) {
    return absl::Status(out.status().code(), absl::StrCat(OpName(node.op), ": ", out.status().message()));
  }
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> AllocateResult(const ir::Node& node) {
  return Named(node, ir::HostTensor::Allocate(node.type));
}

absl::StatusOr<ir::HostTensor> AllocateOverwrittenResult(const ir::Node& node) {
  return Named(node, ir::HostTensor::AllocateUninitialized(node.type));
}

namespace {

template <typename Out, typename In, typename Map>
absl::StatusOr<ir::HostTensor> MapElements(const ir::Node& node, const ir::HostTensor& in, ir::DType to,
                                           const Map& map) {
  absl::StatusOr<ir::HostTensor> out = ir::HostTensor::AllocateUninitialized(ir::TensorType{to, in.shape()});
  if (!out.ok()) {
    return absl::Status(out.status().code(), absl::StrCat(OpName(node.op), ": ", out.status().message()));
  }
  const In* from = reinterpret_cast<const In*>(in.data());
  Out* into = reinterpret_cast<Out*>(out->data());
  ParallelFor(in.num_elements(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) into[i] = map(from[i]);
  });
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> WidenBf16(const ir::Node& node, const ir::HostTensor& bf16) {
  if (bf16.dtype() != ir::DType::kBF16) return KernelTypeError(node, "widening a tensor that is not bf16");
  return MapElements<float, uint16_t>(node, bf16, ir::DType::kF32, ir::Bf16ToFloat);
}

absl::StatusOr<ir::HostTensor> NarrowToBf16(const ir::Node& node, const ir::HostTensor& f32) {
  if (f32.dtype() != ir::DType::kF32) return KernelTypeError(node, "rounding a tensor that is not f32 to bf16");
  return MapElements<uint16_t, float>(node, f32, ir::DType::kBF16, ir::FloatToBf16);
}

absl::Status KernelTypeError(const ir::Node& node, absl::string_view detail) {
  return absl::InternalError(absl::StrCat(OpName(node.op), ": ", detail));
}

absl::Status ExpectDType(const ir::Node& node, Operands operands, int index, ir::DType dtype) {
  if (operands[index]->dtype() == dtype) return absl::OkStatus();
  return KernelTypeError(node, absl::StrCat("operand ", index, " has type ", ir::TypeToString(operands[index]->type()),
                                            ", expected ", DTypeName(dtype)));
}

absl::Status ExpectShape(const ir::Node& node, Operands operands, int index, const ir::Shape& shape) {
  if (operands[index]->shape() == shape) return absl::OkStatus();
  return KernelTypeError(node, absl::StrCat("operand ", index, " has type ", ir::TypeToString(operands[index]->type()),
                                            ", expected shape ", ir::ShapeToString(shape)));
}

absl::Status ExpectResultDType(const ir::Node& node, ir::DType dtype) {
  if (node.type.dtype == dtype) return absl::OkStatus();
  return KernelTypeError(node,
                         absl::StrCat("result type ", ir::TypeToString(node.type), ", expected ", DTypeName(dtype)));
}

RowView RowsOf(const ir::Shape& shape) {
  if (shape.empty()) return {1, 1};
  RowView rows;
  rows.length = shape.back();
  rows.count = 1;
  for (size_t axis = 0; axis + 1 < shape.size(); ++axis) rows.count *= shape[axis];
  return rows;
}

absl::StatusOr<BroadcastLayout> MakeBroadcastLayout(const ir::Node& node, const ir::Shape& out,
                                                    absl::Span<const ir::Shape* const> inputs) {
  if (inputs.size() > static_cast<size_t>(kMaxBroadcastInputs)) {
    KernelBug("MakeBroadcastLayout: too many inputs");
  }
  const int num_inputs = static_cast<int>(inputs.size());
  const int rank = static_cast<int>(out.size());
  for (int i = 0; i < num_inputs; ++i) {
    if (static_cast<int>(inputs[i]->size()) > rank) {
      return KernelTypeError(node, absl::StrCat("operand shape ", ir::ShapeToString(*inputs[i]),
                                                " has more axes than the result ", ir::ShapeToString(out)));
    }
  }
  // One bit per input: set where the input is full along the axis.
  std::vector<int64_t> extents;
  std::vector<unsigned> masks;
  for (int axis = 0; axis < rank; ++axis) {
    unsigned mask = 0;
    for (int i = 0; i < num_inputs; ++i) {
      const ir::Shape& in = *inputs[i];
      const int offset = rank - static_cast<int>(in.size());
      const int64_t extent = axis >= offset ? in[axis - offset] : 1;
      if (extent == out[axis]) {
        if (extent != 1) mask |= 1u << i;
      } else if (extent != 1) {
        return KernelTypeError(node, absl::StrCat("operand shape ", ir::ShapeToString(in), " does not broadcast to ",
                                                  ir::ShapeToString(out)));
      }
    }
    if (out[axis] == 1) continue;
    if (!masks.empty() && masks.back() == mask) {
      extents.back() *= out[axis];
    } else {
      extents.push_back(out[axis]);
      masks.push_back(mask);
    }
  }
  if (extents.empty()) {
    extents.push_back(1);
    masks.push_back(0);
  }
  BroadcastLayout layout;
  layout.extents = extents;
  layout.num_inputs = num_inputs;
  for (int i = 0; i < num_inputs; ++i) {
    std::vector<int64_t>& strides = layout.strides[i];
    strides.assign(extents.size(), 0);
    int64_t running = 1;
    for (int axis = static_cast<int>(extents.size()) - 1; axis >= 0; --axis) {
      if (masks[axis] & (1u << i)) {
        strides[axis] = running;
        running *= extents[axis];
      }
    }
  }
  return layout;
}

void KernelBug(absl::string_view message) {
  std::fprintf(stderr, "tandem: internal error: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::abort();
}

}  // namespace tandem::cpu::internal

// Embedding lookup and its backward helper: embedding gathers table rows by
// id, embedding_grad sums dy rows into the rows of their ids, in index
// order. An id outside [0, V) is an InvalidArgument error naming the id and
// its position.
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels/kernel_support.h"

namespace tandem::cpu::internal {
namespace {

absl::Status IdError(const ir::Node& node, int32_t id, int64_t position, int64_t rows) {
  return absl::InvalidArgumentError(absl::StrCat(OpName(node.op), ": id ", id, " at position ",
                                                 position, " outside [0, ", rows, ")"));
}

// embedding(table[V, D], ids[...]) -> [..., D].
absl::StatusOr<ir::HostTensor> Embedding(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectDType(node, operands, 0, ir::DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectDType(node, operands, 1, ir::DType::kI32); !s.ok()) return s;
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::HostTensor& table = *operands[0];
  const ir::HostTensor& ids = *operands[1];
  if (table.shape().size() != 2) return KernelTypeError(node, "table needs rank 2");
  const int64_t rows = table.shape()[0];
  const int64_t width = table.shape()[1];
  ir::Shape expected = ids.shape();
  expected.push_back(width);
  if (expected != node.type.shape) {
    return KernelTypeError(node, absl::StrCat("result type ", ir::TypeToString(node.type), " should have shape ",
                                              ir::ShapeToString(expected)));
  }
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const int64_t count = ids.num_elements();
  const int32_t* id_data = ids.i32();
  for (int64_t position = 0; position < count; ++position) {
    const int32_t id = id_data[position];
    if (id < 0 || id >= rows) return IdError(node, id, position, rows);
    std::memcpy(out.f32() + position * width, table.f32() + id * width,
                static_cast<size_t>(width) * sizeof(float));
  }
  return out;
}

// embedding_grad(ids[...], dy[..., D]) -> [V, D], V = num_embeddings.
absl::StatusOr<ir::HostTensor> EmbeddingGrad(const ir::Node& node, Operands operands) {
  if (absl::Status s = ExpectDType(node, operands, 0, ir::DType::kI32); !s.ok()) return s;
  if (absl::Status s = ExpectDType(node, operands, 1, ir::DType::kF32); !s.ok()) return s;
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::HostTensor& ids = *operands[0];
  const ir::HostTensor& dy = *operands[1];
  if (node.type.shape.size() != 2 || dy.shape().empty()) {
    return KernelTypeError(node, "result needs rank 2 and dy rank >= 1");
  }
  const int64_t rows = node.type.shape[0];
  const int64_t width = node.type.shape[1];
  if (node.attributes.GetIntOr("num_embeddings", rows) != rows) {
    return KernelTypeError(node, absl::StrCat("num_embeddings ",
                                              node.attributes.GetInt("num_embeddings"),
                                              " differs from the result type ",
                                              ir::TypeToString(node.type)));
  }
  ir::Shape expected = ids.shape();
  expected.push_back(width);
  if (absl::Status s = ExpectShape(node, operands, 1, expected); !s.ok()) return s;
  absl::StatusOr<ir::HostTensor> allocated = AllocateResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const int64_t count = ids.num_elements();
  const int32_t* id_data = ids.i32();
  float* result = out.f32();
  for (int64_t position = 0; position < count; ++position) {
    const int32_t id = id_data[position];
    if (id < 0 || id >= rows) return IdError(node, id, position, rows);
    float* __restrict target = result + id * width;
    const float* __restrict source = dy.f32() + position * width;
    for (int64_t i = 0; i < width; ++i) target[i] += source[i];
  }
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateEmbedding(const ir::Node& node, Operands operands) {
  switch (node.op) {
    case ir::OpKind::kEmbedding:
      return Embedding(node, operands);
    case ir::OpKind::kEmbeddingGrad:
      return EmbeddingGrad(node, operands);
    default:
      KernelBug(absl::StrCat("EvaluateEmbedding: unexpected ", OpName(node.op)));
  }
}

}  // namespace tandem::cpu::internal

#include "rpc/state_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ir/excerpt.h"
#include "ir/limits.h"
#include "ir/state_file.h"
#include "rpc/capnp_text.h"
#include "rpc/program_codec.h"
#include "rpc/status_convert.h"

namespace tandem::rpc {
namespace {

wire::Initializer::Kind ToWire(ir::Initializer::Kind kind) {
  switch (kind) {
    case ir::Initializer::Kind::kZeros:
      return wire::Initializer::Kind::ZEROS;
    case ir::Initializer::Kind::kOnes:
      return wire::Initializer::Kind::ONES;
    case ir::Initializer::Kind::kNormal:
      return wire::Initializer::Kind::NORMAL;
    case ir::Initializer::Kind::kUniform:
      return wire::Initializer::Kind::UNIFORM;
  }
  return wire::Initializer::Kind::ZEROS;
}

absl::StatusOr<ir::Initializer::Kind> FromWire(wire::Initializer::Kind kind, absl::string_view what) {
  switch (kind) {
    case wire::Initializer::Kind::ZEROS:
      return ir::Initializer::Kind::kZeros;
    case wire::Initializer::Kind::ONES:
      return ir::Initializer::Kind::kOnes;
    case wire::Initializer::Kind::NORMAL:
      return ir::Initializer::Kind::kNormal;
    case wire::Initializer::Kind::UNIFORM:
      return ir::Initializer::Kind::kUniform;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown initializer kind ", static_cast<int>(kind)));
}

absl::StatusOr<ir::StateSources> ReadStateSources(capnp::List<wire::StateSource>::Reader list,
                                                  absl::string_view what) {
  ir::StateSources sources;
  for (wire::StateSource::Reader entry : list) {
    const std::string binding = ToString(entry.getBinding());
    const std::string where = absl::StrCat(what, " '", ir::Excerpt(binding), "'");
    absl::StatusOr<ir::TensorType> type = DecodeTensorType(entry.getType(), where);
    if (!type.ok()) return type.status();
    ir::StateSource source{*type, ir::HostTensor()};
    switch (entry.which()) {
      case wire::StateSource::INITIALIZER: {
        wire::Initializer::Reader init = entry.getInitializer();
        absl::StatusOr<ir::Initializer::Kind> kind = FromWire(init.getKind(), where);
        if (!kind.ok()) return kind.status();
        source.origin = ir::Initializer{*kind, init.getA(), init.getB(), init.getSeed()};
        break;
      }
      case wire::StateSource::FILE: {
        wire::StateFileSlice::Reader file = entry.getFile();
        if (file.getOffset() > static_cast<uint64_t>(ir::kMaxTensorBytes)) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": file offset ", file.getOffset(), " is too large"));
        }
        source.origin = ir::StateFileSlice{ToString(file.getPath()), static_cast<int64_t>(file.getOffset())};
        break;
      }
      case wire::StateSource::STAGED:
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(where, ": unknown kind of source"));
    }
    if (!sources.emplace(binding, std::move(source)).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, " is given twice"));
    }
  }
  return sources;
}

}  // namespace

absl::Status EncodeTensorPiece(const ir::HostTensor& tensor, uint64_t offset, uint64_t max_bytes,
                               wire::TensorPiece::Builder builder) {
  const auto total = static_cast<uint64_t>(tensor.num_bytes());
  if (offset > total) {
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " is past the end of a ",
                                              ir::TypeToString(tensor.type()), " (", total, " bytes)"));
  }
  const uint64_t size = std::min({max_bytes, static_cast<uint64_t>(ir::kStatePieceBytes), total - offset});
  EncodeTensorType(tensor.type(), builder.initType());
  builder.setOffset(offset);
  builder.setData(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(tensor.data()) + offset, size));
  return absl::OkStatus();
}

absl::Status TensorAssembler::Add(wire::TensorPiece::Reader piece) {
  return CatchMalformedMessage(what_, [&]() -> absl::Status {
    absl::StatusOr<ir::TensorType> type = DecodeTensorType(piece.getType(), what_);
    if (!type.ok()) return type.status();
    capnp::Data::Reader data = piece.getData();
    if (data.size() > static_cast<size_t>(ir::kStatePieceBytes)) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": a piece of ", data.size(), " bytes, above the ",
                                                     ir::kStatePieceBytes, " a piece may have"));
    }
    if (!started()) {
      if (piece.getOffset() != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what_, ": the first piece is at offset ", piece.getOffset(), ", not 0"));
      }
      absl::StatusOr<ir::HostTensor> tensor = ir::HostTensor::Allocate(*type);
      if (!tensor.ok()) {
        return absl::Status(tensor.status().code(), absl::StrCat(what_, ": ", tensor.status().message()));
      }
      tensor_ = *std::move(tensor);
    } else if (*type != tensor_.type()) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": a piece of a ", ir::TypeToString(*type),
                                                     " continues a ", ir::TypeToString(tensor_.type())));
    } else if (piece.getOffset() != received_) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": a piece at offset ", piece.getOffset(),
                                                     " where ", received_, " bytes have arrived"));
    }
    const auto total = static_cast<uint64_t>(tensor_.num_bytes());
    if (data.size() > total - received_) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": a piece of ", data.size(), " bytes at offset ",
                                                     received_, " passes the end of a ",
                                                     ir::TypeToString(tensor_.type()), " (", total, " bytes)"));
    }
    if (data.size() > 0) std::memcpy(tensor_.data() + received_, data.begin(), data.size());
    received_ += data.size();
    return absl::OkStatus();
  });
}

absl::StatusOr<ir::HostTensor> TensorAssembler::Take() {
  if (!complete()) {
    return absl::FailedPreconditionError(
        started() ? absl::StrCat(what_, ": ", received_, " of the ", tensor_.num_bytes(), " bytes of a ",
                                 ir::TypeToString(tensor_.type()), " arrived")
                  : absl::StrCat(what_, ": no piece arrived"));
  }
  received_ = 0;
  return std::exchange(tensor_, ir::HostTensor());
}

void EncodeStateSources(const ir::StateSources& sources, capnp::List<wire::StateSource>::Builder list) {
  unsigned index = 0;
  for (const auto& [binding, source] : sources) {
    wire::StateSource::Builder entry = list[index++];
    entry.setBinding(AsText(binding));
    EncodeTensorType(source.type, entry.initType());
    if (const auto* init = std::get_if<ir::Initializer>(&source.origin)) {
      wire::Initializer::Builder out = entry.initInitializer();
      out.setKind(ToWire(init->kind));
      out.setA(init->a);
      out.setB(init->b);
      out.setSeed(init->seed);
    } else if (const auto* slice = std::get_if<ir::StateFileSlice>(&source.origin)) {
      wire::StateFileSlice::Builder out = entry.initFile();
      out.setPath(AsText(slice->path));
      out.setOffset(static_cast<uint64_t>(slice->offset));
    } else {
      entry.setStaged();
    }
  }
}

absl::StatusOr<ir::StateSources> DecodeStateSources(capnp::List<wire::StateSource>::Reader list,
                                                    absl::string_view what) {
  return CatchMalformedMessage(what, [&] { return ReadStateSources(list, what); });
}

}  // namespace tandem::rpc

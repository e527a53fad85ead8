// Fuzz target: the control-plane program decoder (rpc::DecodeProgram), what
// an actor runs on every loadProgram it receives. The input is a Cap'n
// Proto message (segment table, then segments) read with the connection's
// own limits (rpc::ToReaderOptions); its root is a wire::ActorProgram.
// Beyond not crashing: the decoder never throws and fails only with
// InvalidArgument; what decodes encodes and decodes back to an equal program
// under its hash.
#include <cstddef>
#include <cstdint>

#include "capnp/message.h"
#include "ir/actor_program.h"
#include "rpc/connection.h"
#include "rpc/program_codec.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::rpc {
namespace {

void Run(const uint8_t* data, size_t size) {
  fuzz::FramedMessage message(data, size, ToReaderOptions(ConnectionLimits{}));
  std::optional<wire::ActorProgram::Reader> root = message.GetRoot<wire::ActorProgram>();
  if (!root.has_value()) return;
  absl::StatusOr<ir::ActorProgram> program = DecodeProgram(*root);
  if (!program.ok()) {
    fuzz::FuzzCheck(program.status().code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + program.status().ToString());
    return;
  }
  capnp::MallocMessageBuilder builder;
  EncodeProgram(*program, builder.initRoot<wire::ActorProgram>());
  absl::StatusOr<ir::ActorProgram> decoded =
      DecodeProgram(builder.getRoot<wire::ActorProgram>().asReader(), ir::HashActorProgram(*program));
  fuzz::FuzzCheck(decoded.ok(), "an encoded program does not decode: " + decoded.status().ToString());
  fuzz::FuzzCheck(*decoded == *program, "encode then decode changed the program");
}

}  // namespace
}  // namespace tandem::rpc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::rpc::Run(data, size);
  return 0;
}

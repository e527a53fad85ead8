// Fuzz target: DecodeReplicaOffer, which reads what another member of a
// replica group offered (its TCP address, GPU and NCCL id) as the
// controller relays it. Beyond not crashing: a refusal is InvalidArgument;
// what decodes encodes back to the same offer.
#include <cstddef>
#include <cstdint>
#include <string>

#include "actor/replica_group.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::actor {
namespace {

void Run(absl::string_view bytes) {
  absl::StatusOr<ReplicaOffer> offer = DecodeReplicaOffer(bytes);
  if (!offer.ok()) {
    fuzz::FuzzCheck(offer.status().code() == absl::StatusCode::kInvalidArgument,
                    "unexpected error code: " + offer.status().ToString());
    return;
  }
  absl::StatusOr<std::string> encoded = EncodeReplicaOffer(*offer);
  fuzz::FuzzCheck(encoded.ok(), "a decoded offer does not encode: " + encoded.status().ToString());
  absl::StatusOr<ReplicaOffer> again = DecodeReplicaOffer(*encoded);
  fuzz::FuzzCheck(again.ok() && *again == *offer, "encode then decode changed the offer");
}

}  // namespace
}  // namespace tandem::actor

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::actor::Run(tandem::fuzz::AsText(data, size));
  return 0;
}

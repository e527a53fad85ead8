// The private parts of IpcTransport that its two files share: each pair's
// outbound ring (what this actor sends) and inbound ring (what the peer
// sends), and the transport's constants. ipc_transport_setup.cc creates
// and connects the pairs; ipc_transport.cc moves messages over them.
// Internal to actor/.
#ifndef TANDEM_ACTOR_IPC_TRANSPORT_PAIRS_H_
#define TANDEM_ACTOR_IPC_TRANSPORT_PAIRS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "actor/ipc_record.h"
#include "actor/ipc_transport.h"
#include "ir/dtype.h"

namespace tandem::actor {
namespace ipc {

inline constexpr int32_t kMaxSlots = 4096;
// How long a pump's host Receive waits before it re-checks for shutdown.
inline constexpr absl::Duration kPumpSlice = absl::Milliseconds(20);

inline uint64_t AlignUp(uint64_t bytes) { return (bytes + kIpcAlignment - 1) / kIpcAlignment * kIpcAlignment; }

}  // namespace ipc

struct IpcTransport::Outbound {
  int32_t peer = -1;
  // Created here and exported to the peer in Connect.
  backends::DeviceAddress ring = 0;
  std::vector<backends::DeviceEvent> ready;  // by slot
  // Imported from the peer in Connect.
  std::vector<backends::DeviceEvent> consumed;  // by slot

  struct Message {
    uint64_t tag = 0;
    std::vector<backends::DeviceTensor> tensors;
    std::vector<uint64_t> offsets;  // of each tensor within the message
    uint64_t bytes = 0;             // multiple of kIpcAlignment
  };
  std::deque<Message> queue;  // not yet written, in Send order

  struct InFlight {
    uint64_t seq = 0;
    uint64_t tag = 0;
    int32_t slot = 0;
    uint64_t end = 0;  // ring position after the message
    bool released = false;
  };
  std::deque<InFlight> in_flight;  // written, not yet reclaimed, in ring order
  std::vector<int32_t> free_slots;
  std::set<uint64_t> outstanding_tags;  // queued or in flight, not yet released
  uint64_t head = 0;                    // monotonic ring positions
  uint64_t tail = 0;
  uint64_t next_seq = 0;
  absl::Status error;  // the pair is broken
  bool peer_closed = false;
};

// A message whose tensors are in the sender's ring, not yet received.
struct IpcTransport::Frame {
  struct Tensor {
    ir::TensorType type;
    uint64_t offset = 0;  // in the ring
    uint64_t bytes = 0;
  };
  uint64_t seq = 0;
  int32_t slot = 0;
  std::vector<Tensor> tensors;
};

struct IpcTransport::Inbound {
  // Imported from the peer in Connect.
  backends::DeviceAddress ring = 0;
  uint64_t capacity = 0;
  std::vector<backends::DeviceEvent> ready;  // by slot
  // Created here and exported to the peer in Connect.
  std::vector<backends::DeviceEvent> consumed;  // by slot
  std::vector<bool> slot_in_use;  // a frame holds it, not yet released
};

}  // namespace tandem::actor

#endif  // TANDEM_ACTOR_IPC_TRANSPORT_PAIRS_H_

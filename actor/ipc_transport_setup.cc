// IpcTransport's setup and teardown of its pairs: allocating and exporting
// the rings and events (Create), exchanging them with each peer over the
// host channel (Connect), and releasing them (the destructor). Messages
// move in ipc_transport.cc.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/ipc_transport.h"
#include "actor/ipc_transport_pairs.h"

namespace tandem::actor {

using ipc::AlignUp;
using ipc::kHandleWords;
using ipc::KindOf;
using ipc::kMaxSlots;
using ipc::ParseRecord;
using ipc::RecordKind;
using ipc::RecordReader;
using ipc::RecordWriter;

IpcTransport::IpcTransport(int32_t actor, int32_t num_actors, backends::DeviceMemory& memory, Transport& host_channel,
                           Options options)
    : actor_(actor),
      num_actors_(num_actors),
      memory_(memory),
      host_(host_channel),
      options_(std::move(options)),
      mailbox_(std::make_unique<PeerMailbox<Frame>>(num_actors)) {}

absl::StatusOr<std::unique_ptr<IpcTransport>> IpcTransport::Create(int32_t actor, int32_t num_actors,
                                                                   backends::DeviceMemory& memory,
                                                                   Transport& host_channel, Options options) {
  if (absl::Status status = CheckActor(actor, num_actors); !status.ok()) return status;
  if (host_channel.actor() != actor) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": the host channel belongs to actor ",
                                                   host_channel.actor()));
  }
  if (options.slots < 1 || options.slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": ", options.slots,
                                                   " slots per peer; 1 to ", kMaxSlots, " allowed"));
  }
  if (options.ring_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": ring of ", options.ring_bytes, " bytes"));
  }
  std::vector<bool> is_peer(num_actors, options.peers.empty());
  is_peer[actor] = false;
  for (int32_t peer : options.peers) {
    if (peer < 0 || peer >= num_actors || peer == actor || is_peer[peer]) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor, ": peer ", peer,
                                                     " is out of range, this actor, or listed twice"));
    }
    is_peer[peer] = true;
  }
  std::unique_ptr<IpcTransport> transport(
      new IpcTransport(actor, num_actors, memory, host_channel, std::move(options)));
  IpcTransport& t = *transport;
  t.capacity_ = AlignUp(static_cast<uint64_t>(t.options_.ring_bytes));
  t.is_peer_ = std::move(is_peer);
  {
    absl::MutexLock host_lock(&t.host_mu_);
    t.host_sent_.assign(num_actors, 0);
  }
  // Lock order: send_mu_, then recv_mu_, then host_mu_.
  absl::MutexLock send_lock(&t.send_mu_);
  absl::MutexLock recv_lock(&t.recv_mu_);
  t.outbound_.resize(num_actors);
  t.inbound_.resize(num_actors);
  for (int32_t peer = 0; peer < num_actors; ++peer) {
    if (!t.is_peer_[peer]) continue;
    // Allocated before anything can fail, so the destructor frees what exists.
    t.outbound_[peer] = std::make_unique<Outbound>();
    t.inbound_[peer] = std::make_unique<Inbound>();
    Outbound& out = *t.outbound_[peer];
    Inbound& in = *t.inbound_[peer];
    out.peer = peer;
    absl::StatusOr<backends::DeviceAddress> ring =
        memory.Allocate(static_cast<int64_t>(t.capacity_), backends::Sharing::kExportable);
    if (!ring.ok()) {
      return absl::Status(ring.status().code(), absl::StrCat("actor ", actor, ": the device ring to actor ", peer,
                                                             ": ", ring.status().message()));
    }
    out.ring = *ring;
    for (int32_t slot = 0; slot < t.options_.slots; ++slot) {
      absl::StatusOr<backends::DeviceEvent> ready = memory.CreateIpcEvent();
      if (!ready.ok()) return ready.status();
      out.ready.push_back(*ready);
      absl::StatusOr<backends::DeviceEvent> consumed = memory.CreateIpcEvent();
      if (!consumed.ok()) return consumed.status();
      in.consumed.push_back(*consumed);
    }
    for (int32_t slot = t.options_.slots - 1; slot >= 0; --slot) out.free_slots.push_back(slot);
    in.slot_in_use.assign(t.options_.slots, false);
  }
  return transport;
}

IpcTransport::~IpcTransport() {
  stopping_ = true;
  for (std::thread& pump : pumps_) pump.join();
  // Best effort: let copies that touch the rings finish before unmapping.
  memory_.SynchronizeStream(absl::Now() + absl::Seconds(1)).IgnoreError();
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (!is_peer_[peer]) continue;
    absl::MutexLock send_lock(&send_mu_);
    absl::MutexLock recv_lock(&recv_mu_);
    CloseImports(*inbound_[peer], *outbound_[peer]);
    FreeExports(*inbound_[peer], *outbound_[peer]);
  }
}

void IpcTransport::CloseImports(Inbound& in, Outbound& out) {
  for (backends::DeviceEvent event : in.ready) memory_.DestroyEvent(event).IgnoreError();
  in.ready.clear();
  if (in.ring != 0) memory_.CloseImported(in.ring).IgnoreError();
  in.ring = 0;
  for (backends::DeviceEvent event : out.consumed) memory_.DestroyEvent(event).IgnoreError();
  out.consumed.clear();
}

void IpcTransport::FreeExports(Inbound& in, Outbound& out) {
  if (out.ring != 0) memory_.Free(out.ring).IgnoreError();
  out.ring = 0;
  for (backends::DeviceEvent event : out.ready) memory_.DestroyEvent(event).IgnoreError();
  out.ready.clear();
  for (backends::DeviceEvent event : in.consumed) memory_.DestroyEvent(event).IgnoreError();
  in.consumed.clear();
}

absl::Status IpcTransport::CheckPeer(int32_t peer) const {
  if (absl::Status status = actor::CheckPeer(actor_, num_actors_, peer); !status.ok()) return status;
  if (!is_peer_[peer]) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor ", actor_, ": actor ", peer, " is not on this device's IPC data plane"));
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::PublishToPeer(int32_t peer, std::vector<int32_t> words) {
  ir::HostTensor record = ipc::RecordTensor(words);
  absl::MutexLock lock(&host_mu_);
  const uint64_t tag = kIpcHostTagBase + host_sent_[peer]++;
  absl::Status status = host_.Send(peer, tag, {std::move(record)});
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("actor ", actor_, ": the host channel to actor ", peer,
                                                    " failed: ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::Connect(absl::Time deadline) {
  if (connect_started_.exchange(true) || closing_) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor ", actor_, ": Connect called twice (or after Close) on the IPC transport"));
  }
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (!is_peer_[peer]) continue;
    RecordWriter setup(RecordKind::kSetup, actor_, peer);
    {
      absl::MutexLock send_lock(&send_mu_);
      absl::MutexLock recv_lock(&recv_mu_);
      const Outbound& out = *outbound_[peer];
      const Inbound& in = *inbound_[peer];
      setup.Put64(capacity_);
      setup.Put32(options_.slots);
      absl::StatusOr<backends::IpcMemHandle> ring = memory_.ExportMemory(out.ring);
      if (!ring.ok()) return ring.status();
      setup.PutHandle(ring->bytes);
      for (const std::vector<backends::DeviceEvent>* events : {&out.ready, &in.consumed}) {
        for (backends::DeviceEvent event : *events) {
          absl::StatusOr<backends::IpcEventHandle> handle = memory_.ExportEvent(event);
          if (!handle.ok()) return handle.status();
          setup.PutHandle(handle->bytes);
        }
      }
    }
    if (absl::Status status = PublishToPeer(peer, setup.Take()); !status.ok()) return status;
  }
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (!is_peer_[peer]) continue;
    absl::StatusOr<std::vector<ir::HostTensor>> got = host_.Receive(peer, kIpcHostTagBase, deadline);
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat("actor ", actor_, ": no IPC setup from actor ", peer, " before the deadline"));
      }
      return got.status();
    }
    absl::StatusOr<std::vector<int32_t>> words = ParseRecord(*got, peer, actor_);
    if (!words.ok()) return words.status();
    if (KindOf(*words) != RecordKind::kSetup) {
      return absl::DataLossError(absl::StrCat("actor ", actor_, ": the first record from actor ", peer,
                                              " is not its IPC setup"));
    }
    RecordReader reader(*words);
    const uint64_t capacity = reader.Get64();
    const int32_t slots = reader.Get32();
    if (reader.ok() && slots != options_.slots) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, " uses ", options_.slots,
                                                     " IPC slots per peer, actor ", peer, " uses ", slots));
    }
    if (!reader.ok() || reader.left() != kHandleWords * (1 + 2 * static_cast<size_t>(slots)) ||
        capacity % kIpcAlignment != 0 || capacity == 0) {
      return absl::DataLossError(absl::StrCat("actor ", actor_, ": malformed IPC setup from actor ", peer));
    }
    const backends::IpcMemHandle ring_handle = reader.GetHandle<backends::IpcMemHandle>();
    std::vector<backends::IpcEventHandle> ready_handles, consumed_handles;
    for (int32_t slot = 0; slot < slots; ++slot) ready_handles.push_back(reader.GetHandle<backends::IpcEventHandle>());
    for (int32_t slot = 0; slot < slots; ++slot)
      consumed_handles.push_back(reader.GetHandle<backends::IpcEventHandle>());

    absl::MutexLock send_lock(&send_mu_);
    absl::MutexLock recv_lock(&recv_mu_);
    Outbound& out = *outbound_[peer];
    Inbound& in = *inbound_[peer];
    auto context = [&](const absl::Status& status) {
      return absl::Status(status.code(), absl::StrCat("actor ", actor_, ": opening the IPC handles of actor ", peer,
                                                      ": ", status.message()));
    };
    absl::StatusOr<backends::DeviceAddress> ring = memory_.ImportMemory(ring_handle);
    if (!ring.ok()) return context(ring.status());
    in.ring = *ring;
    in.capacity = capacity;
    for (const backends::IpcEventHandle& handle : ready_handles) {
      absl::StatusOr<backends::DeviceEvent> event = memory_.ImportEvent(handle);
      if (!event.ok()) return context(event.status());
      in.ready.push_back(*event);
    }
    for (const backends::IpcEventHandle& handle : consumed_handles) {
      absl::StatusOr<backends::DeviceEvent> event = memory_.ImportEvent(handle);
      if (!event.ok()) return context(event.status());
      out.consumed.push_back(*event);
    }
  }
  connected_ = true;
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (is_peer_[peer]) pumps_.emplace_back([this, peer] { PumpLoop(peer, 1); });
  }
  return absl::OkStatus();
}

}  // namespace tandem::actor

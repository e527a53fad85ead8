#include "actor/ipc_transport.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/ipc_record.h"
#include "actor/ipc_transport_pairs.h"
#include "ir/dtype.h"
#include "ir/limits.h"

namespace tandem::actor {

using ipc::AlignUp;
using ipc::KindOf;
using ipc::kMaxRank;
using ipc::kMaxTensors;
using ipc::kPumpSlice;
using ipc::kTensorWords;
using ipc::ParseRecord;
using ipc::RecordKind;
using ipc::RecordReader;
using ipc::RecordWriter;

absl::Status IpcTransport::Send(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  if (!connected_ || closing_) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": Send to actor ", peer, " tag ", tag,
                                                      closing_ ? " after Close" : " before Connect"));
  }
  if (tensors.size() > kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, " -> actor ", peer, " tag ", tag, ": ",
                                                   tensors.size(), " tensors; at most ", kMaxTensors));
  }
  Outbound::Message message;
  message.tag = tag;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const backends::DeviceTensor& tensor = tensors[i];
    if (!tensor.defined() || tensor.type.rank() > kMaxRank ||
        tensor.storage->bytes() < tensor.num_bytes() || &tensor.storage->memory() != &memory_) {
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", actor_, " -> actor ", peer, " tag ", tag, ": tensor ", i, " (",
                       ir::TypeToString(tensor.type),
                       ") is undefined, of rank above 8, smaller than its type or on another device"));
    }
    message.offsets.push_back(message.bytes);
    message.bytes += AlignUp(static_cast<uint64_t>(tensor.num_bytes()));
  }
  message.tensors = std::move(tensors);

  absl::MutexLock lock(&send_mu_);
  if (!send_abort_.ok()) return send_abort_;
  Outbound& out = *outbound_[peer];
  if (!out.error.ok()) return out.error;
  if (message.bytes > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "actor ", actor_, " -> actor ", peer, " tag ", tag, ": the message needs ",
        ir::FormatBytes(static_cast<int64_t>(message.bytes)), " of device staging, more than the whole ring of ",
        ir::FormatBytes(static_cast<int64_t>(capacity_)), " (IpcTransport::Options::ring_bytes)"));
  }
  if (out.outstanding_tags.contains(tag)) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, " -> actor ", peer, ": tag ", tag,
                                                   " was sent before and is not yet received"));
  }
  out.outstanding_tags.insert(tag);
  out.queue.push_back(std::move(message));
  if (absl::Status status = FlushLocked(out); !status.ok()) {
    out.error = status;
    return status;
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::FlushLocked(Outbound& out) {
  while (!out.queue.empty()) {
    absl::StatusOr<bool> written = TryWriteLocked(out);
    if (!written.ok()) return written.status();
    if (!*written) break;
    out.queue.pop_front();
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> IpcTransport::TryWriteLocked(Outbound& out) {
  const Outbound::Message& message = out.queue.front();
  uint64_t start = 0;
  while (true) {
    const uint64_t offset = out.head % capacity_;
    start = capacity_ - offset < message.bytes ? out.head + (capacity_ - offset) : out.head;
    if (!out.free_slots.empty() && start + message.bytes - out.tail <= capacity_) break;
    if (out.in_flight.empty() || !out.in_flight.front().released) return false;
    // Reclaim the oldest released message: its range and slot may be reused
    // once the receiver's copy out of it is done.
    const Outbound::InFlight& oldest = out.in_flight.front();
    const backends::DeviceEvent consumed = out.consumed[oldest.slot];
    absl::StatusOr<bool> done = memory_.QueryEvent(consumed);
    if (!done.ok()) return done.status();
    if (!*done) {
      if (absl::Status status = memory_.StreamWaitEvent(consumed); !status.ok()) return status;
    }
    out.free_slots.push_back(oldest.slot);
    out.tail = oldest.end;
    out.in_flight.pop_front();
  }
  const int32_t slot = out.free_slots.back();
  const uint64_t ring_offset = start % capacity_;
  RecordWriter frame(RecordKind::kMessage, actor_, out.peer);
  frame.Put64(out.next_seq);
  frame.Put64(message.tag);
  frame.Put32(slot);
  frame.Put32(static_cast<int32_t>(message.tensors.size()));
  for (size_t i = 0; i < message.tensors.size(); ++i) {
    const backends::DeviceTensor& tensor = message.tensors[i];
    const uint64_t at = ring_offset + message.offsets[i];
    if (absl::Status status = memory_.CopyAsync(out.ring + at, tensor.address(), tensor.num_bytes()); !status.ok()) {
      return status;
    }
    ipc::PutType(frame, tensor.type);
    frame.Put64(at);
    frame.Put64(static_cast<uint64_t>(tensor.num_bytes()));
  }
  if (absl::Status status = memory_.RecordEvent(out.ready[slot]); !status.ok()) return status;
  if (absl::Status status = PublishToPeer(out.peer, frame.Take()); !status.ok()) return status;
  out.free_slots.pop_back();
  out.in_flight.push_back({.seq = out.next_seq, .tag = message.tag, .slot = slot, .end = start + message.bytes});
  out.head = start + message.bytes;
  ++out.next_seq;
  return true;
}

absl::StatusOr<std::vector<backends::DeviceTensor>> IpcTransport::Receive(int32_t peer, uint64_t tag,
                                                                          absl::Time deadline) {
  if (absl::Status status = CheckPeer(peer); !status.ok()) return status;
  if (!connected_ || closing_) {
    return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": Receive from actor ", peer, " tag ", tag,
                                                      closing_ ? " after Close" : " before Connect"));
  }
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&recv_mu_);
  Inbound& in = *inbound_[peer];
  absl::StatusOr<Frame> claimed = mailbox_->Receive(recv_mu_, peer, tag, start, deadline);
  if (!claimed.ok()) return claimed.status();
  const Frame frame = *std::move(claimed);

  auto fail = [&](absl::Status status) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status error(status.code(), absl::StrCat("actor ", actor_, ": receiving tag ", tag, " from actor ", peer,
                                                   ": ", status.message()));
    mailbox_->FailPeer(peer, error);
    return error;
  };
  if (absl::Status status = memory_.StreamWaitEvent(in.ready[frame.slot]); !status.ok()) return fail(status);
  std::vector<backends::DeviceTensor> tensors;
  absl::Status allocation_error;
  for (const Frame::Tensor& t : frame.tensors) {
    absl::StatusOr<backends::DeviceTensor> tensor = backends::AllocateDeviceTensor(memory_, t.type);
    if (!tensor.ok()) {
      allocation_error = tensor.status();
      break;
    }
    if (absl::Status status = memory_.CopyAsync(tensor->address(), in.ring + t.offset, static_cast<int64_t>(t.bytes));
        !status.ok()) {
      return fail(status);
    }
    tensors.push_back(*std::move(tensor));
  }
  // Released even when an allocation failed, so the sender's ring moves on.
  if (absl::Status status = memory_.RecordEvent(in.consumed[frame.slot]); !status.ok()) return fail(status);
  in.slot_in_use[frame.slot] = false;
  RecordWriter release(RecordKind::kRelease, actor_, peer);
  release.Put64(frame.seq);
  release.Put32(frame.slot);
  if (absl::Status status = PublishToPeer(peer, release.Take()); !status.ok()) return fail(status);
  if (!allocation_error.ok()) {
    return absl::Status(allocation_error.code(),
                        absl::StrCat("actor ", actor_, ": no device memory for tag ", tag, " from actor ", peer,
                                     ": ", allocation_error.message()));
  }
  return tensors;
}

void IpcTransport::Abort(absl::Status status) {
  if (status.ok()) status = absl::AbortedError("aborted");  // the same status on every side
  {
    absl::MutexLock lock(&recv_mu_);
    if (!mailbox_->Abort(status)) return;
  }
  {
    absl::MutexLock lock(&send_mu_);
    send_abort_ = status;
  }
  host_.Abort(status);
}

absl::Status IpcTransport::Flush(absl::Time deadline) {
  absl::MutexLock lock(&send_mu_);
  auto settled = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!send_abort_.ok()) return true;
    for (const auto& out : outbound_) {
      if (out != nullptr && !out->queue.empty() && out->error.ok()) return false;
    }
    return true;
  };
  send_mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (!send_abort_.ok()) return send_abort_;
  std::string pending;
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    const Outbound* out = outbound_[peer].get();
    if (out == nullptr || out->queue.empty()) continue;
    if (!out->error.ok()) return out->error;
    absl::StrAppend(&pending, " ", peer);
  }
  if (!pending.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("actor ", actor_, ": sends still queued for the device rings to actors", pending));
  }
  return absl::OkStatus();
}

absl::Status IpcTransport::Close(absl::Time deadline) {
  if (closing_) return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": Close called twice"));
  if (!connected_) {
    closing_ = true;
    return absl::OkStatus();
  }
  if (absl::Status status = Flush(deadline); !status.ok()) return status;
  closing_ = true;
  if (absl::Status status = memory_.SynchronizeStream(deadline); !status.ok()) return status;
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (!is_peer_[peer]) continue;
    {
      absl::MutexLock send_lock(&send_mu_);
      absl::MutexLock recv_lock(&recv_mu_);
      CloseImports(*inbound_[peer], *outbound_[peer]);
    }
    if (absl::Status status = PublishToPeer(peer, RecordWriter(RecordKind::kClosed, actor_, peer).Take());
        !status.ok()) {
      return status;
    }
  }
  absl::MutexLock lock(&send_mu_);
  auto all_closed = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!send_abort_.ok()) return true;
    for (const auto& out : outbound_) {
      if (out != nullptr && !out->peer_closed && out->error.ok()) return false;
    }
    return true;
  };
  send_mu_.AwaitWithDeadline(absl::Condition(&all_closed), deadline);
  if (!send_abort_.ok()) return send_abort_;
  std::string pending;
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    const Outbound* out = outbound_[peer].get();
    if (out == nullptr || out->peer_closed) continue;
    if (!out->error.ok()) return out->error;
    absl::StrAppend(&pending, " ", peer);
  }
  if (!pending.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("actor ", actor_, ": actors", pending, " did not close their IPC imports before the deadline"));
  }
  // Every peer has closed what it imported: the exports may go.
  absl::MutexLock recv_lock(&recv_mu_);
  for (int32_t peer = 0; peer < num_actors_; ++peer) {
    if (is_peer_[peer]) FreeExports(*inbound_[peer], *outbound_[peer]);
  }
  return absl::OkStatus();
}

void IpcTransport::FailPeer(int32_t peer, absl::Status status) {
  {
    absl::MutexLock lock(&send_mu_);
    if (outbound_[peer]->error.ok()) outbound_[peer]->error = status;
  }
  absl::MutexLock lock(&recv_mu_);
  mailbox_->FailPeer(peer, std::move(status));
}

void IpcTransport::PumpLoop(int32_t peer, uint64_t next_host_index) {
  while (!stopping_) {
    const absl::Time slice_end = absl::Now() + kPumpSlice;
    absl::StatusOr<std::vector<ir::HostTensor>> got = host_.Receive(peer, kIpcHostTagBase + next_host_index, slice_end);
    if (stopping_) return;
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDeadlineExceeded && absl::Now() >= slice_end) continue;
      FailPeer(peer, absl::Status(got.status().code(), absl::StrCat("actor ", actor_, ": the host channel from actor ",
                                                                     peer, " failed: ", got.status().message())));
      return;
    }
    ++next_host_index;
    absl::StatusOr<std::vector<int32_t>> words = ParseRecord(*got, peer, actor_);
    absl::Status status = words.status();
    if (status.ok()) {
      switch (KindOf(*words)) {
        case RecordKind::kMessage:
          status = HandleFrame(peer, *words);
          break;
        case RecordKind::kRelease:
          status = HandleRelease(peer, *words);
          break;
        case RecordKind::kClosed: {
          {
            absl::MutexLock lock(&send_mu_);
            outbound_[peer]->peer_closed = true;
          }
          // Frames already here can still be received (the peer keeps its
          // ring until this actor closes too); nothing more will come.
          absl::MutexLock lock(&recv_mu_);
          mailbox_->FailPeer(peer, absl::UnavailableError(absl::StrCat(
                                       "actor ", peer, " closed its IPC transport; nothing more will come from it")));
          return;
        }
        default:
          status = absl::DataLossError(absl::StrCat("actor ", actor_, ": unexpected record of kind ", (*words)[1],
                                                    " from actor ", peer));
      }
    }
    if (!status.ok()) {
      FailPeer(peer, status);
      return;
    }
  }
}

absl::Status IpcTransport::HandleFrame(int32_t peer, const std::vector<int32_t>& words) {
  absl::MutexLock lock(&recv_mu_);
  Inbound& in = *inbound_[peer];
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("actor ", actor_, ": malformed frame from actor ", peer, ": ", why));
  };
  RecordReader reader(words);
  Frame frame;
  frame.seq = reader.Get64();
  const uint64_t tag = reader.Get64();
  frame.slot = reader.Get32();
  const int32_t count = reader.Get32();
  if (!reader.ok() || count < 0 || static_cast<size_t>(count) > kMaxTensors ||
      reader.left() != static_cast<size_t>(count) * kTensorWords) {
    return bad("wrong length");
  }
  if (frame.slot < 0 || frame.slot >= options_.slots || in.slot_in_use[frame.slot]) {
    return bad(absl::StrCat("slot ", frame.slot, " is out of range or still in use"));
  }
  for (int32_t i = 0; i < count; ++i) {
    Frame::Tensor tensor;
    absl::StatusOr<ir::TensorType> type = ipc::GetType(reader);
    if (!type.ok()) return bad(absl::StrCat("tensor ", i, ": ", type.status().message()));
    tensor.type = *std::move(type);
    tensor.offset = reader.Get64();
    tensor.bytes = reader.Get64();
    if (static_cast<uint64_t>(tensor.type.num_bytes()) != tensor.bytes || tensor.offset % kIpcAlignment != 0 ||
        tensor.offset > in.capacity || tensor.bytes > in.capacity - tensor.offset) {
      return bad(absl::StrCat("tensor ", i, " (", ir::TypeToString(tensor.type), ", ", tensor.bytes, " bytes at ",
                              tensor.offset, ") does not fit its type or the ring"));
    }
    frame.tensors.push_back(std::move(tensor));
  }
  const int32_t slot = frame.slot;
  if (absl::Status filed = mailbox_->File(peer, tag, std::move(frame)); !filed.ok()) {
    return absl::Status(filed.code(), absl::StrCat("actor ", actor_, ": ", filed.message()));
  }
  in.slot_in_use[slot] = true;
  return absl::OkStatus();
}

absl::Status IpcTransport::HandleRelease(int32_t peer, const std::vector<int32_t>& words) {
  RecordReader reader(words);
  const uint64_t seq = reader.Get64();
  const int32_t slot = reader.Get32();
  absl::MutexLock lock(&send_mu_);
  Outbound& out = *outbound_[peer];
  auto it = std::find_if(out.in_flight.begin(), out.in_flight.end(),
                         [&](const Outbound::InFlight& m) { return m.seq == seq; });
  if (!reader.ok() || reader.left() != 0 || it == out.in_flight.end() || it->slot != slot || it->released) {
    return absl::DataLossError(absl::StrCat("actor ", actor_, ": actor ", peer, " released message ", seq,
                                            " in slot ", slot, ", which is not in flight"));
  }
  it->released = true;
  out.outstanding_tags.erase(it->tag);
  if (!out.error.ok()) return absl::OkStatus();
  // A device failure here breaks the pair (the pump reports it to both sides).
  return FlushLocked(out);
}

}  // namespace tandem::actor

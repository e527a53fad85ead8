#include "actor/nccl_transport.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/ipc_record.h"

namespace tandem::actor {
namespace {

using ipc::RecordKind;
using ipc::RecordReader;
using ipc::RecordWriter;

constexpr size_t kIdWords = nccl::kNcclUniqueIdBytes / sizeof(int32_t);
constexpr size_t kDeviceWords = nccl::kDeviceIdBytes / sizeof(int32_t);
// How often Connect polls the communicators and Flush the sent events.
constexpr absl::Duration kPoll = absl::Microseconds(50);

absl::Status Context(const absl::Status& status, int32_t actor, int32_t peer, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat("actor ", actor, ": ", what, " actor ", peer, ": ", status.message()));
}

}  // namespace

NcclTransport::NcclTransport(int32_t actor, int32_t num_actors, nccl::NcclLibrary& nccl, Transport& host_channel)
    : actor_(actor), num_actors_(num_actors), nccl_(nccl), memory_(nccl.memory()), host_(host_channel) {}

absl::StatusOr<std::unique_ptr<NcclTransport>> NcclTransport::Create(int32_t actor, int32_t num_actors,
                                                                     nccl::NcclLibrary& nccl,
                                                                     Transport& host_channel,
                                                                     std::vector<int32_t> peers) {
  if (num_actors <= 0 || actor < 0 || actor >= num_actors) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL transport of actor ", actor, " of ", num_actors));
  }
  std::unique_ptr<NcclTransport> transport(new NcclTransport(actor, num_actors, nccl, host_channel));
  absl::MutexLock lock(&transport->mu_);
  transport->link_of_.assign(static_cast<size_t>(num_actors), nullptr);
  std::sort(peers.begin(), peers.end());
  for (int32_t peer : peers) {
    if (peer < 0 || peer >= num_actors || peer == actor || transport->link_of_[peer] != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("actor ", actor, ": bad NCCL peer ", peer, " (of ", num_actors, " actors)"));
    }
    auto link = std::make_unique<Link>();
    link->peer = peer;
    transport->link_of_[peer] = link.get();
    transport->links_.push_back(std::move(link));
  }
  return transport;
}

NcclTransport::~NcclTransport() {
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Link>& link : links_) {
    Reap(*link).IgnoreError();
    // Transfers still pending (a send not received, a receive not claimed)
    // end with an abort; idle communicators are released in order.
    const bool idle = link->sent.empty() && link->arrived.empty() && abort_.ok();
    for (nccl::NcclLibrary::Comm comm : {link->send_comm, link->recv_comm}) {
      if (comm == 0) continue;
      if (idle) {
        nccl_.Destroy(comm).IgnoreError();
      } else {
        nccl_.Abort(comm);
      }
    }
  }
  for (backends::DeviceEvent event : all_events_) memory_.DestroyEvent(event).IgnoreError();
}

int64_t NcclTransport::sends_in_flight() const {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  for (const std::unique_ptr<Link>& link : links_) count += static_cast<int64_t>(link->sent.size());
  return count;
}

bool NcclTransport::Reaches(int32_t peer) const {
  absl::MutexLock lock(&mu_);
  return connected_ && peer >= 0 && peer < num_actors_ && link_of_[peer] != nullptr && !link_of_[peer]->same_device;
}

absl::StatusOr<NcclTransport::Link*> NcclTransport::LinkTo(int32_t peer) {
  if (!abort_.ok()) return abort_;
  if (!connected_) return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": NCCL transport not connected"));
  if (peer < 0 || peer >= num_actors_ || link_of_[peer] == nullptr || link_of_[peer]->same_device) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, ": actor ", peer, " is not an NCCL peer"));
  }
  Link& link = *link_of_[peer];
  if (absl::Status health = Health(link); !health.ok()) return health;
  return &link;
}

absl::Status NcclTransport::Health(const Link& link) {
  if (!abort_.ok()) return abort_;
  if (link.same_device) return absl::OkStatus();
  for (nccl::NcclLibrary::Comm comm : {link.send_comm, link.recv_comm}) {
    absl::StatusOr<bool> state = nccl_.State(comm);
    if (!state.ok()) return Context(state.status(), actor_, link.peer, "the NCCL link with");
  }
  return absl::OkStatus();
}

absl::StatusOr<backends::DeviceEvent> NcclTransport::TakeEvent() {
  if (!free_events_.empty()) {
    const backends::DeviceEvent event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  absl::StatusOr<backends::DeviceEvent> event = memory_.CreateIpcEvent();
  if (event.ok()) all_events_.push_back(*event);
  return event;
}

absl::Status NcclTransport::FollowMainStream(backends::StreamId side) {
  absl::StatusOr<backends::DeviceEvent> point = TakeEvent();
  if (!point.ok()) return point.status();
  if (absl::Status status = memory_.RecordEvent(*point); !status.ok()) return status;
  if (absl::Status status = memory_.StreamWaitEventOn(side, *point); !status.ok()) return status;
  free_events_.push_back(*point);  // the wait concerns the record above alone
  return absl::OkStatus();
}

absl::Status NcclTransport::Reap(Link& link) {
  while (!link.sent.empty()) {
    absl::StatusOr<bool> done = memory_.QueryEvent(link.sent.front().done);
    if (!done.ok()) return done.status();
    if (!*done) break;
    free_events_.push_back(link.sent.front().done);
    link.sent.pop_front();
  }
  return absl::OkStatus();
}

absl::Status NcclTransport::Connect(absl::Time deadline) {
  std::vector<Link*> links;
  {
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    if (connected_) return absl::FailedPreconditionError(absl::StrCat("actor ", actor_, ": NCCL transport connected twice"));
    for (const std::unique_ptr<Link>& link : links_) links.push_back(link.get());
  }
  // Each actor makes the id of the communicator it sends on; the host
  // channel does not block, so every setup record goes out first.
  absl::StatusOr<std::string> device = nccl_.DeviceId();
  if (!device.ok()) return device.status();
  if (device->size() != nccl::kDeviceIdBytes) {
    return absl::InternalError(absl::StrCat(nccl_.name(), ": a device id of ", device->size(), " bytes"));
  }
  std::vector<std::string> own_ids;
  for (Link* link : links) {
    absl::StatusOr<std::string> id = nccl_.NewUniqueId();
    if (!id.ok()) return Context(id.status(), actor_, link->peer, "an NCCL unique id for");
    RecordWriter setup(RecordKind::kNcclSetup, actor_, link->peer);
    std::vector<int32_t> words(kIdWords + kDeviceWords);
    std::memcpy(words.data(), id->data(), nccl::kNcclUniqueIdBytes);
    std::memcpy(words.data() + kIdWords, device->data(), nccl::kDeviceIdBytes);
    for (int32_t word : words) setup.Put32(word);
    if (absl::Status status = host_.Send(link->peer, kNcclHostTagBase, {ipc::RecordTensor(setup.Take())});
        !status.ok()) {
      return Context(status, actor_, link->peer, "the host channel to");
    }
    own_ids.push_back(*std::move(id));
  }
  for (size_t i = 0; i < links.size(); ++i) {
    Link& link = *links[i];
    absl::StatusOr<std::vector<ir::HostTensor>> got = host_.Receive(link.peer, kNcclHostTagBase, deadline);
    if (!got.ok()) return Context(got.status(), actor_, link.peer, "the NCCL setup from");
    absl::StatusOr<std::vector<int32_t>> words = ipc::ParseRecord(*got, link.peer, actor_);
    if (!words.ok()) return words.status();
    if (ipc::KindOf(*words) != RecordKind::kNcclSetup ||
        words->size() != ipc::kRecordHeadWords + kIdWords + kDeviceWords) {
      return absl::DataLossError(
          absl::StrCat("actor ", actor_, ": the first record from actor ", link.peer, " is not its NCCL setup"));
    }
    std::string peer_id(nccl::kNcclUniqueIdBytes, '\0');
    std::memcpy(peer_id.data(), words->data() + ipc::kRecordHeadWords, nccl::kNcclUniqueIdBytes);
    std::string peer_device(nccl::kDeviceIdBytes, '\0');
    std::memcpy(peer_device.data(), words->data() + ipc::kRecordHeadWords + kIdWords, nccl::kDeviceIdBytes);
    if (peer_device == *device) {
      // Both sides see it: neither joins.
      absl::MutexLock lock(&mu_);
      link.same_device = true;
      continue;
    }
    absl::StatusOr<backends::StreamId> send_stream = memory_.CreateSideStream();
    if (!send_stream.ok()) return send_stream.status();
    absl::StatusOr<backends::StreamId> recv_stream = memory_.CreateSideStream();
    if (!recv_stream.ok()) return recv_stream.status();
    absl::StatusOr<nccl::NcclLibrary::Comm> send_comm = nccl_.StartJoin(own_ids[i], 2, 0);
    if (!send_comm.ok()) return Context(send_comm.status(), actor_, link.peer, "joining the NCCL link to");
    absl::StatusOr<nccl::NcclLibrary::Comm> recv_comm = nccl_.StartJoin(peer_id, 2, 1);
    if (!recv_comm.ok()) {
      nccl_.Abort(*send_comm);
      return Context(recv_comm.status(), actor_, link.peer, "joining the NCCL link from");
    }
    absl::MutexLock lock(&mu_);
    link.send_stream = *send_stream;
    link.recv_stream = *recv_stream;
    link.send_comm = *send_comm;
    link.recv_comm = *recv_comm;
    if (!abort_.ok()) return abort_;
  }
  // Every communicator joins at once; wait until all are ready.
  for (Link* link : links) {
    if (link->same_device) continue;
    for (nccl::NcclLibrary::Comm comm : {link->send_comm, link->recv_comm}) {
      while (true) {
        absl::StatusOr<bool> ready = nccl_.State(comm);
        if (!ready.ok()) return Context(ready.status(), actor_, link->peer, "joining the NCCL link with");
        if (*ready) break;
        {
          absl::MutexLock lock(&mu_);
          if (!abort_.ok()) return abort_;
        }
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(absl::StrCat("actor ", actor_, ": actor ", link->peer,
                                                          " did not join its NCCL link in time"));
        }
        absl::SleepFor(kPoll);
      }
    }
  }
  absl::MutexLock lock(&mu_);
  connected_ = true;
  return abort_;
}

absl::Status NcclTransport::Send(int32_t peer, uint64_t tag, std::vector<backends::DeviceTensor> tensors) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Link*> found = LinkTo(peer);
  if (!found.ok()) return found.status();
  Link& link = **found;
  if (absl::Status status = Reap(link); !status.ok()) return status;
  if (tensors.size() > ipc::kMaxTensors) {
    return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, ": a message of ", tensors.size(),
                                                   " tensors; at most ", ipc::kMaxTensors));
  }
  RecordWriter record(RecordKind::kNcclMessage, actor_, peer);
  record.Put64(tag);
  record.Put32(static_cast<int32_t>(tensors.size()));
  for (const backends::DeviceTensor& tensor : tensors) {
    if (!tensor.defined() || tensor.type.rank() > ipc::kMaxRank || &tensor.storage->memory() != &memory_) {
      return absl::InvalidArgumentError(absl::StrCat("actor ", actor_, ": tag ", tag, " to actor ", peer,
                                                     ": not a tensor of this device of rank <= ", ipc::kMaxRank));
    }
    ipc::PutType(record, tensor.type);
  }
  // The send stream starts when the main stream has made the tensors.
  if (absl::Status status = FollowMainStream(link.send_stream); !status.ok()) return status;
  for (const backends::DeviceTensor& tensor : tensors) {
    if (absl::Status status = nccl_.Send(link.send_comm, tensor.address(), tensor.num_bytes(), 1, link.send_stream);
        !status.ok()) {
      return Context(status, actor_, peer, "an NCCL send to");
    }
  }
  absl::StatusOr<backends::DeviceEvent> done = TakeEvent();
  if (!done.ok()) return done.status();
  if (absl::Status status = memory_.RecordEventOn(link.send_stream, *done); !status.ok()) return status;
  link.sent.push_back({std::move(tensors), *done});
  if (absl::Status status =
          host_.Send(peer, kNcclHostTagBase + link.next_send_seq, {ipc::RecordTensor(record.Take())});
      !status.ok()) {
    return Context(status, actor_, peer, "the host channel to");
  }
  ++link.next_send_seq;
  return absl::OkStatus();
}

absl::Status NcclTransport::Accept(Link& link, const std::vector<int32_t>& words) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("actor ", actor_, ": malformed NCCL record from actor ", link.peer, ": ", why));
  };
  if (ipc::KindOf(words) != RecordKind::kNcclMessage) return bad("not a message");
  RecordReader reader(words);
  const uint64_t tag = reader.Get64();
  const int32_t count = reader.Get32();
  if (!reader.ok() || count < 0 || static_cast<size_t>(count) > ipc::kMaxTensors ||
      reader.left() != static_cast<size_t>(count) * ipc::kTypeWords) {
    return bad("wrong length");
  }
  if (link.arrived.contains(tag)) return bad(absl::StrCat("tag ", tag, " arrived twice"));
  std::vector<ir::TensorType> types;
  for (int32_t i = 0; i < count; ++i) {
    absl::StatusOr<ir::TensorType> type = ipc::GetType(reader);
    if (!type.ok()) return bad(absl::StrCat("tensor ", i, ": ", type.status().message()));
    types.push_back(*std::move(type));
  }
  Arrived arrived;
  for (const ir::TensorType& type : types) {
    absl::StatusOr<backends::DeviceTensor> tensor = backends::AllocateDeviceTensor(memory_, type);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(), absl::StrCat("actor ", actor_, ": no device memory for tag ", tag,
                                                               " from actor ", link.peer, ": ",
                                                               tensor.status().message()));
    }
    arrived.tensors.push_back(*std::move(tensor));
  }
  // The receive stream starts when the main stream has made the buffers
  // (a stream-ordered pool), then receives in the sender's order.
  if (absl::Status status = FollowMainStream(link.recv_stream); !status.ok()) return status;
  for (const backends::DeviceTensor& tensor : arrived.tensors) {
    if (absl::Status status =
            nccl_.Receive(link.recv_comm, tensor.address(), tensor.num_bytes(), 0, link.recv_stream);
        !status.ok()) {
      return Context(status, actor_, link.peer, "an NCCL receive from");
    }
  }
  absl::StatusOr<backends::DeviceEvent> done = TakeEvent();
  if (!done.ok()) return done.status();
  if (absl::Status status = memory_.RecordEventOn(link.recv_stream, *done); !status.ok()) return status;
  arrived.done = *done;
  link.arrived.emplace(tag, std::move(arrived));
  ++link.next_recv_seq;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<backends::DeviceTensor>> NcclTransport::Receive(int32_t peer, uint64_t tag,
                                                                           absl::Time deadline) {
  while (true) {
    Link* link = nullptr;
    uint64_t seq = 0;
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<Link*> found = LinkTo(peer);
      if (!found.ok()) return found.status();
      link = *found;
      if (absl::Status status = Reap(*link); !status.ok()) return status;
      if (auto it = link->arrived.find(tag); it != link->arrived.end()) {
        // Ready in the main stream's order once the receive stream got there.
        Arrived arrived = std::move(it->second);
        link->arrived.erase(it);
        if (absl::Status status = memory_.StreamWaitEvent(arrived.done); !status.ok()) return status;
        free_events_.push_back(arrived.done);
        return std::move(arrived.tensors);
      }
      seq = link->next_recv_seq;
    }
    // The peer's next record, outside the lock (Abort wakes the wait).
    absl::StatusOr<std::vector<ir::HostTensor>> got = host_.Receive(peer, kNcclHostTagBase + seq, deadline);
    if (!got.ok()) {
      if (got.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat("actor ", actor_, ": no device message tag ", tag, " from actor ", peer, " by the deadline"));
      }
      return got.status();
    }
    absl::StatusOr<std::vector<int32_t>> words = ipc::ParseRecord(*got, peer, actor_);
    if (!words.ok()) return words.status();
    absl::MutexLock lock(&mu_);
    if (!abort_.ok()) return abort_;
    if (absl::Status status = Accept(*link, *words); !status.ok()) return status;
  }
}

absl::Status NcclTransport::Flush(absl::Time deadline) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!abort_.ok()) return abort_;
      bool pending = false;
      for (const std::unique_ptr<Link>& link : links_) {
        if (absl::Status status = Health(*link); !status.ok()) return status;
        if (absl::Status status = Reap(*link); !status.ok()) return status;
        pending = pending || !link->sent.empty();
      }
      if (!pending) return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("actor ", actor_, ": device sends were not received by their peers by the deadline"));
    }
    absl::SleepFor(kPoll);
  }
}

void NcclTransport::Abort(absl::Status status) {
  if (status.ok()) status = absl::AbortedError("aborted");
  std::vector<nccl::NcclLibrary::Comm> comms;
  {
    absl::MutexLock lock(&mu_);
    if (abort_.ok()) abort_ = status;
    for (const std::unique_ptr<Link>& link : links_) {
      for (nccl::NcclLibrary::Comm* comm : {&link->send_comm, &link->recv_comm}) {
        if (*comm != 0) comms.push_back(std::exchange(*comm, 0));
      }
    }
  }
  for (nccl::NcclLibrary::Comm comm : comms) nccl_.Abort(comm);
  host_.Abort(std::move(status));
}

}  // namespace tandem::actor

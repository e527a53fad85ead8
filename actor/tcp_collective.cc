#include "actor/tcp_collective.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actor/tcp_transport.h"
#include "ir/all_reduce.h"
#include "ir/host_tensor.h"
#include "ir/limits.h"

namespace tandem::actor {
namespace {

// The transport's tag of an all-reduce's phase: 0 the reduce-scatter, 1
// the all-gather.
uint64_t PhaseTag(uint32_t tag, int phase) { return (uint64_t{tag} << 1) | static_cast<uint64_t>(phase); }

// `values` as one message: a 1-d f32 tensor, or no tensor for none.
std::vector<ir::HostTensor> Message(std::span<const float> values) {
  if (values.empty()) return {};
  return {ir::HostTensor::FromFloats({static_cast<int64_t>(values.size())}, values)};
}

// Copies a received message into `out`; DataLoss when it is not `out.size()`
// floats.
absl::Status Take(const std::vector<ir::HostTensor>& message, std::span<float> out, const std::string& what) {
  const bool fits = out.empty() ? message.empty()
                                : message.size() == 1 && message[0].dtype() == ir::DType::kF32 &&
                                      message[0].num_elements() == static_cast<int64_t>(out.size());
  if (!fits) {
    return absl::DataLossError(absl::StrCat(what, ": expected ", out.size(), " floats, got another message"));
  }
  if (!out.empty()) std::memcpy(out.data(), message[0].f32(), out.size_bytes());
  return absl::OkStatus();
}

}  // namespace

TcpCollectiveGroup::TcpCollectiveGroup(std::vector<int32_t> actors, int32_t rank, std::string host,
                                       std::unique_ptr<TcpTransport> transport)
    : actors_(std::move(actors)), rank_(rank), host_(std::move(host)), transport_(std::move(transport)) {}

TcpCollectiveGroup::~TcpCollectiveGroup() = default;

absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> TcpCollectiveGroup::Open(std::vector<int32_t> actors,
                                                                             int32_t rank,
                                                                             TcpCollectiveOptions options) {
  const auto size = static_cast<int32_t>(actors.size());
  if (size < 2 || size > ir::kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("a replica group has 2 to ", ir::kMaxReplicas, " members, not ", size));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside ", DescribeGroup(actors)));
  }
  TcpTransport::Options transport_options;
  transport_options.bind_host = options.host;
  transport_options.token = std::move(options.token);
  transport_options.log = std::move(options.log);
  transport_options.actor_ids = actors;
  transport_options.group_name = "replica group";
  absl::StatusOr<std::unique_ptr<TcpTransport>> transport = TcpTransport::Listen(rank, size, transport_options);
  if (!transport.ok()) {
    return absl::UnavailableError(absl::StrCat("listening on ", options.host, " for ", DescribeGroup(actors), ": ",
                                               transport.status().message()));
  }
  return std::unique_ptr<TcpCollectiveGroup>(
      new TcpCollectiveGroup(std::move(actors), rank, std::move(options.host), *std::move(transport)));
}

std::string TcpCollectiveGroup::address() const { return absl::StrCat(host_, ":", transport_->port()); }

int64_t TcpCollectiveGroup::refused_connections() const { return transport_->refused_connections(); }

std::vector<std::string> TcpCollectiveGroup::Offer() const {
  std::vector<std::string> offer(actors_.size(), address());
  offer[rank_].clear();
  return offer;
}

absl::Status TcpCollectiveGroup::Connect(const std::vector<std::string>& addresses, absl::Duration timeout) {
  const std::string what = absl::StrCat("actor ", actors_[rank_], " joining ", DescribeGroup(actors_));
  if (connected_) return absl::FailedPreconditionError(absl::StrCat(what, ": already connected"));
  if (static_cast<int32_t>(addresses.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": got ", addresses.size(), " addresses for ", size(), " members"));
  }
  std::vector<std::string> peers(addresses.size());
  for (int32_t peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    const size_t bytes = addresses[peer].size();
    if (bytes == 0 || bytes > kMaxCollectiveAddressBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the address of actor ", actors_[peer], " has ", bytes,
                                                     " bytes; an address has 1 to ", kMaxCollectiveAddressBytes));
    }
    peers[peer] = addresses[peer];
  }
  if (absl::Status status = transport_->ConnectPeers(peers, timeout); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  }
  connected_ = true;
  return absl::OkStatus();
}

absl::Status TcpCollectiveGroup::AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) {
  const std::string what = absl::StrCat("all-reduce tag ", tag, " of ", DescribeGroup(actors_), " on actor ",
                                        actors_[rank_]);
  if (!connected_) return absl::FailedPreconditionError(absl::StrCat(what, ": the group is not connected"));
  const absl::Time deadline = absl::Now() + timeout;
  const int32_t members = size();
  const auto elements = static_cast<int64_t>(bucket.size());
  const ir::Shard own = ir::ShardOf(elements, members, rank_);
  auto shard_of = [&](std::span<float> values, int32_t r) {
    const ir::Shard shard = ir::ShardOf(elements, members, r);
    return values.subspan(static_cast<size_t>(shard.begin), static_cast<size_t>(shard.length));
  };
  auto fail = [&](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
  };

  // Reduce-scatter: copies[r] is shard `rank_` of member r's bucket, in
  // replica order; sized for the largest shard, as
  // ir::AllReduceStagingBytes counts it.
  for (int32_t r = 0; r < members; ++r) {
    if (r == rank_) continue;
    if (absl::Status s = transport_->Send(r, PhaseTag(tag, 0), Message(shard_of(bucket, r))); !s.ok()) return fail(s);
  }
  const auto length = static_cast<size_t>(own.length);
  std::vector<float> copies(static_cast<size_t>(ir::ShardOf(elements, members, 0).length) * members);
  std::vector<const float*> shards(members);
  for (int32_t r = 0; r < members; ++r) {
    std::span<float> copy(copies.data() + r * length, length);
    shards[r] = copy.data();
    if (r == rank_) {
      std::copy_n(shard_of(bucket, rank_).data(), length, copy.data());
      continue;
    }
    absl::StatusOr<std::vector<ir::HostTensor>> received = transport_->Receive(r, PhaseTag(tag, 0), deadline);
    if (!received.ok()) return fail(received.status());
    if (absl::Status s = Take(*received, copy, absl::StrCat("actor ", actors_[r], "'s shard")); !s.ok()) {
      return fail(s);
    }
  }
  // The sum goes into copy 0, element by element after reading it: no
  // staging beyond ir::AllReduceStagingBytes.
  std::span<float> sum(copies.data(), length);
  ir::SumInReplicaOrder(shards, sum);

  // All-gather.
  for (int32_t r = 0; r < members; ++r) {
    if (r == rank_) continue;
    if (absl::Status s = transport_->Send(r, PhaseTag(tag, 1), Message(sum)); !s.ok()) return fail(s);
  }
  std::copy(sum.begin(), sum.end(), shard_of(bucket, rank_).begin());
  for (int32_t r = 0; r < members; ++r) {
    if (r == rank_) continue;
    absl::StatusOr<std::vector<ir::HostTensor>> received = transport_->Receive(r, PhaseTag(tag, 1), deadline);
    if (!received.ok()) return fail(received.status());
    if (absl::Status s = Take(*received, shard_of(bucket, r), absl::StrCat("actor ", actors_[r], "'s sum")); !s.ok()) {
      return fail(s);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<TcpCollectiveGroup>>> ConnectGroupInProcess(
    const std::vector<int32_t>& actors, const TcpCollectiveOptions& options, absl::Duration timeout) {
  const auto size = static_cast<int32_t>(actors.size());
  std::vector<std::unique_ptr<TcpCollectiveGroup>> members;
  for (int32_t rank = 0; rank < size; ++rank) {
    absl::StatusOr<std::unique_ptr<TcpCollectiveGroup>> opened = TcpCollectiveGroup::Open(actors, rank, options);
    if (!opened.ok()) return opened.status();
    members.push_back(*std::move(opened));
  }
  std::vector<absl::Status> connected(size);
  std::vector<std::thread> threads;
  for (int32_t rank = 0; rank < size; ++rank) {
    std::vector<std::string> addresses(size);
    for (int32_t peer = 0; peer < size; ++peer) {
      if (peer != rank) addresses[peer] = members[peer]->Offer()[rank];
    }
    threads.emplace_back([&, rank, addresses = std::move(addresses)] {
      connected[rank] = members[rank]->Connect(addresses, timeout);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : connected) {
    if (!status.ok()) return status;
  }
  return members;
}

}  // namespace tandem::actor

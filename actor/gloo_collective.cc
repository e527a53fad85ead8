#include "actor/gloo_collective.h"

#include <chrono>
#include <algorithm>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gloo/allgatherv.h"
#include "gloo/alltoallv.h"
#include "gloo/common/error.h"
#include "gloo/context.h"
#include "gloo/transport/context.h"
#include "gloo/transport/device.h"
#include "gloo/transport/tcp/device.h"
#include "ir/all_reduce.h"
#include "ir/limits.h"

namespace tandem::actor {

// A gloo::Context whose pairs are made and connected by GlooGroup's two
// rounds instead of a rendezvous store.
class GlooGroup::Context final : public gloo::Context {
 public:
  // Pairs take their timeout from the context when they are created.
  Context(int rank, int size, std::shared_ptr<gloo::transport::Device> device, absl::Duration timeout)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    transportContext_ = device_->createContext(rank, size);
    SetTimeout(timeout);
  }

  std::vector<std::string> CreatePairs() {
    std::vector<std::string> offer(size);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      std::unique_ptr<gloo::transport::Pair>& pair = transportContext_->createPair(peer);
      std::vector<char> bytes = pair->address().bytes();
      offer[peer].assign(bytes.begin(), bytes.end());
    }
    return offer;
  }

  void ConnectPair(int peer, const std::string& address) {
    transportContext_->getPair(peer)->connect(std::vector<char>(address.begin(), address.end()));
  }

  void SetTimeout(absl::Duration timeout) {
    const auto millis = std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
    setTimeout(millis);
    transportContext_->setTimeout(millis);
  }
};

namespace {

std::chrono::milliseconds Millis(absl::Duration timeout) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
}

// A Gloo exception as a Status: its I/O errors (a lost peer, a timeout) are
// Unavailable or DeadlineExceeded.
absl::Status FromGloo(const std::exception& error, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", error.what());
  if (dynamic_cast<const gloo::IoException*>(&error) != nullptr) {
    const bool timed_out = std::string(error.what()).find("imed out") != std::string::npos;
    return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

}  // namespace

GlooGroup::GlooGroup(std::vector<int32_t> actors, int32_t rank, std::shared_ptr<Context> context)
    : actors_(std::move(actors)), rank_(rank), context_(std::move(context)) {}

GlooGroup::~GlooGroup() = default;

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Open(std::vector<int32_t> actors, int32_t rank,
                                                           const std::string& host, absl::Duration timeout) {
  const auto size = static_cast<int32_t>(actors.size());
  if (size < 2 || size > ir::kMaxReplicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("a replica group has 2 to ", ir::kMaxReplicas, " members, not ", size));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside ", DescribeGroup(actors)));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<Context>(rank, size, std::move(device), timeout);
    std::vector<std::string> offer = context->CreatePairs();
    auto group = std::unique_ptr<GlooGroup>(new GlooGroup(std::move(actors), rank, std::move(context)));
    group->offer_ = std::move(offer);
    return group;
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat("opening a Gloo device on ", host, " for ", DescribeGroup(actors),
                                               ": ", error.what()));
  }
}

std::vector<std::string> GlooGroup::Offer() const { return offer_; }

absl::Status GlooGroup::Connect(const std::vector<std::string>& addresses, absl::Duration timeout) {
  const std::string what = absl::StrCat("actor ", actors_[rank_], " joining ", DescribeGroup(actors_));
  if (connected_) return absl::FailedPreconditionError(absl::StrCat(what, ": already connected"));
  if (static_cast<int32_t>(addresses.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": got ", addresses.size(), " addresses for ", size(), " members"));
  }
  for (int32_t peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    const size_t bytes = addresses[peer].size();
    if (bytes == 0 || bytes > kMaxCollectiveAddressBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": the address of actor ", actors_[peer], " has ", bytes,
                                                     " bytes; an address has 1 to ", kMaxCollectiveAddressBytes));
    }
  }
  try {
    context_->SetTimeout(timeout);
    for (int32_t peer = 0; peer < size(); ++peer) {
      if (peer != rank_) context_->ConnectPair(peer, addresses[peer]);
    }
  } catch (const std::exception& error) {
    return FromGloo(error, what);
  }
  connected_ = true;
  return absl::OkStatus();
}

absl::Status GlooGroup::AllReduce(std::span<float> bucket, uint32_t tag, absl::Duration timeout) {
  const std::string what = absl::StrCat("all-reduce tag ", tag, " of ", DescribeGroup(actors_), " on actor ",
                                        actors_[rank_]);
  if (!connected_) return absl::FailedPreconditionError(absl::StrCat(what, ": the group is not connected"));
  const int32_t members = size();
  const auto elements = static_cast<int64_t>(bucket.size());
  const ir::Shard own = ir::ShardOf(elements, members, rank_);
  std::vector<int64_t> sent(members);
  std::vector<size_t> gathered(members);
  for (int32_t r = 0; r < members; ++r) {
    sent[r] = ir::ShardOf(elements, members, r).length;
    gathered[r] = static_cast<size_t>(sent[r]);
  }
  // copies[r] is shard `rank_` of member r's bucket, in replica order; sized
  // for the largest shard, as ir::AllReduceStagingBytes counts it.
  std::vector<float> copies(static_cast<size_t>(ir::ShardOf(elements, members, 0).length) * members);
  try {
    gloo::AlltoallvOptions scatter(context_);
    scatter.setInput(bucket.data(), sent);
    scatter.setOutput(copies.data(), std::vector<int64_t>(members, own.length));
    scatter.setTag(2 * tag);
    scatter.setTimeout(Millis(timeout));
    gloo::alltoallv(scatter);

    std::vector<const float*> shards(members);
    for (int32_t r = 0; r < members; ++r) shards[r] = copies.data() + r * own.length;
    // The sum goes into copy 0, element by element after reading it: no
    // staging beyond ir::AllReduceStagingBytes.
    std::span<float> sum(copies.data(), static_cast<size_t>(own.length));
    ir::SumInReplicaOrder(shards, sum);

    gloo::AllgathervOptions gather(context_);
    gather.setInput(sum.data(), sum.size());
    gather.setOutput(bucket.data(), gathered);
    gather.setTag(2 * tag + 1);
    gather.setTimeout(Millis(timeout));
    gloo::allgatherv(gather);
  } catch (const std::exception& error) {
    return FromGloo(error, what);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<GlooGroup>>> ConnectGroupInProcess(const std::vector<int32_t>& actors,
                                                                                const std::string& host,
                                                                                absl::Duration timeout) {
  const auto size = static_cast<int32_t>(actors.size());
  std::vector<std::unique_ptr<GlooGroup>> members;
  for (int32_t rank = 0; rank < size; ++rank) {
    absl::StatusOr<std::unique_ptr<GlooGroup>> opened = GlooGroup::Open(actors, rank, host, timeout);
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

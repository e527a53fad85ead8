// How LocalLauncher's actors reach each other: which pairs share memory or a
// device (and so which medium each pair's data plane uses), the data plane's
// setup through the actors (openDataPlane, then connectDataPlane with every
// peer's address), and the replica groups' rendezvous. local_launcher.cc
// starts the actors and drives the steps.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "controller/local_launcher.h"
#include "ir/device_spec.h"
#include "rpc/capnp_text.h"
#include "rpc/tandem.capnp.h"

namespace tandem::controller {

using rpc::ToString;

namespace wire = rpc::wire;

bool LocalLauncher::SharedMemoryBetween(int32_t actor, int32_t peer) const {
  switch (options_.data_plane) {
    case ir::DataPlaneKind::kShm:
      return true;
    case ir::DataPlaneKind::kTcp:
      return false;
    case ir::DataPlaneKind::kAuto:
      // The hosts the actors reported (all empty on this host alone).
      return nodes_[actor] == nodes_[peer];
  }
  return false;
}

namespace {

// The NVIDIA GPUs this process would see, without loading CUDA into the
// controller: CUDA_VISIBLE_DEVICES's entries where it is set, else the
// driver's /dev/nvidiaN device files.
int VisibleGpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    int count = 0;
    for (absl::string_view entry : absl::StrSplit(visible, ',', absl::SkipWhitespace())) {
      if (!entry.empty()) ++count;
    }
    return count;
  }
  int count = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      ++count;
    }
  }
  return count;
}

}  // namespace

bool LocalLauncher::SharesDevice(int32_t actor, int32_t peer) const {
  if (nodes_[actor] != nodes_[peer]) return false;
  absl::StatusOr<ir::DeviceSpec> spec = ir::ParseDeviceSpec(options_.device);
  if (!spec.ok() || spec->kind == ir::DeviceSpec::Kind::kCpu) return false;
  if (spec->kind == ir::DeviceSpec::Kind::kCuda && spec->index < 0 && srun_step_ != nullptr) {
    // Each srun task picks its GPU among those Slurm lets it see, which this
    // process cannot tell apart: such actors stage through the host.
    return false;
  }
  // Forked actors see the GPUs this process sees.
  static const int visible = VisibleGpus();
  return ir::ActorsShareDevice(*spec, actor, peer, visible);
}

std::string LocalLauncher::DescribeDataPlane() const {
  if (static_cast<int32_t>(nodes_.size()) != num_actors_) return "";  // not started
  // Device-resident actors on different devices exchange device tensors
  // over NCCL (actor/device_transport.h).
  absl::StatusOr<ir::DeviceSpec> spec = ir::ParseDeviceSpec(options_.device);
  const bool device_resident = spec.ok() && spec->kind != ir::DeviceSpec::Kind::kCpu;
  std::vector<std::string> pairs;
  for (int32_t a = 0; a < num_actors_; ++a) {
    for (int32_t b = a + 1; b < num_actors_; ++b) {
      const char* medium = SharesDevice(a, b)    ? "ipc"
                           : device_resident     ? "nccl"
                           : SharedMemoryBetween(a, b) ? "shm"
                                                       : "tcp";
      pairs.push_back(absl::StrCat(a, "-", b, " ", medium));
    }
  }
  return absl::StrJoin(pairs, ", ");
}

absl::Status LocalLauncher::SetUpDataPlane() {
  absl::Status opened = CallAll("data-plane setup (openDataPlane)", options_.start_timeout, [&](int32_t actor) {
    loop_->Track(actor, loop_->actor(actor).openDataPlaneRequest().send().then([this, actor](auto&& response) {
      const std::string address = ToString(response.getTcpAddress());
      loop_->tcp_addresses[actor] = address.empty() ? address : Dial(address);
      for (wire::OutboundRegion::Reader region : response.getRegions()) {
        if (region.hasPath()) {
          loop_->region_paths[actor].emplace(region.getPeer(), ToString(region.getPath()));
        } else {
          loop_->regions[actor].emplace(region.getPeer(), region.getRegion());
        }
      }
    }));
  });
  if (!opened.ok()) return opened;
  const int64_t timeout_ms = absl::ToInt64Milliseconds(options_.start_timeout);
  return CallAll("data-plane setup (connectDataPlane)", options_.start_timeout, [&](int32_t actor) {
    auto request = loop_->actor(actor).connectDataPlaneRequest();
    request.setTimeoutMillis(timeout_ms);
    auto peers = request.initPeers(static_cast<unsigned>(num_actors_ - 1));
    unsigned index = 0;
    for (int32_t peer = 0; peer < num_actors_; ++peer) {
      if (peer == actor) continue;
      wire::DataPlanePeer::Builder entry = peers[index++];
      entry.setActor(peer);
      entry.setSharesDevice(SharesDevice(actor, peer));
      if (!SharedMemoryBetween(actor, peer)) {
        entry.setTcpAddress(loop_->tcp_addresses[peer]);
        continue;
      }
      auto region = loop_->regions[peer].find(actor);
      if (region != loop_->regions[peer].end()) entry.setRegion(region->second);
      auto path = loop_->region_paths[peer].find(actor);
      if (path != loop_->region_paths[peer].end()) entry.setRegionPath(path->second);
    }
    loop_->Track(actor, request.send().ignoreResult());
  });
}

absl::Status LocalLauncher::SetUpReplicaGroups() {
  std::vector<int32_t> members;
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    if (!facts_.groups[actor].empty()) members.push_back(actor);
  }
  if (members.empty()) return absl::OkStatus();
  absl::Status opened = CallSome("replica-group setup (openReplicaGroup)", options_.start_timeout, members,
                                 [&](int32_t actor) {
    auto request = loop_->actor(actor).openReplicaGroupRequest();
    const std::vector<int32_t>& group = facts_.groups[actor];
    auto list = request.initGroup(static_cast<unsigned>(group.size()));
    for (size_t i = 0; i < group.size(); ++i) list.set(static_cast<unsigned>(i), group[i]);
    loop_->Track(actor, request.send().then([this, actor](auto&& response) {
      std::vector<std::string>& offers = loop_->replica_offers[actor];
      offers.clear();
      for (capnp::Data::Reader offer : response.getOffers()) {
        offers.emplace_back(reinterpret_cast<const char*>(offer.begin()), offer.size());
      }
    }));
  });
  if (!opened.ok()) return opened;
  const int64_t timeout_ms = absl::ToInt64Milliseconds(options_.start_timeout);
  return CallSome("replica-group setup (connectReplicaGroup)", options_.start_timeout, members, [&](int32_t actor) {
    const std::vector<int32_t>& group = facts_.groups[actor];
    const auto rank = static_cast<size_t>(std::find(group.begin(), group.end(), actor) - group.begin());
    auto request = loop_->actor(actor).connectReplicaGroupRequest();
    request.setTimeoutMillis(timeout_ms);
    auto offers = request.initOffers(static_cast<unsigned>(group.size()));
    for (size_t member = 0; member < group.size(); ++member) {
      const std::vector<std::string>& offered = loop_->replica_offers[group[member]];
      if (member == rank || rank >= offered.size()) continue;
      const std::string& offer = offered[rank];
      offers.set(static_cast<unsigned>(member),
                 kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(offer.data()), offer.size()));
    }
    loop_->Track(actor, request.send().ignoreResult());
  });
}

}  // namespace tandem::controller

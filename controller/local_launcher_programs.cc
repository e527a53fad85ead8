// The programs LocalLauncher's actors run: what the launcher keeps of them
// (each actor's stages, replica group, dispatch ranges, state bindings and
// ring size), handing them over under their content hashes (each actor
// caches what it was sent), and switching to others on the same actors
// (UsePrograms). local_launcher.cc starts the actors and drives the steps.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/launcher_loop.h"
#include "controller/local_launcher.h"
#include "rpc/program_codec.h"
#include "rpc/tandem.capnp.h"

namespace tandem::controller {

absl::StatusOr<LocalLauncher::ProgramFacts> LocalLauncher::Facts(const std::vector<ir::ActorProgram>& programs) const {
  ProgramFacts facts;
  facts.stages.assign(num_actors_, {});
  facts.groups.assign(num_actors_, {});
  facts.bounds.assign(num_actors_, {});
  facts.state_bindings.assign(num_actors_, {});
  facts.ring_bytes.assign(num_actors_, 0);
  for (int32_t index = 0; index < num_actors_; ++index) {
    const ir::ActorProgram& program = programs[index];
    if (absl::StatusOr<int32_t> replica = ir::ReplicaOf(program, index, num_actors_); !replica.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("program ", index, " ", replica.status().message()));
    }
    facts.bounds[index] = ir::DispatchBounds(program);
    // Twice what a step sends one peer (a frame that does not fit before
    // the ring's end skips to its start), and at least 1 MiB.
    facts.ring_bytes[index] = std::clamp<int64_t>(2 * ir::MostBytesToOnePeer(program), int64_t{1} << 20,
                                                  std::max<int64_t>(options_.shm_ring_bytes, int64_t{1} << 20));
    facts.groups[index] = ir::ReplicaGroupOf(program);
    for (const ir::Buffer& buffer : program.buffers) {
      if (buffer.kind == ir::BufferKind::kState) facts.state_bindings[index].push_back(buffer.binding);
    }
    std::vector<int32_t>& stages = facts.stages[index];
    for (const ir::Instruction& instruction : program.instructions) {
      if (instruction.task.stage >= 0) stages.push_back(instruction.task.stage);
    }
    std::sort(stages.begin(), stages.end());
    stages.erase(std::unique(stages.begin(), stages.end()), stages.end());
  }
  return facts;
}

absl::Status LocalLauncher::LoadPrograms(const std::vector<ir::ActorProgram>& programs) {
  std::vector<uint64_t> hashes(num_actors_);
  std::vector<int32_t> missing;  // the actors that have not cached their program yet
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    hashes[actor] = ir::HashActorProgram(programs[actor]);
    if (!loaded_hashes_[actor].contains(hashes[actor])) missing.push_back(actor);
  }
  if (!missing.empty()) {
    absl::Status loaded = CallSome("loadProgram", options_.start_timeout, missing, [&](int32_t actor) {
      auto request = loop_->actor(actor).loadProgramRequest();
      request.setHash(hashes[actor]);
      rpc::EncodeProgram(programs[actor], request.initProgram());
      loop_->Track(actor, request.send().ignoreResult());
    });
    if (!loaded.ok()) return loaded;
    for (int32_t actor : missing) loaded_hashes_[actor].insert(hashes[actor]);
  }
  loop_->executor.executeSync([&] { loop_->hashes = hashes; });
  return absl::OkStatus();
}

absl::Status LocalLauncher::UsePrograms(const std::vector<ir::ActorProgram>& programs) {
  if (board_ == nullptr) return absl::FailedPreconditionError("the local launcher has not been started");
  if (broken_.has_value()) return *broken_;
  if (static_cast<int32_t>(programs.size()) != num_actors_) {
    return absl::InvalidArgumentError(
        absl::StrCat("programs for ", programs.size(), " actors, the launcher runs ", num_actors_));
  }
  absl::StatusOr<ProgramFacts> facts = Facts(programs);
  if (!facts.ok()) return facts.status();
  for (int32_t actor = 0; actor < num_actors_; ++actor) {
    if (facts->groups[actor] != facts_.groups[actor]) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(actor), ": the new program's replica group differs "
                                                     "from the running one's (the groups were set up at the start)"));
    }
    if (facts->ring_bytes[actor] > facts_.ring_bytes[actor]) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(actor), ": the new program sends up to ", facts->ring_bytes[actor] / 2,
          " bytes to one peer in a step, more than the shared-memory rings sized at the start hold (",
          facts_.ring_bytes[actor], " bytes): start with the program that sends the most"));
    }
  }
  if (absl::Status loaded = LoadPrograms(programs); !loaded.ok()) return loaded;
  facts->ring_bytes = facts_.ring_bytes;  // the rings that exist
  facts_ = *std::move(facts);
  return absl::OkStatus();
}

}  // namespace tandem::controller

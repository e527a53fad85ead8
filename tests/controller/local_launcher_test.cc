// The local launcher across real processes (tandem-actor), on loopback only:
// bitwise parity for every built-in schedule over both data planes and the
// emulated GPUs, one step RPC per actor per step, and failures (a killed, a
// stopped actor, a faulting or dying emulated GPU) turned into clear errors
// in bounded time with no process left. Its control socket's defences are
// local_launcher_security_test.cc's. Every wait is bounded by the
// launcher's timeouts or the test's own.
#include "controller/local_launcher.h"

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "controller/pipeline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schedules/generators.h"
#include "tests/controller/local_launcher_job.h"
#include "tests/controller/parity_harness.h"

namespace tandem::controller {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;


// --- Parity ---------------------------------------------------------------

struct ProcessCase {
  std::string model;
  std::string schedule;
  int32_t actors = 2;
  int32_t virtual_stages = 1;
  ir::DataPlaneKind transport = ir::DataPlaneKind::kShm;
  std::string device = "cpu";

  // Enough microbatches for every schedule (ZB-V needs 2P - 1).
  int32_t microbatches() const { return actors == 2 ? 4 : 8; }
  std::string Name() const {
    std::string name = absl::StrCat(model, "_", schedule, "_P", actors, "_", ir::DataPlaneKindName(transport),
                                    device == "cpu" ? "" : absl::StrCat("_", device));
    for (char& c : name) {
      if (c == '-' || c == '/') c = '_';
    }
    return name;
  }
};

// gtest prints parameters by this (the name is the test's suffix too).
void PrintTo(const ProcessCase& c, std::ostream* os) { *os << c.Name(); }

std::vector<ProcessCase> Cases() {
  std::vector<ProcessCase> cases;
  for (ir::DataPlaneKind transport : {ir::DataPlaneKind::kShm, ir::DataPlaneKind::kTcp}) {
    for (const std::string model : {"mlp", "gpt"}) {
      for (int32_t actors : {2, 4}) {
        cases.push_back({model, "gpipe", actors, 1, transport});
        cases.push_back({model, "1f1b", actors, 1, transport});
        cases.push_back({model, "interleaved", actors, 2, transport});
        cases.push_back({model, "zb-h1", actors, 1, transport});
        cases.push_back({model, "zb-v", actors, 2, transport});
      }
    }
  }
  // Device-resident actors on the emulated GPU: device buffers, CUDA IPC.
  for (int32_t actors : {2, 4}) {
    cases.push_back({"gpt", "1f1b", actors, 1, ir::DataPlaneKind::kShm, "fake-cuda"});
    cases.push_back({"gpt", "zb-h1", actors, 1, ir::DataPlaneKind::kShm, "fake-cuda"});
    cases.push_back({"gpt", "interleaved", actors, 2, ir::DataPlaneKind::kShm, "fake-cuda"});
  }
  // Two emulated GPUs: neighbours on different GPUs (NCCL), others on one
  // (IPC).
  cases.push_back({"gpt", "1f1b", 4, 1, ir::DataPlaneKind::kShm, "fake-cuda/2"});
  cases.push_back({"gpt", "interleaved", 2, 2, ir::DataPlaneKind::kShm, "fake-cuda/2"});
  return cases;
}

class ProcessParity : public ::testing::TestWithParam<ProcessCase> {};

TEST_P(ProcessParity, ThreeStepsMatchTheReferenceBitwise) {
  const ProcessCase& c = GetParam();
  const int32_t stages = c.actors * c.virtual_stages;
  absl::StatusOr<ir::TrainStep> step = c.model == "gpt" ? testing_harness::TinyGpt(stages, c.microbatches())
                                                        : testing_harness::TinyMlp(stages, c.microbatches());
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate(
      c.schedule, {.actors = c.actors, .microbatches = c.microbatches(), .virtual_stages = c.virtual_stages});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  testing_harness::ExpectParity(*step, *schedule, /*steps=*/3,
                                [&] { return std::make_unique<LocalLauncher>(TestOptions(c.transport, c.device)); });
}

INSTANTIATE_TEST_SUITE_P(Grid, ProcessParity, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ProcessCase>& info) { return info.param.Name(); });


// --- One RPC per actor per step -----------------------------------------------

TEST(LocalLauncherDispatch, FusedDispatchIsOneStepRpcPerActorPerStepWhateverM) {
  for (int32_t microbatches : {2, 16}) {
    Job job;
    ASSERT_NO_FATAL_FAILURE(StartJob(job, 4, microbatches));
    for (int64_t s = 1; s <= 3; ++s) {
      absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, s));
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->rpcs, 4) << "M=" << microbatches << " step " << s;
    }
  }
}

TEST(LocalLauncherDispatch, PerTaskDispatchIsOneRpcPerTask) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 8));
  int64_t ranges = 0;
  for (const ir::ActorProgram& program : job.pipeline->compiled().programs) {
    ranges += static_cast<int64_t>(ir::DispatchBounds(program).size()) - 1;
  }
  // 1F1B, 2 stages, 8 microbatches: F and B per microbatch and stage, plus
  // each actor's update.
  EXPECT_GE(ranges, 2 * 2 * 8);
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 1), Dispatch::kPerTask);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->rpcs, ranges);
}

// --- Failures -------------------------------------------------------------

TEST(LocalLauncherFailure, KilledActorIsUnavailableNamingActorStageAndStepWithinFiveSeconds) {
  Job job;
  // A step long enough (tens of ms or more) for the kill to land inside it.
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 16, /*width=*/256, /*batch=*/128));
  const std::vector<pid_t> pids = ActorPids(job, 2);
  absl::Status failure;
  absl::Time killed_at = absl::InfiniteFuture();
  for (int64_t s = 1; s <= 20 && failure.ok(); ++s) {
    std::thread killer;
    if (s == 2) {
      killer = std::thread([&] {
        absl::SleepFor(absl::Milliseconds(5));
        killed_at = absl::Now();
        ASSERT_TRUE(job.launcher->processes()->Kill(ActorId{1}, SIGKILL).ok());
      });
    }
    absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, s));
    if (killer.joinable()) killer.join();
    failure = report.status();
  }
  const absl::Time reported_at = absl::Now();
  ASSERT_FALSE(failure.ok()) << "the steps went on after actor 1 was killed";
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_THAT(std::string(failure.message()),
              AllOf(HasSubstr("actor 1 (stage 1)"), HasSubstr("during step "), HasSubstr("signal 9")));
  EXPECT_LT(reported_at - killed_at, absl::Seconds(5));
  // The launcher is broken for good, and takes every process with it.
  EXPECT_FALSE(job.pipeline->Step(testing_harness::Batches(job.step, 99)).ok());
  job.pipeline.reset();
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << "pid " << pid;
}

// --- The emulated GPU (--device fake-cuda) ------------------------------------

TEST(LocalLauncherFakeCuda, EveryPairGoesByIpcAndTheDevicePeakIsTheStaticPeak) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 3, 4, 12, 4, TestOptions(ir::DataPlaneKind::kShm, "fake-cuda")));
  EXPECT_EQ(job.launcher->DescribeDataPlane(), "0-1 ipc, 0-2 ipc, 1-2 ipc");
  for (int64_t s = 1; s <= 2; ++s) {
    absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, s));
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_EQ(report->device_peak_bytes.size(), 3u);
    for (int32_t actor = 0; actor < 3; ++actor) {
      const int64_t static_peak = job.pipeline->compiled().ProgramOf(actor).static_peak_bytes;
      EXPECT_EQ(report->device_peak_bytes[actor], static_peak) << "actor " << actor;
      EXPECT_EQ(report->peak_live_bytes[actor], static_peak) << "actor " << actor;
    }
  }
  // A CPU job keeps host tensors: no device memory, shared-memory pairs.
  Job cpu;
  ASSERT_NO_FATAL_FAILURE(StartJob(cpu, 2, 2));
  EXPECT_EQ(cpu.launcher->DescribeDataPlane(), "0-1 shm");
  absl::StatusOr<StepReport> report = cpu.pipeline->Step(testing_harness::Batches(cpu.step, 1));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->device_peak_bytes, std::vector<int64_t>(2, 0));
}

// An NCCL send's tensors live until the peer has received them (its side
// stream may still read them after the executor let go), so the device peak
// may pass the static peak, by at most what the actor sends in a step.
TEST(LocalLauncherFakeCuda, ActorsOnDifferentEmulatedGpusGoByNcclAndSendsInFlightBoundThePeak) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 3, 4, 12, 4, TestOptions(ir::DataPlaneKind::kShm, "fake-cuda/2")));
  EXPECT_EQ(job.launcher->DescribeDataPlane(), "0-1 nccl, 0-2 ipc, 1-2 nccl");
  for (int64_t s = 1; s <= 2; ++s) {
    absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, s));
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_EQ(report->device_peak_bytes.size(), 3u);
    for (int32_t actor = 0; actor < 3; ++actor) {
      const ir::ActorProgram& program = job.pipeline->compiled().ProgramOf(actor);
      int64_t sent_bytes = 0;
      for (const ir::Instruction& instruction : program.instructions) {
        if (instruction.kind != ir::InstructionKind::kSend) continue;
        for (ir::BufferId id : instruction.buffers) sent_bytes += program.buffers[id].type.num_bytes();
      }
      EXPECT_EQ(report->peak_live_bytes[actor], program.static_peak_bytes) << "actor " << actor;
      EXPECT_GE(report->device_peak_bytes[actor], program.static_peak_bytes) << "actor " << actor << ", step " << s;
      EXPECT_LE(report->device_peak_bytes[actor], program.static_peak_bytes + sent_bytes) << "actor " << actor;
    }
  }
}

// Runs steps of a fake-cuda job started under TANDEM_FAULT=`fault` until one
// fails; returns that failure after checking that no actor is left.
absl::Status FailingFakeCudaJob(const std::string& fault, const std::string& device = "fake-cuda") {
  Job job;
  setenv("TANDEM_FAULT", fault.c_str(), 1);  // the actors inherit it
  StartJob(job, 2, 4, 64, 16, TestOptions(ir::DataPlaneKind::kShm, device));
  unsetenv("TANDEM_FAULT");
  if (job.pipeline == nullptr) return absl::InternalError("the job did not start");
  const std::vector<pid_t> pids = ActorPids(job, 2);
  absl::Status failure;
  for (int64_t s = 1; s <= 5 && failure.ok(); ++s) {
    failure = job.pipeline->Step(testing_harness::Batches(job.step, s)).status();
  }
  EXPECT_FALSE(job.pipeline->Step(testing_harness::Batches(job.step, 99)).ok());
  job.pipeline.reset();
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << "pid " << pid;
  return failure;
}

TEST(LocalLauncherFakeCuda, APoisonedStreamIsAnErrorNamingActorInstructionAndStep) {
  const absl::Time start = absl::Now();
  const absl::Status failure = FailingFakeCudaJob("fake-cuda-poison:1:3");
  ASSERT_FALSE(failure.ok()) << "no step failed";
  EXPECT_EQ(failure.code(), absl::StatusCode::kInternal) << failure;
  EXPECT_THAT(std::string(failure.message()),
              AllOf(HasSubstr("actor 1, step 1, instruction "), HasSubstr("the stream is poisoned"),
                    HasSubstr("function call 3 faulted")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(LocalLauncherFakeCuda, APeerDyingMidTransferIsUnavailableNamingItAndNothingIsLeft) {
  const absl::Time start = absl::Now();
  const absl::Status failure = FailingFakeCudaJob("fake-cuda-die:0:2");
  ASSERT_FALSE(failure.ok()) << "no step failed";
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_THAT(std::string(failure.message()),
              AllOf(HasSubstr("actor 0 (stage 0)"), HasSubstr("during step 1"), HasSubstr("signal 9")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(LocalLauncherFakeCuda, APeerDyingMidNcclTransferIsUnavailableNamingItAndNothingIsLeft) {
  const absl::Time start = absl::Now();
  const absl::Status failure = FailingFakeCudaJob("fake-cuda-die:0:2", "fake-cuda/2");
  ASSERT_FALSE(failure.ok()) << "no step failed";
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_THAT(std::string(failure.message()),
              AllOf(HasSubstr("actor 0 (stage 0)"), HasSubstr("during step 1"), HasSubstr("signal 9")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(LocalLauncherFailure, StoppedActorIsDeadlineExceededNamingIt) {
  Job job;
  LocalLauncherOptions options = TestOptions();
  options.unresponsive_after = absl::Seconds(1);
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 8, 12, 4, options));
  const std::vector<pid_t> pids = ActorPids(job, 2);
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  ASSERT_TRUE(job.launcher->processes()->Kill(ActorId{1}, SIGSTOP).ok());
  const absl::Time stopped_at = absl::Now();
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kDeadlineExceeded) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              AllOf(HasSubstr("actor 1 (stage 1) stopped answering during step 2"), HasSubstr("is stopped")));
  EXPECT_LT(absl::Now() - stopped_at, absl::Seconds(5));
  job.pipeline.reset();  // SIGKILL reaches a stopped process too
  for (pid_t pid : pids) EXPECT_TRUE(Gone(pid)) << "pid " << pid;
}

// An actor stopped before it registers sends no heartbeat to miss: found in
// /proc, not after the whole start deadline. (Found by tools/soak.)
TEST(LocalLauncherFailure, ActorStoppedBeforeRegisteringIsDeadlineExceededWithinSeconds) {
  const std::string script = ::testing::TempDir() + "/stops-itself-" + std::to_string(getpid()) + ".sh";
  {
    std::ofstream file(script);
    file << "#!/bin/sh\nkill -STOP $$\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  LocalLauncherOptions options = TestOptions();
  options.actor_binary = script;
  options.unresponsive_after = absl::Seconds(1);
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 2});
  ASSERT_TRUE(schedule.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(*step, *schedule, ir::SeedSources(*step), std::make_unique<LocalLauncher>(options));
  ASSERT_FALSE(pipeline.ok());
  EXPECT_EQ(pipeline.status().code(), absl::StatusCode::kDeadlineExceeded) << pipeline.status();
  EXPECT_THAT(std::string(pipeline.status().message()),
              AllOf(HasSubstr("stopped during registration before it registered"), HasSubstr("is stopped")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // the start deadline is 30 s
  std::remove(script.c_str());
}

TEST(LocalLauncherFailure, MissingActorBinaryIsNotFound) {
  LocalLauncherOptions options = TestOptions();
  options.actor_binary = "/nonexistent/tandem-actor";
  Job job;
  absl::StatusOr<ir::TrainStep> step = testing_harness::TinyMlp(2, 2);
  ASSERT_TRUE(step.ok());
  absl::StatusOr<schedules::Schedule> schedule = schedules::Generate("1f1b", {.actors = 2, .microbatches = 2});
  ASSERT_TRUE(schedule.ok());
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(*step, *schedule, ir::SeedSources(*step), std::make_unique<LocalLauncher>(options));
  ASSERT_FALSE(pipeline.ok());
  EXPECT_EQ(pipeline.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(pipeline.status().message()), HasSubstr("/nonexistent/tandem-actor"));
}

}  // namespace
}  // namespace tandem::controller


// The local launcher across real processes (tandem-actor), on loopback only:
// bitwise parity for every built-in schedule over both data planes, one
// step RPC per actor per step, failures (a killed, a stopped actor) turned
// into clear errors in bounded time with no process left, and a control
// socket that refuses strangers without disturbing the job. Every wait is
// bounded by the launcher's timeouts or the test's own.
#include "controller/local_launcher.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backends/cpu/kernels.h"
#include "controller/pipeline.h"
#include "examples/models/mlp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kj/async-io.h"
#include "rpc/async_status.h"
#include "rpc/connection.h"
#include "rpc/controller_service.h"
#include "schedules/generators.h"
#include "tests/controller/parity_harness.h"
#include "tests/testing/recording_relay.h"

namespace tandem::controller {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

LocalLauncherOptions TestOptions(ir::DataPlaneKind transport = ir::DataPlaneKind::kShm,
                                 const std::string& device = "cpu") {
  LocalLauncherOptions options;
  options.device = device;
  options.actor_binary = TANDEM_ACTOR_BINARY;
  options.data_plane = transport;
  options.shm_ring_bytes = int64_t{16} << 20;
  options.start_timeout = absl::Seconds(30);
  options.step_timeout = absl::Seconds(60);
  options.receive_timeout = absl::Seconds(20);
  return options;
}

bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

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

// --- A running job for the other tests --------------------------------------

// A pipeline on a LocalLauncher the test can reach into.
struct Job {
  ir::TrainStep step;
  std::unique_ptr<Pipeline> pipeline;
  LocalLauncher* launcher = nullptr;  // owned by `pipeline`
};

// An MLP over `actors` stages with 1F1B; `width` and `batch` set how long a
// step computes.
void StartJob(Job& job, int32_t actors, int32_t microbatches, int64_t width = 12, int64_t batch = 4,
              LocalLauncherOptions options = TestOptions()) {
  cpu::SetBlasThreads(1);
  examples::MlpConfig config;
  config.input_dim = width;
  config.hidden_dim = width;
  config.num_layers = actors;
  config.batch_size = batch;
  config.num_stages = actors;
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep("mlp", examples::MlpModel(config), Sgd({.learning_rate = 0.1}),
                     {.num_microbatches = microbatches, .seed = 3});
  ASSERT_TRUE(step.ok()) << step.status();
  job.step = *std::move(step);
  absl::StatusOr<schedules::Schedule> schedule =
      schedules::Generate("1f1b", {.actors = actors, .microbatches = microbatches});
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  auto launcher = std::make_unique<LocalLauncher>(std::move(options));
  job.launcher = launcher.get();
  absl::StatusOr<std::unique_ptr<Pipeline>> pipeline =
      Pipeline::Create(job.step, *schedule, ir::SeedSources(job.step), std::move(launcher));
  ASSERT_TRUE(pipeline.ok()) << pipeline.status();
  job.pipeline = *std::move(pipeline);
}

std::vector<pid_t> ActorPids(const Job& job, int32_t actors) {
  std::vector<pid_t> pids;
  for (int32_t actor = 0; actor < actors; ++actor) pids.push_back(job.launcher->processes()->pid(ActorId{actor}));
  return pids;
}

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

// --- Security -------------------------------------------------------------

// What a stranger does with the job's Controller capability.
using StrangerAct =
    std::function<kj::Promise<absl::Status>(rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor)>;

// A stranger on the job's control socket (`address`: a path, or host:port
// with TCP, where it dials with the controller's `certificate`, which is
// public), sending with `limits`. Returns what its act came to.
absl::Status AsStranger(const std::string& address, rpc::ConnectionLimits limits, StrangerAct act,
                        const std::string& certificate = "") {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  const rpc::ControlPlaneKind kind =
      address.front() == '/' ? rpc::ControlPlaneKind::kUnix : rpc::ControlPlaneKind::kTcp;
  absl::StatusOr<rpc::ControlStream> stream =
      rpc::ToStatusOr(rpc::DialController(io, kind, address, absl::Seconds(10), certificate)).wait(io.waitScope);
  if (!stream.ok()) return stream.status();
  rpc::RpcConnection connection(*std::move(stream), capnp::rpc::twoparty::Side::CLIENT, nullptr, limits);
  // The stranger offers a broken Actor capability: it never gets that far.
  rpc::wire::Actor::Client nobody = capnp::Capability::Client(KJ_EXCEPTION(FAILED, "stranger")).castAs<rpc::wire::Actor>();
  kj::Timer& timer = io.provider->getTimer();
  return act(connection.Bootstrap<rpc::wire::Controller>(), nobody)
      .exclusiveJoin(timer.afterDelay(10 * kj::SECONDS).then([] {
        return absl::DeadlineExceededError("no answer to the stranger");
      }))
      .wait(io.waitScope);
}

// Registers as actor 0 by answering a challenge with `token`. A stranger:
// it does not check the controller's own proof, which a stranger cannot.
absl::Status RegisterAsStranger(const std::string& address, const std::string& token,
                                const std::string& certificate = "") {
  return AsStranger(address, {}, [&](rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor) {
    auto request = controller.challengeRequest();
    request.setActorId(0);
    const std::string ours(rpc::kNonceBytes, 'z');
    request.setNonce(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(ours.data()), ours.size()));
    return rpc::ToStatusOr(request.send())
        .then([controller, actor, token](auto challenge) mutable -> kj::Promise<absl::Status> {
          if (!challenge.ok()) return challenge.status();
          auto nonce = std::make_shared<std::string>(challenge->getNonce().asChars().begin(),
                                                     challenge->getNonce().size());
          absl::StatusOr<rpc::Proof> proof = rpc::ProveRegistration(token, rpc::AsBytes(*nonce), 0);
          if (!proof.ok()) return proof.status();
          auto answer = std::make_shared<rpc::Proof>(*proof);
          return rpc::SendRegistration(controller, 0, rpc::AsBytes(*nonce), *answer, actor)
              .then([nonce, answer](auto session) { return session.status(); });
        });
  }, certificate);
}

TEST(LocalLauncherSecurity, WrongTokenIsRefusedAndTheJobRunsOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  absl::Status refused = RegisterAsStranger(job.launcher->controller_address(), std::string(64, 'f'));
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  EXPECT_EQ(job.launcher->Refusals().registrations(), 1);
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  EXPECT_TRUE(report.ok()) << report.status();
}

TEST(LocalLauncherSecurity, ManyRefusalsAreAllCountedButLoggedRateLimited) {
  auto mu = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  LocalLauncherOptions options = TestOptions();
  options.log = [mu, lines](absl::string_view line) {
    absl::MutexLock lock(mu.get());
    lines->emplace_back(line);
  };
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4, 12, 4, options));
  constexpr int kStrangers = 2000;
  for (int i = 0; i < kStrangers; ++i) {
    ASSERT_EQ(RegisterAsStranger(job.launcher->controller_address(), std::string(64, 'f')).code(),
              absl::StatusCode::kPermissionDenied);
  }
  EXPECT_EQ(job.launcher->Refusals().registrations(), kStrangers);
  // Malformed hellos: bytes that are no Cap'n Proto message.
  for (int i = 0; i < 500; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, job.launcher->controller_address().c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    const std::string junk(64, '\xff');
    EXPECT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    close(fd);
  }
  {
    absl::MutexLock lock(mu.get());
    // A refusal and a closed connection per stranger, a failure per
    // malformed hello: thousands of notices, of which the first few are
    // logged (and a count once the interval ends).
    EXPECT_LE(lines->size(), 10u);
    EXPECT_GE(lines->size(), 1u);
  }
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 1));
  EXPECT_TRUE(report.ok()) << report.status();
}

TEST(LocalLauncherSecurity, OversizedControlMessageIsRefusedAndTheJobRunsOn) {
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  // A client with a larger limit than the controller's sends a 65 MiB
  // registration: the controller drops that connection.
  rpc::ConnectionLimits generous;
  generous.max_message_bytes = uint64_t{256} << 20;
  const std::string nonce(rpc::kNonceBytes, 'n');
  const std::string huge(size_t{65} << 20, 'x');
  absl::Status refused = AsStranger(job.launcher->controller_address(), generous,
                                    [&](rpc::wire::Controller::Client controller, rpc::wire::Actor::Client actor) {
                                      return rpc::SendRegistration(controller, 0, rpc::AsBytes(nonce),
                                                                   rpc::AsBytes(huge), actor)
                                          .then([](auto session) { return session.status(); });
                                    });
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  EXPECT_TRUE(report.ok()) << report.status();
}

// The job's token, read from an actor process's environment (where the
// launcher put it); "" if it is not there.
// A variable of process `pid`'s environment; empty when it has none.
std::string EnvironmentOf(pid_t pid, const std::string& name) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string entry;
  const std::string prefix = name + "=";
  while (std::getline(file, entry, '\0')) {
    if (entry.rfind(prefix, 0) == 0) return entry.substr(prefix.size());
  }
  return "";
}

std::string TokenOf(pid_t pid) { return EnvironmentOf(pid, "TANDEM_JOB_TOKEN"); }

std::string CommandLineOf(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Over TCP, every socket of the job runs through a recording relay: a wrong
// token, a replayed challenge answer and a stranger on an actor's data
// plane are each refused, logged and counted while the job runs on, and the
// token crosses no socket and shows in no argv or log line.
TEST(LocalLauncherSecurity, OverTcpStrangersAreRefusedCountedAndLoggedAndTheTokenNeverCrossesASocket) {
  auto mu = std::make_shared<absl::Mutex>();
  auto lines = std::make_shared<std::vector<std::string>>();
  auto relays = std::make_shared<std::vector<std::unique_ptr<test::RecordingRelay>>>();
  LocalLauncherOptions options = TestOptions(ir::DataPlaneKind::kTcp);
  options.control_plane = rpc::ControlPlaneKind::kTcp;
  options.log = [mu, lines](absl::string_view line) {
    absl::MutexLock lock(mu.get());
    lines->emplace_back(line);
  };
  options.dial_address = [mu, relays](const std::string& address) {
    absl::MutexLock lock(mu.get());
    relays->push_back(std::make_unique<test::RecordingRelay>(address));
    return relays->back()->address();
  };
  Job job;
  ASSERT_NO_FATAL_FAILURE(StartJob(job, 2, 4, 12, 4, options));
  ASSERT_TRUE(job.pipeline->Step(testing_harness::Batches(job.step, 1)).ok());
  const std::string controller = job.launcher->controller_address();
  const std::vector<pid_t> pids = ActorPids(job, 2);
  const std::string token = TokenOf(pids[0]);
  ASSERT_EQ(token.size(), 64u) << "the actor has no TANDEM_JOB_TOKEN";
  for (pid_t pid : pids) {
    const std::string argv = CommandLineOf(pid);
    EXPECT_THAT(argv, HasSubstr("--controller")) << "no command line read for pid " << pid;
    EXPECT_EQ(argv.find(token), std::string::npos) << "the token is in the argv of pid " << pid;
  }

  // Over TCP the control plane is TLS: an actor trusts the certificate it
  // is given, which strangers may know as well (it is no secret).
  const std::string certificate = EnvironmentOf(pids[0], "TANDEM_CONTROLLER_CERT");
  ASSERT_THAT(certificate, HasSubstr("BEGIN CERTIFICATE")) << "the actor has no TANDEM_CONTROLLER_CERT";

  // 1. A wrong token.
  EXPECT_EQ(RegisterAsStranger(controller, std::string(64, 'f'), certificate).code(),
            absl::StatusCode::kPermissionDenied);
  // 2. A right answer (someone who holds the token, registering an actor
  //    that is registered already), then the same answer again.
  absl::Status first;
  absl::Status replayed = AsStranger(controller, {}, [&](rpc::wire::Controller::Client controller_cap,
                                                         rpc::wire::Actor::Client actor) {
    return rpc::RequestChallenge(controller_cap, 0, token)
        .then([&, controller_cap, actor](absl::StatusOr<std::string> nonce) mutable -> kj::Promise<absl::Status> {
          if (!nonce.ok()) return nonce.status();
          auto shared_nonce = std::make_shared<std::string>(*nonce);
          absl::StatusOr<rpc::Proof> proof = rpc::ProveRegistration(token, rpc::AsBytes(*shared_nonce), 0);
          if (!proof.ok()) return proof.status();
          auto shared_proof = std::make_shared<rpc::Proof>(*proof);
          return rpc::SendRegistration(controller_cap, 0, rpc::AsBytes(*shared_nonce), *shared_proof, actor)
              .then([&, controller_cap, actor, shared_nonce, shared_proof](auto session) mutable {
                first = session.status();
                return rpc::SendRegistration(controller_cap, 0, rpc::AsBytes(*shared_nonce), *shared_proof, actor);
              })
              .then([](auto session) { return session.status(); });
        });
  }, certificate);
  EXPECT_EQ(first.code(), absl::StatusCode::kAlreadyExists) << first;
  EXPECT_EQ(replayed.code(), absl::StatusCode::kPermissionDenied) << replayed;
  EXPECT_THAT(std::string(replayed.message()), HasSubstr("a replay"));
  // 3. A stranger on each actor's data plane (dialing it directly).
  std::vector<std::string> data_planes;
  {
    absl::MutexLock lock(mu.get());
    for (const auto& relay : *relays) {
      if (relay->target() != controller) data_planes.push_back(relay->target());
    }
  }
  ASSERT_EQ(data_planes.size(), 2u);
  for (const std::string& address : data_planes) {
    absl::StatusOr<rpc::HostPort> endpoint = rpc::ParseHostPort(address);
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(endpoint->port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)), 0);
    const std::string hello(96, '\x42');
    EXPECT_EQ(write(fd, hello.data(), hello.size()), static_cast<ssize_t>(hello.size()));
    close(fd);
  }

  // The job runs on, and every refusal was counted.
  absl::StatusOr<StepReport> report = job.pipeline->Step(testing_harness::Batches(job.step, 2));
  ASSERT_TRUE(report.ok()) << report.status();
  RefusalCounts refused;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;) {
    refused = job.launcher->Refusals();
    if (refused.data_plane >= 2) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(refused.wrong_proof, 1);
  EXPECT_EQ(refused.replayed_challenge, 1);
  EXPECT_EQ(refused.rejected, 1);  // the proven registration of an actor that had one
  EXPECT_EQ(refused.data_plane, 2);
  ASSERT_TRUE(job.launcher->Shutdown().ok());

  absl::MutexLock lock(mu.get());
  EXPECT_GE(lines->size(), 3u);
  for (const std::string& line : *lines) EXPECT_EQ(line.find(token), std::string::npos) << line;
  ASSERT_EQ(relays->size(), 3u);  // the controller's socket and two data planes
  int64_t control_bytes = 0;
  int64_t data_bytes = 0;
  for (const auto& relay : *relays) {
    (relay->target() == controller ? control_bytes : data_bytes) += relay->total_bytes();
    EXPECT_FALSE(relay->Carried(token)) << "the token crossed the socket to " << relay->target();
  }
  // Both planes ran through the relays (actor 1 dials actor 0; nobody dials 1).
  EXPECT_GT(control_bytes, 0);
  EXPECT_GT(data_bytes, 0);
}

}  // namespace
}  // namespace tandem::controller


// Executor: one actor's instruction stream against the reference
// interpreter, bit for bit; accumulation order; state across steps;
// measured peak memory; errors with their context.
#include "actor/executor.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "actor/in_memory_transport.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/interpreter.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_programs.h"

namespace tandem::actor::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(10);

std::unique_ptr<Executor> MakeExecutor(ir::ActorProgram program) {
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(std::move(program));
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? *std::move(executor) : nullptr;
}

ir::HostTensor RunOne(const ir::Function& function, const ir::TensorMap& inputs, const std::string& output) {
  absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(function.graph, inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? outputs->at(output) : ir::HostTensor();
}

TEST(Executor, TwoActorsMatchRunGraphBitwise) {
  constexpr int32_t kMicrobatches = 3;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  const ir::Function f0 = programs.actor0.functions[0];
  const ir::Function f1 = programs.actor1.functions[0];
  const ir::TensorMap state = {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
  ir::StepInputs inputs;
  for (int32_t m = 0; m < kMicrobatches; ++m) inputs[{"x", m}] = Iota(F32({2, 3}), 0.1f * m - 0.2f, 0.37f);

  std::unique_ptr<Executor> actor0 = MakeExecutor(programs.actor0);
  std::unique_ptr<Executor> actor1 = MakeExecutor(programs.actor1);
  ASSERT_TRUE(actor0->LoadState(state).ok());
  ASSERT_TRUE(actor1->LoadState(state).ok());
  InMemoryNetwork network(2);
  // Sends never block: actor 0 can run its whole step before actor 1 starts.
  absl::StatusOr<ir::StepOutputs> out0 = actor0->RunStep(1, inputs, network.Endpoint(0), kTimeout);
  ASSERT_TRUE(out0.ok()) << out0.status();
  auto steady_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before_ns = steady_ns();
  absl::StatusOr<ir::StepOutputs> out1 = actor1->RunStep(1, inputs, network.Endpoint(1), kTimeout);
  const int64_t after_ns = steady_ns();
  ASSERT_TRUE(out1.ok()) << out1.status();
  EXPECT_TRUE(network.PendingMessages().empty());
  // Its time outside the instructions: taking the inputs in before the first
  // (origin_ns), settling after the last, both within the call.
  EXPECT_GT(out1->inputs_ns, 0);
  EXPECT_GT(out1->settle_ns, 0);
  EXPECT_GE(out1->origin_ns - out1->inputs_ns, before_ns);
  ASSERT_FALSE(out1->timings.empty());
  const ir::InstructionTiming& last = out1->timings.back();
  EXPECT_LE(out1->origin_ns + last.start_ns + last.duration_ns + out1->settle_ns, after_ns);
  EXPECT_TRUE(out0->results.empty());
  ASSERT_EQ(out1->results.at("loss").size(), kMicrobatches);
  for (int32_t m = 0; m < kMicrobatches; ++m) {
    ir::HostTensor h = RunOne(f0, {{"x", inputs[{"x", m}]}, {"w0", state.at("w0")}}, "h");
    ir::HostTensor loss = RunOne(f1, {{"h", h}, {"w1", state.at("w1")}}, "loss");
    const ir::HostTensor& got = out1->results.at("loss").at(m);
    EXPECT_TRUE(got.BitwiseEquals(loss)) << "microbatch " << m << ": " << ir::DescribeTensor(got) << " vs "
                                         << ir::DescribeTensor(loss);
  }
  EXPECT_EQ(out0->timings.size(), 3u * kMicrobatches);
  EXPECT_EQ(out1->timings.size(), 5u * kMicrobatches);
  EXPECT_EQ(out0->peak_live_bytes, programs.actor0.static_peak_bytes);
  EXPECT_EQ(out1->peak_live_bytes, programs.actor1.static_peak_bytes);
  // Every instruction once, in program order, after the step began.
  for (size_t i = 0; i < out1->timings.size(); ++i) {
    const ir::InstructionTiming& timing = out1->timings[i];
    EXPECT_EQ(timing.instruction, static_cast<int32_t>(i));
    EXPECT_GE(timing.start_ns, 0);
    EXPECT_GE(timing.duration_ns, 0);
    if (i > 0) {
      EXPECT_GE(timing.start_ns, out1->timings[i - 1].start_ns + out1->timings[i - 1].duration_ns);
    }
  }
}

// One actor, three microbatches of a "gradient" g = x * 1: acc receives g0
// by move, then g1 and g2 by cpu::AccumulateGradient, in that order.
ir::ActorProgram AccumulateProgram() {
  ir::ActorProgram program;
  program.functions.push_back(TraceFunction("W0", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor x = t.Input("x", F32({3}));
    return {{"g", x * 1.0}};
  }));
  program.buffers.push_back(TemporaryBuffer("acc.w.s0", F32({3})));
  for (int32_t m = 0; m < 3; ++m) {
    program.buffers.push_back(InputBuffer("x@" + std::to_string(m), "x", m, F32({3})));
    program.buffers.push_back(TemporaryBuffer("g@" + std::to_string(m), F32({3})));
  }
  for (int32_t m = 0; m < 3; ++m) {
    program.instructions.push_back(RunInstruction({'W', 0, m}, 0, {1 + 2 * m}, {2 + 2 * m}));
    program.instructions.push_back(AccumulateInstruction({'W', 0, m}, 0, 2 + 2 * m));
    if (m == 0) program.instructions.push_back(EmitInstruction({'W', 0, 0}, "after_first", 0, 0));
  }
  program.instructions.push_back(EmitInstruction({'U', -1, -1}, "acc", -1, 0));
  program.instructions.push_back(FreeInstruction({'U', -1, -1}, {0}));
  return WithPeak(program);
}

TEST(Executor, AccumulateMovesTheFirstGradientThenAddsInMicrobatchOrder) {
  // f32 addition is not associative on these values: (g0 + g1) + g2 differs
  // from g0 + (g1 + g2) and from (g0 + g2) + g1.
  const ir::HostTensor g0 = ir::HostTensor::FromFloats({3}, {1e8f, 1.0f, 0.1f});
  const ir::HostTensor g1 = ir::HostTensor::FromFloats({3}, {1.0f, 1e8f, 0.2f});
  const ir::HostTensor g2 = ir::HostTensor::FromFloats({3}, {-1e8f, -1e8f, 0.3f});
  const ir::HostTensor in_order = *cpu::AccumulateGradient(*cpu::AccumulateGradient(g0, g1), g2);
  ASSERT_FALSE(in_order.BitwiseEquals(*cpu::AccumulateGradient(g0, *cpu::AccumulateGradient(g1, g2))));

  std::unique_ptr<Executor> executor = MakeExecutor(AccumulateProgram());
  ASSERT_TRUE(executor->LoadState({}).ok());
  InMemoryNetwork network(1);
  absl::StatusOr<ir::StepOutputs> out =
      executor->RunStep(1, {{{"x", 0}, g0}, {{"x", 1}, g1}, {{"x", 2}, g2}}, network.Endpoint(0), kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->results.at("after_first").at(0).BitwiseEquals(g0));
  EXPECT_TRUE(out->results.at("acc").at(-1).BitwiseEquals(in_order))
      << ir::DescribeTensor(out->results.at("acc").at(-1)) << " vs " << ir::DescribeTensor(in_order);
  // Each gradient is released by its accumulate: 3 inputs + acc + one g.
  EXPECT_EQ(out->peak_live_bytes, 5 * 12);
}

// update: w <- w * 0.5 + step, run on the state buffer in place.
ir::ActorProgram UpdateProgram() {
  ir::ActorProgram program;
  program.functions.push_back(TraceFunction("update", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor w = t.Parameter("w", {2}, init::Zeros());
    Tensor step = t.Input("step", F32({}));
    return {{"w", w * 0.5 + step}};
  }));
  program.buffers = {StateBuffer("w", F32({2})), InputBuffer("step", "step", -1, F32({}))};
  program.instructions = {RunInstruction({}, 0, {0, 1}, {0})};
  program.task_starts = {0};
  return WithPeak(program);
}

TEST(Executor, StateCarriesOverFromOneStepToTheNext) {
  const ir::ActorProgram program = UpdateProgram();
  std::unique_ptr<Executor> executor = MakeExecutor(program);
  const ir::HostTensor w0 = ir::HostTensor::FromFloats({2}, {0.3f, -1.7f});
  ASSERT_TRUE(executor->LoadState({{"w", w0}, {"unrelated", ir::HostTensor::Scalar(1)}}).ok());
  InMemoryNetwork network(1);
  ir::HostTensor expected = w0;
  for (int64_t step = 1; step <= 2; ++step) {
    const ir::HostTensor step_tensor = ir::HostTensor::Scalar(static_cast<float>(step));
    absl::StatusOr<ir::StepOutputs> out = executor->RunStep(step, {{{"step", -1}, step_tensor}}, network.Endpoint(0), kTimeout);
    ASSERT_TRUE(out.ok()) << out.status();
    expected = RunOne(program.functions[0], {{"w", expected}, {"step", step_tensor}}, "w");
  }
  absl::StatusOr<ir::TensorMap> read = executor->State();
  ASSERT_TRUE(read.ok()) << read.status();
  const ir::TensorMap& state = *read;
  ASSERT_EQ(state.size(), 1u);
  EXPECT_TRUE(state.at("w").BitwiseEquals(expected)) << ir::DescribeTensor(state.at("w"));
  EXPECT_EQ(state.at("w").f32()[0], (0.3f * 0.5f + 1.0f) * 0.5f + 2.0f);
  EXPECT_TRUE(w0.BitwiseEquals(ir::HostTensor::FromFloats({2}, {0.3f, -1.7f})));  // never written in place
}

TEST(Executor, MeasuredPeakEqualsHandComputedValue) {
  ir::ActorProgram program;
  program.functions.push_back(TraceFunction("F0", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor x = t.Input("x", F32({2, 3}));
    Tensor w = t.Parameter("w", {3, 4}, init::Zeros());
    return {{"y", matmul(x, w)}};
  }));
  program.functions.push_back(TraceFunction("G", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor y = t.Input("y", F32({2, 4}));
    return {{"z", relu(y)}, {"s", sum(y)}};
  }));
  program.buffers = {StateBuffer("w", F32({3, 4})),         // 48 bytes
                     InputBuffer("x@0", "x", 0, F32({2, 3})),  // 24
                     TemporaryBuffer("y", F32({2, 4})),        // 32
                     TemporaryBuffer("z", F32({2, 4})),        // 32
                     TemporaryBuffer("s", F32({}))};           // 4
  const ir::TaskLabel task{'F', 0, 0};
  program.instructions = {RunInstruction(task, 0, {1, 0}, {2}),  // 72 -> 104
                          FreeInstruction(task, {1}),            // 80
                          RunInstruction(task, 1, {2}, {3, 4}),  // 116: the peak
                          FreeInstruction(task, {2}),            // 84
                          EmitInstruction(task, "s", 0, 4),      // 84
                          FreeInstruction(task, {3, 4})};        // 48
  program.static_peak_bytes = 116;
  ASSERT_EQ(PeakLiveBytes(program), 116);
  std::unique_ptr<Executor> executor = MakeExecutor(program);
  ASSERT_TRUE(executor->LoadState({{"w", Iota(F32({3, 4}), 0, 1)}}).ok());
  InMemoryNetwork network(1);
  absl::StatusOr<ir::StepOutputs> out =
      executor->RunStep(1, {{{"x", 0}, Iota(F32({2, 3}), 1, 1)}}, network.Endpoint(0), kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->peak_live_bytes, 116);
  EXPECT_EQ(out->results.at("s").at(0).f32()[0], 164 + 362);  // rows [32,38,44,50], [68,83,98,113]
}

TEST(Executor, TaskByTaskDispatchGivesTheSameResultsAsOneStep) {
  TwoStageForward programs = MakeTwoStageForward(2);
  const ir::TensorMap state = {{"w0", Iota(F32({3, 4}), -0.5f, 0.1f)}, {"w1", Iota(F32({4, 1}), 0.2f, 0.3f)}};
  const ir::StepInputs inputs = {{{"x", 0}, Iota(F32({2, 3}), 0, 0.5f)}, {{"x", 1}, Iota(F32({2, 3}), 1, -0.25f)}};
  InMemoryNetwork network(2);
  std::unique_ptr<Executor> actor0 = MakeExecutor(programs.actor0);
  ASSERT_TRUE(actor0->LoadState(state).ok());
  ASSERT_TRUE(actor0->RunStep(1, inputs, network.Endpoint(0), kTimeout).ok());

  std::unique_ptr<Executor> actor1 = MakeExecutor(programs.actor1);
  ASSERT_TRUE(actor1->LoadState(state).ok());
  ASSERT_TRUE(actor1->BeginStep(1, inputs).ok());
  const std::vector<int32_t>& starts = programs.actor1.task_starts;
  for (size_t t = 0; t < starts.size(); ++t) {
    const int32_t end = t + 1 < starts.size() ? starts[t + 1] : static_cast<int32_t>(programs.actor1.instructions.size());
    absl::Status status = actor1->RunRange(starts[t], end, network.Endpoint(1), kTimeout);
    ASSERT_TRUE(status.ok()) << status;
  }
  absl::StatusOr<ir::StepOutputs> by_task = actor1->FinishStep();
  ASSERT_TRUE(by_task.ok()) << by_task.status();

  // Tags repeat every step: the network's record of them starts afresh.
  EXPECT_EQ(actor0->RunStep(2, inputs, network.Endpoint(0), kTimeout).status().code(),
            absl::StatusCode::kInvalidArgument);
  network.Reset();
  ASSERT_TRUE(actor0->LoadState(state).ok());
  ASSERT_TRUE(actor0->RunStep(2, inputs, network.Endpoint(0), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> whole = actor1->RunStep(2, inputs, network.Endpoint(1), kTimeout);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int32_t m = 0; m < 2; ++m) {
    EXPECT_TRUE(by_task->results.at("loss").at(m).BitwiseEquals(whole->results.at("loss").at(m)));
  }
  EXPECT_EQ(by_task->peak_live_bytes, whole->peak_live_bytes);
}

TEST(Executor, RangesMustFollowOneAnother) {
  std::unique_ptr<Executor> executor = MakeExecutor(AccumulateProgram());
  InMemoryNetwork network(1);
  const ir::StepInputs inputs = {{{"x", 0}, Iota(F32({3}), 0, 1)}, {{"x", 1}, Iota(F32({3}), 0, 1)},
                             {{"x", 2}, Iota(F32({3}), 0, 1)}};
  EXPECT_EQ(executor->BeginStep(1, inputs).code(), absl::StatusCode::kFailedPrecondition);  // no LoadState
  ASSERT_TRUE(executor->LoadState({}).ok());
  ASSERT_TRUE(executor->BeginStep(1, inputs).ok());
  EXPECT_EQ(executor->BeginStep(2, inputs).code(), absl::StatusCode::kFailedPrecondition);
  absl::Status skipped = executor->RunRange(2, 4, network.Endpoint(0), kTimeout);
  EXPECT_EQ(skipped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skipped.message(), HasSubstr("RunRange [2, 4) but the next instruction is 0"));
  ASSERT_TRUE(executor->RunRange(0, 2, network.Endpoint(0), kTimeout).ok());
  EXPECT_EQ(executor->FinishStep().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Executor, MissingOrMistypedInputsAndStateNameTheBuffer) {
  std::unique_ptr<Executor> executor = MakeExecutor(UpdateProgram());
  absl::Status no_state = executor->LoadState({{"v", ir::HostTensor::Scalar(0)}});
  EXPECT_EQ(no_state.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_state.message(), HasSubstr("actor 0: no state tensor 'w' for buffer 0 (w)"));
  absl::Status bad_state = executor->LoadState({{"w", ir::HostTensor::Scalar(0)}});
  EXPECT_THAT(bad_state.message(), HasSubstr("state tensor 'w' is f32[] but buffer 0 (w) is f32[2]"));

  ASSERT_TRUE(executor->LoadState({{"w", Iota(F32({2}), 0, 1)}}).ok());
  absl::Status missing = executor->BeginStep(4, {});
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("actor 0, step 4: no input 'step' for microbatch -1 for buffer 1 (step)"));
  absl::Status mistyped = executor->BeginStep(4, {{{"step", -1}, Iota(F32({2}), 0, 1)}});
  EXPECT_THAT(mistyped.message(), HasSubstr("input 'step' of microbatch -1 is f32[2] but buffer 1 (step) is f32[]"));
}

TEST(Executor, KernelErrorNamesActorStepAndInstruction) {
  std::unique_ptr<Executor> executor = MakeExecutor(MakeEmbeddingLookup());
  ASSERT_TRUE(executor->LoadState({{"table", Iota(F32({5, 2}), 0, 1)}}).ok());
  InMemoryNetwork network(1);
  absl::StatusOr<ir::StepOutputs> out = executor->RunStep(
      7, {{{"ids", 0}, ir::HostTensor::FromInts({3}, {1, 9, 2})}}, network.Endpoint(0), kTimeout);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("actor 0, step 7, instruction 0 (F0.0 run F0): "));
  EXPECT_THAT(out.status().message(), HasSubstr("embedding: id 9"));
  // A failed step leaves the executor needing state again.
  EXPECT_EQ(executor->BeginStep(8, {{{"ids", 0}, ir::HostTensor::FromInts({3}, {0, 1, 2})}}).code(),
            absl::StatusCode::kFailedPrecondition);
}

// A device that, once told it may, defers its kernels' data-dependent
// errors to SettleRuns (as CUDA's range checks): the failing run computes on
// zeroed ids instead.
class DeferringDevice final : public backends::Device {
 public:
  class Deferring final : public backends::Executable {
   public:
    Deferring(DeferringDevice* device, const ir::Graph& graph) : device_(device), graph_(graph) {}
    absl::StatusOr<backends::HandleMap> Run(const backends::HandleMap& inputs) override {
      const int64_t run = device_->runs++;
      ir::TensorMap host;
      for (const auto& [input, handle] : inputs) host.emplace(input, handle.host());
      absl::StatusOr<ir::TensorMap> results = cpu::RunGraph(graph_, host);
      if (!results.ok() && device_->deferring) {
        if (!device_->failure.has_value()) device_->failure = backends::DeferredFailure{run, results.status()};
        for (auto& [input, tensor] : host) {
          if (tensor.dtype() == ir::DType::kI32) tensor = ir::HostTensor(tensor.type());  // zeros
        }
        results = cpu::RunGraph(graph_, host);
      }
      if (!results.ok()) return results.status();
      backends::HandleMap outputs;
      for (auto& [output, tensor] : *results) outputs.emplace(output, std::move(tensor));
      return outputs;
    }

   private:
    DeferringDevice* const device_;
    const ir::Graph graph_;
  };

  std::string name() const override { return "deferring"; }
  absl::StatusOr<std::unique_ptr<backends::Executable>> Compile(const ir::Graph& graph) override {
    return std::make_unique<Deferring>(this, graph);
  }
  absl::StatusOr<backends::TensorHandle> Accumulate(const backends::TensorHandle& acc,
                                                    const backends::TensorHandle& grad) override {
    return cpu::CpuDevice()->Accumulate(acc, grad);
  }
  void set_deferred_checks(bool on) override { deferring = on; }
  absl::StatusOr<std::optional<backends::DeferredFailure>> SettleRuns(absl::Time) override {
    ++settles;
    std::optional<backends::DeferredFailure> settled = std::exchange(failure, std::nullopt);
    runs = 0;
    return settled;
  }

  bool deferring = false;
  int64_t runs = 0;
  int64_t settles = 0;
  std::optional<backends::DeferredFailure> failure;
};

TEST(Executor, AFailureTheDeviceDeferredIsReportedAtTheStepsEndNamingItsInstruction) {
  auto device = std::make_shared<DeferringDevice>();
  absl::StatusOr<std::unique_ptr<Executor>> created = Executor::Create(MakeEmbeddingLookup(), device);
  ASSERT_TRUE(created.ok()) << created.status();
  Executor& executor = **created;
  EXPECT_TRUE(device->deferring);
  ASSERT_TRUE(executor.LoadState({{"table", Iota(F32({5, 2}), 0, 1)}}).ok());
  InMemoryNetwork network(1);
  absl::StatusOr<ir::StepOutputs> out = executor.RunStep(
      7, {{{"ids", 0}, ir::HostTensor::FromInts({3}, {1, 9, 2})}}, network.Endpoint(0), kTimeout);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("actor 0, step 7, instruction 0 (F0.0 run F0): "));
  EXPECT_THAT(out.status().message(), HasSubstr("embedding: id 9"));
  EXPECT_THAT(out.status().message(), HasSubstr("(found at the step's end)"));
  EXPECT_EQ(device->settles, 1);
  // A good step settles once at its end and reports nothing.
  ASSERT_TRUE(executor.LoadState({{"table", Iota(F32({5, 2}), 0, 1)}}).ok());
  out = executor.RunStep(8, {{{"ids", 0}, ir::HostTensor::FromInts({3}, {0, 1, 2})}}, network.Endpoint(0), kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(device->settles, 2);
}

TEST(Executor, ReceiveThatNeverArrivesExceedsItsDeadline) {
  TwoStageForward programs = MakeTwoStageForward(2);
  std::unique_ptr<Executor> actor1 = MakeExecutor(programs.actor1);
  ASSERT_TRUE(actor1->LoadState({{"w1", Iota(F32({4, 1}), 0, 1)}}).ok());
  InMemoryNetwork network(2);
  const absl::Time start = absl::Now();
  absl::StatusOr<ir::StepOutputs> out = actor1->RunStep(3, {}, network.Endpoint(1), absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(out.status().message(),
              HasSubstr("actor 1, step 3, instruction 0 (F1.1 recv <- actor 0 tag 101): no message from actor 0 "
                        "with tag 101 after waiting"));
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(Executor, ReceivedTensorOfWrongTypeIsRejected) {
  TwoStageForward programs = MakeTwoStageForward(1);
  std::unique_ptr<Executor> actor1 = MakeExecutor(programs.actor1);
  ASSERT_TRUE(actor1->LoadState({{"w1", Iota(F32({4, 1}), 0, 1)}}).ok());
  InMemoryNetwork network(2);
  ASSERT_TRUE(network.Endpoint(0).Send(1, 100, {Iota(F32({4, 2}), 0, 1)}).ok());
  absl::StatusOr<ir::StepOutputs> out = actor1->RunStep(1, {}, network.Endpoint(1), kTimeout);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(),
              HasSubstr("tensor 0 of the message from actor 0 with tag 100 is f32[4,2] but buffer 1 (h@0) is f32[2,4]"));
}

TEST(Executor, CreateRejectsAnInvalidProgram) {
  ir::ActorProgram program = MakeTwoStageForward(1).actor0;
  program.instructions[1].peer = 0;
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(program);
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(executor.status().message(), HasSubstr("peer 0 is this actor itself"));
}

// Fill pieces (ir::InstructionKind::kFill): a piece runs while the message
// the pipeline waits on next is missing, and gives way when it is there.
TEST(ExecutorFill, APieceRunsWhileTheAwaitedMessageIsMissing) {
  FillPair pair = MakeFillPair();
  std::unique_ptr<Executor> sender = MakeExecutor(pair.sender);
  std::unique_ptr<Executor> filler = MakeExecutor(pair.filler);
  ASSERT_TRUE(sender->LoadState({}).ok());
  ASSERT_TRUE(filler->LoadState({}).ok());
  const ir::HostTensor x = Iota(F32({3}), 0.5f, 0.25f);
  const ir::HostTensor h = Iota(F32({3}), -1.0f, 0.75f);
  InMemoryNetwork network(2);
  ASSERT_TRUE(filler->BeginStep(1, {{{"fill/x", 0}, x}}).ok());
  // The piece first: actor 0 has sent nothing yet.
  ASSERT_TRUE(filler->RunRange(0, 1, network.Endpoint(1), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> sent = sender->RunStep(1, {{{"h", 0}, h}}, network.Endpoint(0), kTimeout);
  ASSERT_TRUE(sent.ok()) << sent.status();
  ASSERT_TRUE(filler->RunRange(1, 4, network.Endpoint(1), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> out = filler->FinishStep();
  ASSERT_TRUE(out.ok()) << out.status();
  const ir::HostTensor& y = out->results.at("fill").at(0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y.f32()[i], x.f32()[i] * 2.0f);
  EXPECT_TRUE(out->results.at("h").at(0).BitwiseEquals(h));
  // x, then x and y while the piece runs: the static peak, with the piece.
  EXPECT_EQ(pair.filler.static_peak_bytes, 24);
  EXPECT_EQ(out->peak_live_bytes, 24);
}

TEST(ExecutorFill, APieceGivesWayToAMessageThatIsThere) {
  FillPair pair = MakeFillPair();
  std::unique_ptr<Executor> sender = MakeExecutor(pair.sender);
  std::unique_ptr<Executor> filler = MakeExecutor(pair.filler);
  ASSERT_TRUE(sender->LoadState({}).ok());
  ASSERT_TRUE(filler->LoadState({}).ok());
  const ir::HostTensor h = Iota(F32({3}), -1.0f, 0.75f);
  InMemoryNetwork network(2);
  ASSERT_TRUE(sender->RunStep(1, {{{"h", 0}, h}}, network.Endpoint(0), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> out =
      filler->RunStep(1, {{{"fill/x", 0}, Iota(F32({3}), 0, 1)}}, network.Endpoint(1), kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  // Skipped: nothing reported, its input released; the receive got the
  // message the piece found.
  EXPECT_EQ(out->results.count("fill"), 0u);
  EXPECT_TRUE(out->results.at("h").at(0).BitwiseEquals(h));
  EXPECT_TRUE(network.PendingMessages().empty());
  EXPECT_EQ(out->peak_live_bytes, 12);
  EXPECT_EQ(out->timings.size(), 4u);
}

TEST(ExecutorFill, AnUnguardedPieceAlwaysRuns) {
  FillPair pair = MakeFillPair(/*guarded=*/false);
  std::unique_ptr<Executor> sender = MakeExecutor(pair.sender);
  std::unique_ptr<Executor> filler = MakeExecutor(pair.filler);
  ASSERT_TRUE(sender->LoadState({}).ok());
  ASSERT_TRUE(filler->LoadState({}).ok());
  InMemoryNetwork network(2);
  ASSERT_TRUE(sender->RunStep(1, {{{"h", 0}, Iota(F32({3}), 0, 1)}}, network.Endpoint(0), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> out =
      filler->RunStep(1, {{{"fill/x", 0}, Iota(F32({3}), 1, 1)}}, network.Endpoint(1), kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->results.at("fill").at(0).f32()[2], 6.0f);
}

// A training piece also writes state: its new value stays, step after
// step, and only its temporary result counts toward the peak.
TEST(ExecutorFill, ATrainingPieceKeepsTheStateItWritesAcrossSteps) {
  FillPair pair = MakeFillPair(/*guarded=*/false);
  ir::ActorProgram& program = pair.filler;
  program.functions[0] = TraceFunction("fill", [](Tracer& t) -> std::vector<std::pair<std::string, Tensor>> {
    Tensor x = t.Input("x", F32({3}));
    Tensor s = t.Parameter("s", {3}, init::Zeros());
    return {{"y", x * 2.0}, {"s", s + x}};
  });
  const auto state = static_cast<ir::BufferId>(program.buffers.size());
  program.buffers.push_back(StateBuffer("fill/s", F32({3})));
  program.instructions[0].inputs = {0, state};
  program.instructions[0].outputs = {1, state};
  program.static_peak_bytes = ir::StaticPeakBytes(program);
  ASSERT_TRUE(VerifyActorProgram(program).ok()) << VerifyActorProgram(program);
  // s and x, then y while the piece runs; s's new value replaces the old.
  EXPECT_EQ(program.static_peak_bytes, 36);

  std::unique_ptr<Executor> sender = MakeExecutor(pair.sender);
  std::unique_ptr<Executor> filler = MakeExecutor(program);
  ASSERT_TRUE(sender->LoadState({}).ok());
  ASSERT_TRUE(filler->LoadState({{"fill/s", Iota(F32({3}), 1, 0)}}).ok());
  for (int64_t step = 1; step <= 2; ++step) {
    InMemoryNetwork network(2);
    absl::StatusOr<ir::StepOutputs> sent =
        sender->RunStep(step, {{{"h", 0}, Iota(F32({3}), 0, 1)}}, network.Endpoint(0), kTimeout);
    ASSERT_TRUE(sent.ok()) << sent.status();
    absl::StatusOr<ir::StepOutputs> out =
        filler->RunStep(step, {{{"fill/x", 0}, Iota(F32({3}), 1, 1)}}, network.Endpoint(1), kTimeout);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->peak_live_bytes, 36);
  }
  // 1 + 2 * (1, 2, 3)
  absl::StatusOr<ir::TensorMap> read = filler->State();
  ASSERT_TRUE(read.ok()) << read.status();
  const ir::TensorMap& kept = *read;
  EXPECT_EQ(kept.at("fill/s").f32()[0], 3.0f);
  EXPECT_EQ(kept.at("fill/s").f32()[2], 7.0f);
}

}  // namespace
}  // namespace tandem::actor::testing

// Device: opening devices (a GPU that is not there is a clear error), and
// the executor computing every `run` instruction on its device. Naming them:
// tests/ir/device_spec_test.cc.
#include "backends/device.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actor/executor.h"
#include "actor/in_memory_transport.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/interpreter.h"
#include "backends/open_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/device_spec.h"
#include "tests/testing/test_programs.h"
#ifdef TANDEM_WITH_CUDA
#include "backends/cuda/cuda_runtime.h"
#endif

namespace tandem::backends::testing {
namespace {

using ::tandem::actor::Executor;
using ::tandem::actor::testing::F32;
using ::tandem::actor::testing::Iota;
using ::tandem::actor::testing::MakeTwoStageForward;
using ::tandem::actor::testing::TwoStageForward;
using ::testing::HasSubstr;

TEST(Device, CpuIsTheReferenceKernels) {
  absl::StatusOr<std::shared_ptr<backends::Device>> device = backends::OpenDevice({}, 3);
  ASSERT_TRUE(device.ok());
  EXPECT_EQ((*device)->name(), "cpu");
  EXPECT_EQ(device->get(), cpu::CpuDevice().get());
}

TEST(Device, OnlyTheGpuTimesNodes) {
  std::vector<double> node_ms;
  const absl::Status status = cpu::CpuDevice()->set_node_times(&node_ms);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("cpu does not time nodes"));
}

TEST(Device, ACudaDeviceThatIsNotThereIsAClearError) {
#ifdef TANDEM_WITH_CUDA
  if (cuda::ProbeDevices().count > 0) GTEST_SKIP() << "a CUDA device is visible";
  absl::StatusOr<std::shared_ptr<backends::Device>> device = backends::OpenDevice(*ir::ParseDeviceSpec("cuda"), 1);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("device cuda for actor 1: no CUDA device is visible ("));
  device = backends::OpenDevice(*ir::ParseDeviceSpec("cuda:0"), 0);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("no CUDA device"));
#else
  absl::StatusOr<std::shared_ptr<backends::Device>> device = backends::OpenDevice(*ir::ParseDeviceSpec("cuda"), 1);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.status().message(), HasSubstr("TANDEM_WITH_CUDA=OFF"));
#endif
}

// A device that computes with the reference kernels and records what it
// compiled and ran, and can be told to fail.
class RecordingDevice final : public backends::Device {
 public:
  class Recorded final : public backends::Executable {
   public:
    Recorded(RecordingDevice* device, const ir::Graph& graph) : device_(device), graph_(graph) {}
    absl::StatusOr<backends::HandleMap> Run(const backends::HandleMap& inputs) override {
      device_->ran.push_back(graph_.name());
      if (device_->fail) return absl::ResourceExhaustedError("out of device memory");
      ir::TensorMap host;
      for (const auto& [input, handle] : inputs) host.emplace(input, handle.host());
      absl::StatusOr<ir::TensorMap> results = cpu::RunGraph(graph_, host);
      if (!results.ok()) return results.status();
      backends::HandleMap outputs;
      for (auto& [output, tensor] : *results) outputs.emplace(output, std::move(tensor));
      return outputs;
    }

   private:
    RecordingDevice* const device_;
    const ir::Graph graph_;
  };

  std::string name() const override { return "recording"; }
  absl::StatusOr<std::unique_ptr<backends::Executable>> Compile(const ir::Graph& graph) override {
    compiled.push_back(graph.name());
    return std::make_unique<Recorded>(this, graph);
  }
  absl::StatusOr<TensorHandle> Accumulate(const TensorHandle& acc, const TensorHandle& grad) override {
    return cpu::CpuDevice()->Accumulate(acc, grad);
  }
  std::vector<std::string> compiled;
  std::vector<std::string> ran;
  bool fail = false;
};

TEST(Device, TheExecutorRunsEveryFunctionOnItsDevice) {
  constexpr int32_t kMicrobatches = 2;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  const ir::TensorMap state = {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
  ir::StepInputs inputs;
  for (int32_t m = 0; m < kMicrobatches; ++m) inputs[{"x", m}] = Iota(F32({2, 3}), 0.1f * m - 0.2f, 0.37f);
  auto device0 = std::make_shared<RecordingDevice>();
  auto device1 = std::make_shared<RecordingDevice>();
  absl::StatusOr<std::unique_ptr<Executor>> actor0 = Executor::Create(programs.actor0, device0);
  absl::StatusOr<std::unique_ptr<Executor>> actor1 = Executor::Create(programs.actor1, device1);
  absl::StatusOr<std::unique_ptr<Executor>> reference1 = Executor::Create(programs.actor1);
  ASSERT_TRUE(actor0.ok() && actor1.ok() && reference1.ok());
  EXPECT_EQ((*actor1)->device().name(), "recording");
  EXPECT_EQ((*reference1)->device().name(), "cpu");
  ASSERT_TRUE((*actor0)->LoadState(state).ok());
  ASSERT_TRUE((*actor1)->LoadState(state).ok());
  actor::InMemoryNetwork network(2);
  constexpr absl::Duration kTimeout = absl::Seconds(10);
  ASSERT_TRUE((*actor0)->RunStep(1, inputs, network.Endpoint(0), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> out1 = (*actor1)->RunStep(1, inputs, network.Endpoint(1), kTimeout);
  ASSERT_TRUE(out1.ok()) << out1.status();
  // Each function compiled once, when the executor was made; run per microbatch.
  EXPECT_EQ(device0->compiled, std::vector<std::string>{programs.actor0.functions[0].graph.name()});
  EXPECT_EQ(device0->ran, std::vector<std::string>(kMicrobatches, programs.actor0.functions[0].graph.name()));
  EXPECT_EQ(device1->ran, std::vector<std::string>(kMicrobatches, programs.actor1.functions[0].graph.name()));
  EXPECT_EQ(out1->results.at("loss").size(), kMicrobatches);

  // A device error ends the step with the instruction's context and code.
  device0->fail = true;
  actor::InMemoryNetwork second(2);
  absl::StatusOr<ir::StepOutputs> failed = (*actor0)->RunStep(2, inputs, second.Endpoint(0), kTimeout);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(failed.status().message(), HasSubstr("actor 0, step 2, instruction 0"));
  EXPECT_THAT(failed.status().message(), HasSubstr("out of device memory"));
}

TEST(Device, AnExecutorNeedsADevice) {
  TwoStageForward programs = MakeTwoStageForward(1);
  absl::StatusOr<std::unique_ptr<Executor>> executor = Executor::Create(programs.actor0, nullptr);
  ASSERT_FALSE(executor.ok());
  EXPECT_EQ(executor.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::backends::testing

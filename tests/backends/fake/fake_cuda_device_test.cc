// The emulated GPU (--device fake-cuda): reference bits computed on device
// memory, a poisoned stream as a sticky error, the fault specs, and an
// executor pair that keeps every buffer on its device and exchanges device
// tensors over CUDA IPC (DeviceTransport), compared bitwise with the CPU
// executors and with its device peak measured on the device's allocations.
#include "backends/fake/fake_cuda_device.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "actor/device_transport.h"
#include "actor/executor.h"
#include "actor/in_memory_transport.h"
#include "backends/cpu/interpreter.h"
#include "backends/open_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/device_spec.h"
#include "ir/graph_builder.h"
#include "tests/testing/test_programs.h"

namespace tandem::fake::testing {
namespace {

using ::tandem::actor::testing::F32;
using ::tandem::actor::testing::Iota;
using ::tandem::actor::testing::MakeTwoStageForward;
using ::tandem::actor::testing::TwoStageForward;
using ::testing::HasSubstr;

std::shared_ptr<FakeCudaDevice> OpenFake(FakeCudaDevice::Options options = {}) {
  absl::StatusOr<std::shared_ptr<FakeCudaDevice>> device = FakeCudaDevice::Create(options);
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? *device : nullptr;
}

// y = relu(x @ w) + x @ w
ir::Graph SmallGraph() {
  ir::Graph graph;
  ir::GraphBuilder builder(&graph);
  const ir::ValueId x = builder.AddInput("x", "data", F32({2, 3}), {});
  const ir::ValueId w = builder.AddInput("w", "parameter", F32({3, 4}), {});
  const ir::ValueId h = builder.Add(ir::OpKind::kMatMul, {x, w}, {}, {});
  const ir::ValueId r = builder.Add(ir::OpKind::kRelu, {h}, {}, {});
  graph.AddOutput("y", builder.Add(ir::OpKind::kAdd, {r, h}, {}, {}));
  EXPECT_TRUE(builder.ok()) << builder.status();
  return graph;
}

TEST(FakeCudaDevice, RunComputesTheReferenceBitsOnDeviceMemory) {
  std::shared_ptr<FakeCudaDevice> device = OpenFake();
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->name(), "fake-cuda");
  ASSERT_NE(device->memory(), nullptr);
  const ir::TensorMap inputs = {{"x", Iota(F32({2, 3}), -0.4f, 0.3f)}, {"w", Iota(F32({3, 4}), 0.7f, -0.11f)}};
  const ir::Graph graph = SmallGraph();
  backends::HandleMap handles;
  for (const auto& [name, tensor] : inputs) {
    absl::StatusOr<backends::TensorHandle> uploaded = device->Upload(tensor);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    EXPECT_TRUE(uploaded->on_device());
    handles.emplace(name, *std::move(uploaded));
  }
  const int64_t before = device->memory()->allocated_bytes();
  EXPECT_EQ(before, (2 * 3 + 3 * 4) * 4);
  absl::StatusOr<backends::HandleMap> outputs = device->Run(graph, handles);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const backends::TensorHandle& y = outputs->at("y");
  ASSERT_TRUE(y.on_device());
  EXPECT_EQ(device->memory()->allocated_bytes(), before + 2 * 4 * 4);  // only the output stays
  absl::StatusOr<ir::HostTensor> downloaded = device->Download(y);
  ASSERT_TRUE(downloaded.ok()) << downloaded.status();
  absl::StatusOr<ir::TensorMap> expected = cpu::RunGraph(graph, inputs);
  ASSERT_TRUE(expected.ok());
  EXPECT_TRUE(downloaded->BitwiseEquals(expected->at("y")));
  // The host convenience gives the same.
  absl::StatusOr<ir::TensorMap> direct = device->RunGraph(graph, inputs);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(direct->at("y").BitwiseEquals(expected->at("y")));
  outputs->clear();
  handles.clear();
  EXPECT_EQ(device->memory()->allocated_bytes(), 0);
}

TEST(FakeCudaDevice, AccumulateOnTheDeviceGivesAccumulateGradientsBits) {
  std::shared_ptr<FakeCudaDevice> device = OpenFake();
  ASSERT_NE(device, nullptr);
  const ir::HostTensor acc = Iota(F32({5, 3}), 0.1f, 0.37f);
  const ir::HostTensor grad = Iota(F32({5, 3}), -2.3f, 0.291f);
  absl::StatusOr<backends::TensorHandle> device_acc = device->Upload(acc);
  absl::StatusOr<backends::TensorHandle> device_grad = device->Upload(grad);
  ASSERT_TRUE(device_acc.ok() && device_grad.ok());
  absl::StatusOr<backends::TensorHandle> sum = device->Accumulate(*device_acc, *device_grad);
  ASSERT_TRUE(sum.ok()) << sum.status();
  ASSERT_TRUE(sum->on_device());
  absl::StatusOr<ir::HostTensor> downloaded = device->Download(*sum);
  absl::StatusOr<ir::HostTensor> expected = cpu::AccumulateGradient(acc, grad);
  ASSERT_TRUE(downloaded.ok() && expected.ok());
  EXPECT_TRUE(downloaded->BitwiseEquals(*expected));
  absl::StatusOr<backends::TensorHandle> other = device->Upload(Iota(F32({3, 5}), 0, 1));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(device->Accumulate(*device_acc, *other).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeCudaDevice, HostTensorsAndAnotherDevicesTensorsAreRefusedAsInputs) {
  std::shared_ptr<FakeCudaDevice> device = OpenFake();
  std::shared_ptr<FakeCudaDevice> other = OpenFake();
  ASSERT_NE(device, nullptr);
  ASSERT_NE(other, nullptr);
  const ir::Graph graph = SmallGraph();
  absl::StatusOr<backends::TensorHandle> w = device->Upload(Iota(F32({3, 4}), 0, 1));
  absl::StatusOr<backends::TensorHandle> foreign = other->Upload(Iota(F32({2, 3}), 0, 1));
  ASSERT_TRUE(w.ok() && foreign.ok());
  for (const backends::TensorHandle& x : {backends::TensorHandle(Iota(F32({2, 3}), 0, 1)), *foreign}) {
    absl::StatusOr<backends::HandleMap> outputs = device->Run(graph, {{"x", x}, {"w", *w}});
    ASSERT_FALSE(outputs.ok());
    EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(outputs.status().message(), HasSubstr("input 'x' is not in this device's memory"));
  }
}

TEST(FakeCudaDevice, APoisonedStreamFailsThatRunAndEveryLaterCall) {
  std::shared_ptr<FakeCudaDevice> device = OpenFake({.poison_at_run = 2});
  ASSERT_NE(device, nullptr);
  const ir::Graph graph = SmallGraph();
  const ir::TensorMap inputs = {{"x", Iota(F32({2, 3}), 0, 1)}, {"w", Iota(F32({3, 4}), 0, 1)}};
  ASSERT_TRUE(device->RunGraph(graph, inputs).ok());
  absl::StatusOr<ir::TensorMap> second = device->RunGraph(graph, inputs);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(second.status().message(), HasSubstr("the stream is poisoned"));
  EXPECT_THAT(second.status().message(), HasSubstr("function call 2 faulted"));
  // Sticky, as a CUDA context after a faulting kernel.
  absl::StatusOr<backends::TensorHandle> upload = device->Upload(Iota(F32({2}), 0, 1));
  ASSERT_FALSE(upload.ok());
  EXPECT_THAT(upload.status().message(), HasSubstr("poisoned"));
  EXPECT_FALSE(device->memory()->SynchronizeStream(absl::Now() + absl::Seconds(5)).ok());
}

TEST(FakeCudaFaults, ParsesItsOwnFaultsForTheirActorAndIgnoresOthers) {
  absl::StatusOr<FakeCudaFaults> poison = ParseFakeCudaFaults("fake-cuda-poison:1:7", 1);
  ASSERT_TRUE(poison.ok()) << poison.status();
  EXPECT_EQ(poison->poison_at_run, 7);
  EXPECT_EQ(poison->die_at_send, -1);
  absl::StatusOr<FakeCudaFaults> die = ParseFakeCudaFaults("fake-cuda-die:0:3", 0);
  ASSERT_TRUE(die.ok());
  EXPECT_EQ(die->die_at_send, 3);
  absl::StatusOr<FakeCudaFaults> elsewhere = ParseFakeCudaFaults("fake-cuda-die:0:3", 1);
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->die_at_send, -1);
  absl::StatusOr<FakeCudaFaults> unrelated = ParseFakeCudaFaults("checkpoint-before-manifest", 0);
  ASSERT_TRUE(unrelated.ok());
  EXPECT_EQ(unrelated->poison_at_run, -1);
  for (const char* bad : {"fake-cuda-poison:1", "fake-cuda-poison:x:2", "fake-cuda-die:0:0", "fake-cuda-die:-1:2"}) {
    absl::StatusOr<FakeCudaFaults> parsed = ParseFakeCudaFaults(bad, 0);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("expected fake-cuda-poison:ACTOR:N"));
  }
  absl::StatusOr<std::shared_ptr<backends::Device>> opened =
      backends::OpenDevice({.kind = ir::DeviceSpec::Kind::kFakeCuda}, 0, {.fault = "fake-cuda-die:zero:1"});
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeCudaDevice, NamedAsADeviceSpec) {
  absl::StatusOr<ir::DeviceSpec> spec = ir::ParseDeviceSpec("fake-cuda");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, ir::DeviceSpec::Kind::kFakeCuda);
  EXPECT_EQ(ir::DeviceSpecName(*spec), "fake-cuda");
  EXPECT_TRUE(backends::CheckDeviceVisible(*spec).ok());
  EXPECT_FALSE(ir::ParseDeviceSpec("fake-cuda:1").ok());
}

// One actor of a device-resident pair: its device, its DeviceTransport over
// the in-memory network, its executor.
struct ResidentActor {
  std::shared_ptr<FakeCudaDevice> device;
  std::unique_ptr<actor::DeviceTransport> transport;
  std::unique_ptr<actor::Executor> executor;
};

TEST(FakeCudaExecutor, ATwoActorPipelineKeepsItsBuffersOnTheDeviceAndMatchesTheCpuBitwise) {
  constexpr int32_t kMicrobatches = 3;
  TwoStageForward programs = MakeTwoStageForward(kMicrobatches);
  const ir::TensorMap state = {{"w0", Iota(F32({3, 4}), -0.7f, 0.13f)}, {"w1", Iota(F32({4, 1}), 0.3f, -0.21f)}};
  ir::StepInputs inputs;
  for (int32_t m = 0; m < kMicrobatches; ++m) inputs[{"x", m}] = Iota(F32({2, 3}), 0.1f * m - 0.2f, 0.37f);
  constexpr absl::Duration kTimeout = absl::Seconds(20);

  // The CPU executors, for the bits.
  actor::InMemoryNetwork cpu_network(2);
  absl::StatusOr<std::unique_ptr<actor::Executor>> cpu0 = actor::Executor::Create(programs.actor0);
  absl::StatusOr<std::unique_ptr<actor::Executor>> cpu1 = actor::Executor::Create(programs.actor1);
  ASSERT_TRUE(cpu0.ok() && cpu1.ok());
  ASSERT_TRUE((*cpu0)->LoadState(state).ok() && (*cpu1)->LoadState(state).ok());
  ASSERT_TRUE((*cpu0)->RunStep(1, inputs, cpu_network.Endpoint(0), kTimeout).ok());
  absl::StatusOr<ir::StepOutputs> expected = (*cpu1)->RunStep(1, inputs, cpu_network.Endpoint(1), kTimeout);
  ASSERT_TRUE(expected.ok()) << expected.status();

  actor::InMemoryNetwork network(2);
  ResidentActor actors[2];
  const ir::ActorProgram* program[2] = {&programs.actor0, &programs.actor1};
  for (int32_t a = 0; a < 2; ++a) {
    actors[a].device = OpenFake();
    ASSERT_NE(actors[a].device, nullptr);
    actor::DeviceTransport::Options options;
    options.ipc.ring_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<actor::DeviceTransport>> transport =
        actor::DeviceTransport::Create(network.Endpoint(a), *actors[a].device->memory(), 2, options);
    ASSERT_TRUE(transport.ok()) << transport.status();
    actors[a].transport = *std::move(transport);
    absl::StatusOr<std::unique_ptr<actor::Executor>> executor = actor::Executor::Create(*program[a], actors[a].device);
    ASSERT_TRUE(executor.ok()) << executor.status();
    actors[a].executor = *std::move(executor);
    ASSERT_TRUE(actors[a].executor->LoadState(state).ok());
  }
  // The state lives on the devices now.
  EXPECT_EQ(actors[0].device->memory()->allocated_bytes() > 0, true);

  absl::StatusOr<ir::StepOutputs> outputs[2];
  absl::Status connected[2];
  {
    std::vector<std::thread> threads;
    for (int32_t a = 0; a < 2; ++a) {
      threads.emplace_back([&, a] {
        connected[a] = actors[a].transport->Connect({1 - a}, absl::Now() + kTimeout);
        if (connected[a].ok()) {
          outputs[a] = actors[a].executor->RunStep(1, inputs, *actors[a].transport, kTimeout);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (int32_t a = 0; a < 2; ++a) {
    ASSERT_TRUE(connected[a].ok()) << connected[a];
    ASSERT_TRUE(outputs[a].ok()) << outputs[a].status();
    // Measured on the device's allocations, it is the static peak.
    EXPECT_EQ(outputs[a]->device_peak_bytes, program[a]->static_peak_bytes) << "actor " << a;
    EXPECT_EQ(outputs[a]->peak_live_bytes, program[a]->static_peak_bytes) << "actor " << a;
  }
  ASSERT_EQ(outputs[1]->results.at("loss").size(), kMicrobatches);
  for (int32_t m = 0; m < kMicrobatches; ++m) {
    EXPECT_TRUE(outputs[1]->results.at("loss").at(m).BitwiseEquals(expected->results.at("loss").at(m)))
        << "microbatch " << m;
  }
  // Buffers are read back from the device.
  absl::StatusOr<ir::HostTensor> w1 = actors[1].executor->ReadBuffer("w1");
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_TRUE(w1->BitwiseEquals(state.at("w1")));
  absl::StatusOr<ir::TensorMap> read = actors[0].executor->State();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->at("w0").BitwiseEquals(state.at("w0")));
}

// Peers on no common device (another host, another GPU) get device tensors
// staged through the host transport: the bits arrive, in the receiver's
// device memory.
TEST(FakeCudaTransport, APeerOffTheDeviceGetsDeviceTensorsThroughTheHost) {
  std::shared_ptr<FakeCudaDevice> sender_device = OpenFake();
  std::shared_ptr<FakeCudaDevice> receiver_device = OpenFake();
  ASSERT_NE(sender_device, nullptr);
  ASSERT_NE(receiver_device, nullptr);
  actor::InMemoryNetwork network(2);
  absl::StatusOr<std::unique_ptr<actor::DeviceTransport>> sender =
      actor::DeviceTransport::Create(network.Endpoint(0), *sender_device->memory(), 2, {});
  absl::StatusOr<std::unique_ptr<actor::DeviceTransport>> receiver =
      actor::DeviceTransport::Create(network.Endpoint(1), *receiver_device->memory(), 2, {});
  ASSERT_TRUE(sender.ok() && receiver.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  ASSERT_TRUE((*sender)->Connect({}, deadline).ok());  // no IPC peer: they share no device
  ASSERT_TRUE((*receiver)->Connect({}, deadline).ok());
  const ir::HostTensor a = Iota(F32({3, 4}), 0, 1);
  const ir::HostTensor b = Iota(F32({5}), 100, 2);
  absl::StatusOr<backends::TensorHandle> a_device = sender_device->Upload(a);
  absl::StatusOr<backends::TensorHandle> b_device = sender_device->Upload(b);
  ASSERT_TRUE(a_device.ok() && b_device.ok());
  ASSERT_TRUE((*sender)->SendDevice(1, 7, {a_device->device(), b_device->device()}).ok());
  absl::StatusOr<std::vector<backends::DeviceTensor>> got = (*receiver)->ReceiveDevice(0, 7, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(&(*got)[i].storage->memory(), receiver_device->memory()) << "tensor " << i;
    absl::StatusOr<ir::HostTensor> host = receiver_device->Download(backends::TensorHandle((*got)[i]));
    ASSERT_TRUE(host.ok()) << host.status();
    EXPECT_TRUE(host->BitwiseEquals(i == 0 ? a : b)) << "tensor " << i;
  }
}

// A plain host transport carries no device tensors at all.
TEST(FakeCudaExecutor, AHostOnlyTransportRefusesDeviceTensors) {
  TwoStageForward programs = MakeTwoStageForward(1);
  std::shared_ptr<FakeCudaDevice> device = OpenFake();
  ASSERT_NE(device, nullptr);
  absl::StatusOr<std::unique_ptr<actor::Executor>> executor = actor::Executor::Create(programs.actor0, device);
  ASSERT_TRUE(executor.ok());
  ASSERT_TRUE((*executor)->LoadState({{"w0", Iota(F32({3, 4}), 0, 1)}}).ok());
  actor::InMemoryNetwork host_only(2);
  absl::StatusOr<ir::StepOutputs> out =
      (*executor)->RunStep(5, {{{"x", 0}, Iota(F32({2, 3}), 0, 1)}}, host_only.Endpoint(0), absl::Seconds(5));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("actor 0, step 5, instruction"));
  EXPECT_THAT(out.status().message(), HasSubstr("this data plane carries host tensors only"));
}

}  // namespace
}  // namespace tandem::fake::testing

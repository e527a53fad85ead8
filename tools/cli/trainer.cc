#include "tools/cli/trainer.h"

#include <cstdint>
#include <fstream>
#include <optional>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "backends/open_device.h"
#include "controller/memory_fit.h"
#include "ir/device_spec.h"
#include "ir/host_tensor.h"
#include "schedules/simulator.h"

namespace tandem::cli {

absl::StatusOr<std::string> Trainer::SaveCheckpoint(const std::string&) {
  return absl::UnimplementedError("checkpoints need a pipeline (--launcher local or threads)");
}

absl::Status Trainer::BeginCheckpoint(const std::string& root) { return SaveCheckpoint(root).status(); }

absl::StatusOr<std::string> Trainer::FinishCheckpoint(bool) { return std::string(); }

absl::Status ReferenceTrainer::CheckFits(const ir::TrainStep& step, const ir::DeviceSpec& device) {
  if (device.kind == ir::DeviceSpec::Kind::kCuda) return absl::OkStatus();
  return controller::CheckWholeModelFitsThisHost(step, controller::WholeModel::kTraining);
}

absl::StatusOr<std::unique_ptr<Trainer>> ReferenceTrainer::Open(const ir::TrainStep& step,
                                                                const ir::StateSources& state,
                                                                const ir::DeviceSpec& device, int threads) {
  absl::StatusOr<std::shared_ptr<backends::Device>> opened = backends::OpenDevice(device, 0);
  if (!opened.ok()) return opened.status();
  // GEMM tiles on one BLAS thread each, as in every actor
  // (backends/cpu/kernel_threads.h).
  cpu::SetBlasThreads(1);
  // The reference trains in this process, step after step, as an actor does.
  ir::SetStorageCacheBytes(ir::kComputeStorageCacheBytes);
  absl::StatusOr<ir::TensorMap> tensors = ir::MaterializeStates(state);
  if (!tensors.ok()) return tensors.status();
  return std::make_unique<ReferenceTrainer>(step, *std::move(tensors), *std::move(opened), threads);
}

absl::StatusOr<cpu::StepResult> ReferenceTrainer::Step(const std::vector<ir::TensorMap>& batch, int64_t step) {
  cpu::GraphRunner runner = [this](const ir::Graph& graph, const ir::TensorMap& inputs) {
    return device_->RunGraph(graph, inputs);
  };
  return threads_.Run([&] { return cpu::RunReferenceStep(step_, state_, batch, step, runner); });
}

absl::StatusOr<cpu::StepResult> PipelineTrainer::Step(const std::vector<ir::TensorMap>& batch, int64_t) {
  absl::StatusOr<controller::StepReport> report = session_->Step(batch);
  if (!report.ok()) return report.status();
  last_ = *std::move(report);
  return cpu::StepResult{.losses = last_.losses, .gradient_squares = last_.gradient_squares};
}

absl::StatusOr<std::vector<float>> ReferenceTrainer::Validate(const examples::ExampleJob& job, const ir::TrainStep*,
                                                               int64_t count, const std::string&) {
  std::vector<float> losses;
  for (int64_t i = 0; i < count; ++i) {
    absl::StatusOr<std::vector<ir::TensorMap>> batch = job.validation_batch(static_cast<uint64_t>(i));
    if (!batch.ok()) return batch.status();
    absl::StatusOr<std::vector<float>> batch_losses =
        threads_.Run([&] { return cpu::EvaluateLosses(step_, state_, *batch); });
    if (!batch_losses.ok()) return batch_losses.status();
    losses.insert(losses.end(), batch_losses->begin(), batch_losses->end());
  }
  return losses;
}

absl::StatusOr<std::vector<float>> PipelineTrainer::Validate(const examples::ExampleJob& job,
                                                              const ir::TrainStep* forward, int64_t count,
                                                              const std::string& scratch) {
  if (forward == nullptr) return absl::InvalidArgumentError("a pipeline validates through its forward step");
  absl::StatusOr<std::vector<std::vector<ir::HostTensor>>> outputs = session_->Evaluate(
      *forward, count, [&job](int64_t i) { return job.validation_batch(static_cast<uint64_t>(i)); }, scratch);
  if (!outputs.ok()) return outputs.status();
  std::vector<float> losses;
  for (const std::vector<ir::HostTensor>& batch : *outputs) {
    for (const ir::HostTensor& loss : batch) {
      if (loss.dtype() != ir::DType::kF32 || loss.num_elements() != 1) {
        return absl::InternalError(absl::StrCat("the forward step's output is ", ir::TypeToString(loss.type()),
                                                ", not a loss (f32[])"));
      }
      losses.push_back(loss.f32()[0]);
    }
  }
  return losses;
}

absl::Status WriteTrace(const controller::StepTrace& trace, const schedules::Schedule& schedule,
                        const std::string& path, std::ostream& out) {
  std::ofstream file(path);
  file << trace.ToJson();
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write the trace to ", path));
  absl::StatusOr<schedules::SimulationResult> simulated = schedules::Simulate(schedule, trace.CalibratedCosts());
  if (!simulated.ok()) return simulated.status();
  const std::vector<double> measured = trace.MeasuredBubble();
  out << absl::StrFormat("trace: %d steps written to %s (open in ui.perfetto.dev or chrome://tracing)\n", trace.steps(),
                         path);
  out << "actor  measured bubble  simulated bubble (calibrated costs)\n";
  // Data-parallel replicas: the simulator plays one replica; each actor is
  // compared with its position in it.
  const size_t positions = simulated->per_actor.size();
  for (size_t actor = 0; actor < measured.size(); ++actor) {
    out << absl::StrFormat("%5d  %14.1f%%  %16.1f%%\n", actor, 100 * measured[actor],
                           100 * simulated->per_actor[actor % positions].bubble);
  }
  return absl::OkStatus();
}

}  // namespace tandem::cli

#include "tools/cli/fill_run.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ir/bitwise.h"
#include "ir/statistics.h"

namespace tandem::cli {
namespace {

using ir::Median;

double Seconds(const std::vector<int64_t>& ns) {
  return static_cast<double>(std::accumulate(ns.begin(), ns.end(), int64_t{0})) * 1e-9;
}

}  // namespace

FillRun::FillRun(examples::ExampleFillJob job, Session* main, std::unique_ptr<Session> baseline, bool verify)
    : example_(std::move(job)), main_(main), baseline_(std::move(baseline)), verify_(verify) {
  auto fill = std::make_shared<controller::FillJob>();
  fill->name = example_.name;
  fill->piece = example_.piece;
  fill->state = example_.state;
  fill->input = example_.input;
  fill->items = example_.items;
  job_ = std::move(fill);
  calibration_.emplace(baseline_->compiled());
}

absl::StatusOr<std::string> FillRun::AfterStep(int64_t index, const std::vector<ir::TensorMap>& batch,
                                               const std::vector<float>& losses, double seconds,
                                               const controller::StepReport& report) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<controller::StepReport> baseline = baseline_->Step(batch);
  const double baseline_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!baseline.ok()) return baseline.status();
  if (!ir::BitwiseEqual(baseline->losses, losses)) {
    return absl::InternalError(absl::StrCat("the pipeline's losses with fill differ from its losses without fill at step ",
                                            report.step));
  }
  std::string note;
  if (started_) {
    main_seconds_.push_back(seconds);
    baseline_seconds_.push_back(baseline_seconds);
    main_busy_s_ += Seconds(report.busy_ns);
    main_fill_s_ += Seconds(report.fill_busy_ns);
    baseline_busy_s_ += Seconds(baseline->busy_ns);
    pieces_done_ += static_cast<int64_t>(report.fill_done.size());
    pieces_skipped_ += report.fill_skipped;
    if (job_->trains()) {
      for (const auto& [slot, loss] : report.fill_outputs) losses_[actor_of_slot_.at(slot)].push_back(loss.f32()[0]);
    }
    note = absl::StrFormat("  fill %d/%d", report.fill_done.size(), plan_.total_pieces());
    if (verify_) {
      if (absl::Status status = Verify(report); !status.ok()) return status;
    }
  } else {
    calibration_->AddStep(*baseline);
    if (index >= kCalibrationSteps) {
      if (absl::Status status = Start(); !status.ok()) return status;
      note = absl::StrFormat("  fill starts: %d pieces per step", plan_.total_pieces());
    }
  }
  return note;
}

absl::Status FillRun::Start() {
  absl::StatusOr<double> piece_us = controller::MeasureFillPiece(*job_);
  if (!piece_us.ok()) return piece_us.status();
  piece_us_ = *piece_us;
  const controller::FillCalibration calibration{.costs = calibration_->CalibratedCosts(),
                                                .update_us = calibration_->UpdateUs(),
                                                .piece_us = piece_us_};
  absl::StatusOr<controller::FillPlan> plan =
      controller::PlanFill(main_->schedule(), main_->compiled(), *job_, calibration);
  if (!plan.ok()) return plan.status();
  plan_ = *std::move(plan);
  if (absl::Status status = main_->StartFill(job_, plan_.slots); !status.ok()) return status;
  const auto actors = static_cast<size_t>(main_->compiled().num_actors);
  for (const controller::FillSlot& slot : plan_.slots) {
    actor_of_slot_.insert(actor_of_slot_.end(), slot.pieces, slot.actor);
  }
  reference_state_.assign(verify_ ? actors : 0, job_->state);
  losses_.assign(actors, {});
  started_ = true;
  return absl::OkStatus();
}

absl::Status FillRun::Verify(const controller::StepReport& report) {
  // Slots are numbered in each actor's program order, so this replays every
  // actor's pieces in the order they ran.
  for (const auto& [slot, output] : report.fill_outputs) {
    const int64_t item = report.fill_items.at(slot);
    if (item < 0) continue;  // ran on zeros, nothing to check
    const int32_t actor = actor_of_slot_.at(slot);
    absl::StatusOr<ir::HostTensor> expected =
        controller::RunFillPiece(*job_, reference_state_[actor], job_->input(item));
    if (!expected.ok()) return expected.status();
    if (!expected->BitwiseEquals(output)) {
      return absl::InternalError(absl::StrCat("--verify failed: fill item ", item, " of ", job_->name, " on actor ",
                                              actor, " differs from the fill job's reference"));
    }
    ++verified_;
  }
  return absl::OkStatus();
}

absl::Status FillRun::Report(std::ostream& out) {
  out << absl::StrFormat("fill %s (%s): %d pieces per step in %d bubble slots (a piece %.0f us, predicted step %.2f ms)\n",
                         job_->name, example_.description, plan_.total_pieces(), plan_.slots.size(), piece_us_,
                         plan_.predicted_step_us * 1e-3);
  if (!started_) {
    out << absl::StrFormat("fill: never started (it starts after %d calibration steps)\n", kCalibrationSteps);
    return absl::OkStatus();
  }
  for (const controller::FillSlot& slot : plan_.slots) {
    const std::vector<schedules::Slot>& program = main_->schedule().programs[slot.actor];
    out << absl::StrFormat("  actor %d before %s: %d pieces\n", slot.actor,
                           slot.before_slot < static_cast<int32_t>(program.size())
                               ? schedules::SlotName(program[slot.before_slot])
                               : std::string("the end"),
                           slot.pieces);
  }
  const auto steps = static_cast<double>(main_seconds_.size());
  if (steps == 0) return absl::OkStatus();
  out << absl::StrFormat("fill: %d pieces done in %d steps (%.1f per step, %.0f rows per step), %d gave way to the pipeline\n",
                         pieces_done_, main_seconds_.size(), static_cast<double>(pieces_done_) / steps,
                         static_cast<double>(pieces_done_ * example_.rows_per_item) / steps, pieces_skipped_);
  const double with = Median(main_seconds_);
  const double without = Median(baseline_seconds_);
  out << absl::StrFormat(
      "fill: main step %.2f ms with fill, %.2f ms without (medians over %d steps side by side): slowdown %+.1f%%\n",
      with * 1e3, without * 1e3, main_seconds_.size(), 100 * (with / without - 1));
  const double actors = static_cast<double>(main_->compiled().num_actors);
  const double main_wall = std::accumulate(main_seconds_.begin(), main_seconds_.end(), 0.0) * actors;
  const double baseline_wall = std::accumulate(baseline_seconds_.begin(), baseline_seconds_.end(), 0.0) * actors;
  out << absl::StrFormat("fill: utilisation (busy / wall) %.1f%% with fill (%.1f%% of it fill), %.1f%% without\n",
                         100 * (main_busy_s_ + main_fill_s_) / main_wall, 100 * main_fill_s_ / main_wall,
                         100 * baseline_busy_s_ / baseline_wall);
  for (size_t actor = 0; actor < losses_.size(); ++actor) {
    const std::vector<float>& losses = losses_[actor];
    if (losses.empty()) continue;
    // The mean of the first and of the last (up to) 16 updates' losses.
    const size_t window = std::min<size_t>(16, losses.size());
    const double first = std::accumulate(losses.begin(), losses.begin() + window, 0.0) / window;
    const double last = std::accumulate(losses.end() - window, losses.end(), 0.0) / window;
    out << absl::StrFormat("fill: actor %d trained %d updates, loss %.4f -> %.4f (means of the first and last %d)\n",
                           actor, losses.size(), first, last, window);
  }
  if (!verify_) return absl::OkStatus();
  out << absl::StrFormat("verify: %d fill outputs bit-identical to the fill job's reference\n", verified_);
  if (!job_->trains()) return absl::OkStatus();
  absl::StatusOr<std::vector<ir::TensorMap>> states = main_->FillState();
  if (!states.ok()) return states.status();
  int64_t tensors = 0, holders = 0;
  for (size_t actor = 0; actor < states->size(); ++actor) {
    if ((*states)[actor].empty()) continue;
    ++holders;
    for (const auto& [name, expected] : reference_state_[actor]) {
      auto it = (*states)[actor].find(name);
      if (it == (*states)[actor].end() || !it->second.BitwiseEquals(expected)) {
        return absl::InternalError(absl::StrCat("--verify failed: the fill job's state '", name, "' on actor ", actor,
                                                " differs from the fill job's reference"));
      }
      ++tensors;
    }
  }
  out << absl::StrFormat(
      "verify: the fill job's final state, %d tensors on %d actors, bit-identical to its reference\n", tensors,
      holders);
  return absl::OkStatus();
}

}  // namespace tandem::cli

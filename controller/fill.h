// Fill jobs (PipeFill): a second, independent program that the pipeline's
// actors run in the bubbles of its schedule, never in the way of its own
// work.
//
// A fill job's work comes in items; a piece runs one item on one actor as
// one graph (FillJob::piece), which reads the job's state that the actor
// holds beside its own. An inference piece only reads it (the forward of
// another model). A training piece also writes it back: it is one
// optimizer update of another model on its item (ir/single_update.h), so
// every filling actor trains its own copy of that model, update after
// update in the order its pieces run (PipeFill's fill jobs are one-device
// jobs). Where the pieces go is fixed before a step
// runs (PlanFill): the simulator predicts every actor's bubbles under costs
// calibrated on the pipeline's measured steps (schedules/bubbles.h), and
// each bubble takes as many pieces as fit in its predicted length (less the
// update's time at the tail) and whose outputs fit in the bytes the actor
// has free there below its own static peak. AddFill splices the pieces into
// the compiled programs as kFill instructions (ir/actor_program.h) at the
// start of the task each bubble precedes: a piece runs only while the
// message that task waits for has not arrived, so the main job's
// instructions always take precedence; it releases all it held. The main
// job's buffers, instructions and results are untouched, so its losses and
// state stay bit-identical to a run without fill.
//
// FillQueue hands the job's items to each step's pieces and takes their
// outputs back; an item whose piece was skipped goes to the next step.
#ifndef TANDEM_CONTROLLER_FILL_H_
#define TANDEM_CONTROLLER_FILL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/compiler.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/train_step.h"
#include "schedules/bubbles.h"
#include "schedules/schedule.h"
#include "schedules/simulator.h"

namespace tandem::controller {

// The bindings of a fill job's state and inputs on the actors start with
// this; its pieces report their output under kFillResult.
inline constexpr char kFillPrefix[] = "fill/";
inline constexpr char kFillResult[] = "fill";

struct FillJob {
  std::string name;  // e.g. "infer:mlp", for reports
  // One piece. Its inputs named in `state` read the job's state on the
  // actor, the others are the item's data. Its first output is the piece's
  // result; an output named like a state entry is that entry's new value,
  // which the piece writes back.
  ir::Graph piece;
  ir::TensorMap state;  // the job's state as every filling actor starts it
  // The inputs of item `item` (0-based) by the graph's input names.
  std::function<ir::TensorMap(int64_t item)> input;
  int64_t items = 0;  // items in all; 0: as many as the steps take

  // Whether a piece writes state: a training job.
  bool trains() const;
};

// Checks the job's shape: a result first; state of the graph's type for
// every parameter, optimizer slot and step counter it reads; every state
// output also an input.
// InvalidArgument naming what is wrong.
absl::Status CheckFillJob(const FillJob& job);

// Runs one piece on the reference interpreter for `inputs` (the item's
// data): returns its result and, for a training job, writes the new state
// into `state`.
absl::StatusOr<ir::HostTensor> RunFillPiece(const FillJob& job, ir::TensorMap& state, const ir::TensorMap& inputs);

// `pieces` pieces on `actor` before the task that begins slot `before_slot`
// of its schedule program (the program's slot count: after its last
// instruction).
struct FillSlot {
  int32_t actor = 0;
  int32_t before_slot = 0;
  int64_t pieces = 0;
  friend bool operator==(const FillSlot&, const FillSlot&) = default;
};

// The pieces of `slots` in all.
int64_t TotalPieces(const std::vector<FillSlot>& slots);

// What PlanFill packs by: the pipeline's costs and the pieces'.
struct FillCalibration {
  // Calibrated on the pipeline's steps, in microseconds
  // (StepTrace::CalibratedCosts), and each actor's update (UpdateUs).
  schedules::CostModel costs;
  std::vector<double> update_us;
  double piece_us = 0.0;  // one piece's measured time (MeasureFillPiece)
  // The share of each predicted bubble pieces may take, in (0, 1].
  double share = 0.8;
};

// Where the pieces go, and what the packing saw.
struct FillPlan {
  std::vector<FillSlot> slots;  // non-empty ones, by actor then slot
  std::vector<schedules::BubbleSlot> bubbles;  // free: bytes below the actor's static peak
  std::vector<int64_t> pieces;                 // by bubble
  int64_t piece_bytes = 0;                     // a piece's outputs
  double predicted_step_us = 0.0;              // the simulated makespan
  int64_t total_pieces() const { return TotalPieces(slots); }
};

// Packs the job's pieces into the bubbles of `compiled` (built from
// `schedule`). InvalidArgument for a bad calibration or job;
// FailedPrecondition for data-parallel replicas (not supported yet).
absl::StatusOr<FillPlan> PlanFill(const schedules::Schedule& schedule, const CompiledStep& compiled,
                                  const FillJob& job, const FillCalibration& calibration);

// Adds the pieces of `slots` to `compiled`'s programs (compiled from
// `schedule`): the fill job's
// state as state buffers (kFillPrefix + name) on every actor with a
// piece, and per piece an input buffer for each data input (kFillPrefix +
// name, its fill slot as the microbatch: pieces are numbered in the order of
// `slots`), temporaries for its result and other outputs (its state outputs
// write the state buffers), and one kFill instruction guarded by the first
// receive of the task it precedes. Recomputes the static peaks,
// the stats and the hash. InvalidArgument for a slot out of range or one
// before a task without a receive (nothing to give precedence to).
absl::Status AddFill(const schedules::Schedule& schedule, const FillJob& job, const std::vector<FillSlot>& slots,
                     CompiledStep& compiled);

// The median time of one piece (item 0, on a copy of the job's state) on
// this process's reference kernels, over `runs` runs after a warm-up, in
// microseconds.
absl::StatusOr<double> MeasureFillPiece(const FillJob& job, int32_t runs = 5);

// The job's items as the steps take them. Not thread-safe.
class FillQueue {
 public:
  explicit FillQueue(const FillJob* job) : job_(job) {}

  // The items for a step with `pieces` fill slots: retried ones first, then
  // new ones; fewer when the job runs out. items()[slot] is what slot `slot`
  // runs.
  std::vector<int64_t> Take(int64_t pieces);
  // The step's inputs for `items` (from Take), by fill slot.
  std::vector<ir::TensorMap> Inputs(const std::vector<int64_t>& items) const;
  // Takes back a step's outputs by fill slot: items without an output go
  // back to the front of the queue. Returns the items done, with outputs.
  std::map<int64_t, ir::HostTensor> Finish(const std::vector<int64_t>& items,
                                           const std::map<int32_t, ir::HostTensor>& outputs);

  int64_t done() const { return done_; }
  int64_t skipped() const { return skipped_; }
  bool finished() const { return job_->items > 0 && done_ >= job_->items; }

 private:
  const FillJob* job_;
  std::deque<int64_t> retry_;
  int64_t next_ = 0;
  int64_t done_ = 0;
  int64_t skipped_ = 0;  // pieces that gave way to the pipeline
};

}  // namespace tandem::controller

#endif  // TANDEM_CONTROLLER_FILL_H_

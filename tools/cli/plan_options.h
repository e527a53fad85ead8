// Planning the example models and running plans (`tandem plan` writes
// them, schedules/plan_file.h): --plan FILE on `tandem train` sets the schedule, the actors,
// the stages and which layers each holds, the microbatches and their size,
// and each stage's rematerialisation. The same mapping lets `tandem plan`
// compile its candidates.
#ifndef TANDEM_TOOLS_CLI_PLAN_OPTIONS_H_
#define TANDEM_TOOLS_CLI_PLAN_OPTIONS_H_

#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "examples/example_job.h"
#include "schedules/plan_file.h"
#include "schedules/planner.h"
#include "tools/cli/pipeline_options.h"

namespace tandem::cli {

// The plan in `path`; the file's size is bounded before it is read.
absl::StatusOr<schedules::Plan> ReadPlan(const std::string& path);
// The cost file in `path` (`tandem profile --out`), read the same way.
absl::StatusOr<schedules::CostFile> ReadCostFile(const std::string& path);

// Sets `model` and `schedule` as `plan` says. The plan's segments are the
// example model's layers cut evenly (what `tandem profile` measured: with
// --cut-every-layer one layer each), so the model needs at least as many
// layers as the plan has segments; --layers defaults to that count. A
// two-tower's segments are its layers one for one (the left tower's, the
// right's, the head's), so it needs exactly as many; a plan whose stages
// give the towers stages of their own runs them as branches.
// InvalidArgument when an option `command` was given conflicts with the
// plan (naming it), or the layers do not fit.
absl::Status ApplyPlan(const CLI::App& command, const schedules::Plan& plan, examples::ExampleJobOptions& model,
                       ScheduleOptions& schedule);
// The same without the check of the command's options.
absl::Status ApplyPlan(const schedules::Plan& plan, examples::ExampleJobOptions& model, ScheduleOptions& schedule);

// Makes every layer of the example model a stage of its own (--layers
// defaults to 4 for gpt and mlp): what `tandem profile --cut-every-layer`
// and the planner measure. InvalidArgument for more layers than a cost file
// holds.
absl::Status CutEveryLayer(examples::ExampleJobOptions& model);

// Every layer of the example model one segment (a two-tower's branches
// give the cost files their segment graph), measured on one actor (two
// microbatches a step, `steps` steps after a warm-up) at each microbatch
// size in `sizes`; a line saying so goes to `out` first.
absl::StatusOr<std::vector<schedules::CostFile>> ProfileModelSegments(examples::ExampleJobOptions model,
                                                                      const std::vector<int64_t>& sizes,
                                                                      int64_t steps, std::ostream& out);

// The planner's exact peaks for the example model: each candidate traced as
// it cuts the model (ApplyPlan) and compiled for its schedule.
schedules::CompiledPeaks CompiledPeaksOf(const examples::ExampleJobOptions& model, const schedules::CostFile& costs,
                                         const schedules::PlannerOptions& planner);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_PLAN_OPTIONS_H_

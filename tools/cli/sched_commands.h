// The pieces of `tandem sched` shared between its source files.
//
// AddSchedCommand (tools/cli/sched_command.cc) declares `sched` with gen,
// check and convert; `sim` and `draw` come from
// tools/cli/sched_sim_draw_command.cc. LoadSchedule() serves them all.
#ifndef TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_
#define TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_

#include <iosfwd>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "schedules/schedule.h"
#include "tools/cli/command_line.h"

namespace tandem::cli {

// `tandem sched sim FILE [--cost ...] [--link ...] [--json] [--from ...]`,
// a subcommand of `sched`.
void AddSchedSimCommand(CommandLine& command_line, CLI::App& sched);
// `tandem sched draw FILE --format ascii|svg|perfetto [-o OUT] [--from ...]`.
void AddSchedDrawCommand(CommandLine& command_line, CLI::App& sched);

// Reads and parses the schedule at `path`; "-" reads `stdin_stream` instead.
// The format is `from` ("tandem" or "pytorch-csv") when given, otherwise
// PyTorch's CSV for paths ending in ".csv" and Tandem's text format for
// everything else and for stdin. The schedule is parsed but NOT validated:
// call schedules::Validate() on it. Errors are InvalidArgument (an unknown
// `from`, a parse error carrying `path:line:col: error: ...`) or NotFound
// (an unreadable file), with messages that start with the path.
absl::StatusOr<schedules::Schedule> LoadSchedule(const std::string& path, const std::optional<std::string>& from,
                                                 std::istream& stdin_stream);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_

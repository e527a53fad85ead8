// The pieces of `tandem sched` shared between its source files.
//
// RunSchedCommand (tools/cli/sched_command.cc) parses the subcommand name and
// handles gen, check and convert itself; it dispatches `sim` and `draw` to
// the functions below (tools/cli/sched_plan_command.cc), passing the
// arguments after the subcommand name. All functions are stateless and may be
// called from any thread as long as the streams are not shared.
#ifndef TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_
#define TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_

#include <iosfwd>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "schedules/schedule.h"
#include "tools/cli/commands.h"

namespace tandem::cli {

// RunSchedCommand (commands.h) reading `-` from `in` instead of std::cin,
// for tests. sim and draw still read std::cin.
int RunSchedCommandWithStdin(const CommandArgs& args, std::ostream& out, std::ostream& err,
                             std::istream& in);

// `tandem sched sim FILE [--cost ...] [--link ...] [--json] [--from ...]`.
// Returns the exit code (0 ok, 1 rejected input, 2 usage error).
int RunSchedSimCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);
// `tandem sched draw FILE --format ascii|svg|perfetto [-o OUT] [--from ...]`.
int RunSchedDrawCommand(const CommandArgs& args, std::ostream& out, std::ostream& err);

// Reads and parses the schedule at `path`; "-" reads `stdin_stream` instead.
// The format is `from` ("tandem" or "pytorch-csv") when given, otherwise
// PyTorch's CSV for paths ending in ".csv" and Tandem's text format for
// everything else and for stdin. The schedule is parsed but NOT validated:
// call schedules::Validate() on it. Errors are InvalidArgument (an unknown
// `from`, a parse error carrying `path:line:col: error: ...`) or NotFound
// (an unreadable file), with messages that start with the path.
absl::StatusOr<schedules::Schedule> LoadSchedule(const std::string& path,
                                                 const std::optional<std::string>& from,
                                                 std::istream& stdin_stream);

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_SCHED_COMMANDS_H_

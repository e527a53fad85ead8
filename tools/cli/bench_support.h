// What the benchmarks that compare with PyTorch share: wall-clock timing,
// the median, and running a PyTorch script of tools/bench/ in a child
// process (the Python environment tools/setup.sh makes, build/venv) that
// answers with one JSON line.
#ifndef TANDEM_TOOLS_CLI_BENCH_SUPPORT_H_
#define TANDEM_TOOLS_CLI_BENCH_SUPPORT_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "ir/statistics.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {

using Clock = std::chrono::steady_clock;

double MillisecondsSince(Clock::time_point start);

using ir::Median;  // ir/statistics.h

// What a PyTorch script reported.
struct TorchResult {
  std::optional<double> ms;  // its "torch_ms"; unset when torch could not run
  std::string blas;          // "openblas", "reference", ...
  nlohmann::ordered_json blas_libraries = nlohmann::ordered_json::array();
  std::string version;
  std::string error;  // why `ms` is unset
};

// What a script of tools/bench/ answered: the last JSON object it printed
// (empty when none), and why it failed when it did (its "error", or its
// last line, or its exit status).
struct ScriptReply {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  std::string error;  // empty: it succeeded
};

// Runs `python script args...` (args already quoted for the shell). A
// `python` path that does not exist is an error naming the command that
// makes the environment.
ScriptReply RunPythonScript(const std::string& python, const std::string& script, const std::string& args);

// RunPythonScript for a script answering with "torch_ms".
// A `python` path that does not exist is an error naming the command that
// makes the environment.
TorchResult RunTorchScript(const std::string& python, const std::string& script, const std::string& args);

// The Python the benchmarks run their scripts with unless told another
// (--python): the environment of the tests (TANDEM_PYTHON, build/venv).
std::string DefaultPython();

// The directory of the PyTorch scripts: share/tandem/bench/ beside the
// running binary's bin/ in a bundle (tools/bundle.sh), else tools/bench/ of
// the source tree.
std::string TorchScriptDirectory();

}  // namespace tandem::cli

#endif  // TANDEM_TOOLS_CLI_BENCH_SUPPORT_H_

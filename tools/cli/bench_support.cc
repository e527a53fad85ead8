#include "tools/cli/bench_support.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

#ifndef TANDEM_SOURCE_DIR
#define TANDEM_SOURCE_DIR "."
#endif

namespace tandem::cli {
namespace {

std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

}  // namespace

double MillisecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string TorchScriptDirectory() {
  // A bundle (tools/bundle.sh) carries the scripts beside its bin/.
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path bundled = self.parent_path().parent_path() / "share" / "tandem" / "bench";
    if (std::filesystem::is_directory(bundled, error)) return bundled.string();
  }
  return absl::StrCat(TANDEM_SOURCE_DIR, "/tools/bench");
}

std::string DefaultPython() { return TANDEM_PYTHON; }

ScriptReply RunPythonScript(const std::string& python, const std::string& script, const std::string& args) {
  ScriptReply reply;
  std::error_code missing;
  if (python.find('/') != std::string::npos && !std::filesystem::exists(python, missing)) {
    reply.error = absl::StrCat("no Python at ", python,
                               ": make the environment with tools/setup.sh (tools/python/make_venv.sh build/venv), "
                               "or pass --python");
    return reply;
  }
  const std::string command = absl::StrCat(ShellQuote(python), " ", ShellQuote(script), " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    reply.error = absl::StrCat("cannot start ", python);
    return reply;
  }
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t got = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), got);
  const int status = pclose(pipe);
  // The JSON is the last line that opens an object; anything else is noise
  // or an error message.
  std::string json_line;
  std::string last_line;
  for (size_t start = 0; start < output.size();) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(start, end - start);
    if (!line.empty() && line[0] == '{') json_line = line;
    if (!line.empty()) last_line = line;
    start = end + 1;
  }
  reply.json = nlohmann::ordered_json::parse(json_line, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (!reply.json.is_object()) reply.json = nlohmann::ordered_json::object();
  if (status != 0 || reply.json.contains("error")) {
    const auto error = reply.json.find("error");
    reply.error = error != reply.json.end() && error->is_string()
                      ? error->get<std::string>()
                      : (last_line.empty() ? absl::StrCat(python, " exited with status ", status) : last_line);
  }
  return reply;
}

TorchResult RunTorchScript(const std::string& python, const std::string& script, const std::string& args) {
  TorchResult result;
  const ScriptReply reply = RunPythonScript(python, script, args);
  using Json = nlohmann::ordered_json;
  const Json& json = reply.json;
  // A member of the script's reply; null when there is none.
  const auto member = [&](const char* key) { return json.contains(key) ? json[key] : Json(); };
  const auto text = [&](const char* key, const std::string& otherwise) {
    const Json value = member(key);
    return value.is_string() ? value.get<std::string>() : otherwise;
  };
  const Json ms = member("torch_ms");
  if (!reply.error.empty() || !ms.is_number()) {
    result.error = reply.error.empty() ? "the script reported no torch_ms" : reply.error;
    return result;
  }
  result.ms = ms.get<double>();
  result.blas = text("blas", "unknown");
  if (const Json libraries = member("blas_libraries"); libraries.is_array()) result.blas_libraries = libraries;
  result.version = text("torch_version", "?");
  return result;
}

}  // namespace tandem::cli

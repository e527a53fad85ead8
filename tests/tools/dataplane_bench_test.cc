// `tandem bench dataplane --device`: device tensors between two processes
// over the CUDA IPC data plane, next to a device-to-device copy, measured on
// the emulated device here (on a GPU by tools/gpu_check.sh); a malformed or
// absent device is an error saying why.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/cli_process.h"

namespace tandem::cli {
namespace {

using ::testing::HasSubstr;

CliRun Bench(const std::vector<std::string>& args) {
  std::vector<std::string> command = {"bench", "dataplane"};
  command.insert(command.end(), args.begin(), args.end());
  return RunCli(command);
}

TEST(DataplaneBench, DeviceTensorsCrossBetweenTwoProcessesOnTheEmulatedDevice) {
  CliRun run = Bench({"--device", "fake-cuda", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << run.out;
  EXPECT_EQ(json["device"], "fake-cuda");
  EXPECT_EQ(json["goal_ipc_over_copy_at_16MiB"], 0.8);
  ASSERT_EQ(json["rows"].size(), 4u) << run.out;
  int64_t previous = 0;
  for (const nlohmann::json& row : json["rows"]) {
    EXPECT_GT(row["bytes"].get<int64_t>(), previous);
    previous = row["bytes"].get<int64_t>();
    EXPECT_GT(row["device_copy"].get<double>(), 0.0) << row;
    EXPECT_GT(row["ipc"].get<double>(), 0.0) << row;
    EXPECT_DOUBLE_EQ(row["ipc_over_copy"].get<double>(), row["ipc"].get<double>() / row["device_copy"].get<double>());
  }
}

TEST(DataplaneBench, AMalformedDeviceIsAUsageError) {
  CliRun run = Bench({"--device", "tpu"});
  EXPECT_EQ(run.code, 2);
  EXPECT_THAT(run.err, HasSubstr("tandem bench dataplane: --device: unknown device 'tpu'"));
}

TEST(DataplaneBench, AHostDeviceHasTheHostTable) {
  CliRun run = Bench({"--device", "cpu", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << run.out;
  EXPECT_EQ(json["goal_shm_over_memcpy_at_16MiB"], 0.6);
}

}  // namespace
}  // namespace tandem::cli

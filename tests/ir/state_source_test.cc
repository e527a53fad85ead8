// State sources: what an actor makes its state from gives the bits the
// reference's state has, whatever the origin.
#include "ir/state_source.h"

#include <unistd.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/initial_state.h"
#include "ir/state_file.h"

namespace tandem::ir {
namespace {

using ::testing::HasSubstr;

TrainStep TwoTensorStep() {
  TrainStep step;
  step.state.push_back({.name = "w", .type = {DType::kF32, {64, 32}},
                        .init = {Initializer::Kind::kNormal, 0.0, 0.02, 11}});
  step.state.push_back({.name = "b", .type = {DType::kF32, {32}}, .init = {Initializer::Kind::kZeros}});
  return step;
}

TEST(StateSource, SeedsFileSlicesAndHeldTensorsGiveTheInitialStatesBits) {
  const TrainStep step = TwoTensorStep();
  absl::StatusOr<TensorMap> expected = InitialState(step);
  ASSERT_TRUE(expected.ok());

  absl::StatusOr<TensorMap> seeded = MaterializeStates(SeedSources(step));
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  absl::StatusOr<TensorMap> held = MaterializeStates(TensorSources(*expected));
  ASSERT_TRUE(held.ok()) << held.status();

  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tandem_state_source_test." + std::to_string(getpid()));
  ASSERT_TRUE(WriteStateFile(path.string(), *expected).ok());
  absl::StatusOr<std::vector<StateFileEntry>> index = IndexStateFile(path.string());
  ASSERT_TRUE(index.ok());
  StateSources from_file;
  for (const StateFileEntry& entry : *index) from_file[entry.name] = {entry.type, StateFileSlice{path, entry.offset}};
  absl::StatusOr<TensorMap> read = MaterializeStates(from_file);
  std::filesystem::remove(path);
  ASSERT_TRUE(read.ok()) << read.status();

  for (const TensorMap* got : {&*seeded, &*held, &*read}) {
    ASSERT_EQ(got->size(), expected->size());
    for (const auto& [name, tensor] : *expected) EXPECT_TRUE(got->at(name).BitwiseEquals(tensor)) << name;
  }
}

TEST(StateSource, AHeldTensorOfAnotherTypeOrAMissingFileIsAnErrorNamingTheState) {
  StateSource wrong{{DType::kF32, {3}}, HostTensor::FromFloats({2}, {1, 2})};
  absl::StatusOr<HostTensor> tensor = MaterializeState("w", wrong);
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr("state 'w': is f32[2], its source says f32[3]"));
  StateSource absent{{DType::kF32, {3}}, StateFileSlice{"/nonexistent/actor-0.state", 0}};
  tensor = MaterializeState("b", absent);
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tensor.status().message(), HasSubstr("state 'b': /nonexistent/actor-0.state does not exist"));
}

}  // namespace
}  // namespace tandem::ir

// examples/hugging_face.h: Hugging Face's names, a written directory read
// back (whole and in shards), its config giving the model's shape, and
// what cannot be represented refused naming the field. (transformers
// itself loads these directories in tests/tools/hugging_face_round_trip_test.py.)
#include "examples/hugging_face.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/safetensors.h"
#include "ir/state_source.h"

namespace tandem::examples {
namespace {

using ::testing::HasSubstr;

class HuggingFaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/hugging_face_test_XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteConfig(const std::string& json) {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/config.json") << json;
  }

  // A small gpt or llama job, one stage, on the default corpus.
  static ExampleJob Job(const std::string& model, bool tied) {
    ExampleJobOptions options;
    options.model = model;
    options.layers = 2;
    options.dim = 32;
    options.heads = 4;
    options.seq = 16;
    options.microbatches = 1;
    options.tied = tied;
    absl::StatusOr<ExampleJob> job = MakeExampleJob(options);
    EXPECT_TRUE(job.ok()) << job.status();
    return *std::move(job);
  }

  // The job's parameters, from their initializers.
  static std::vector<std::pair<std::string, ir::StateSource>> Parameters(const ExampleJob& job) {
    const ir::StateSources seeds = ir::SeedSources(job.step);
    std::vector<std::pair<std::string, ir::StateSource>> parameters;
    for (const ir::StateSpec& spec : job.step.state) {
      if (spec.role == ir::StateRole::kParameter) parameters.emplace_back(spec.name, seeds.at(spec.name));
    }
    return parameters;
  }

  std::string dir_;
};

TEST_F(HuggingFaceTest, GptParametersTakeGpt2NamesAndLlamaKeepsItsOwn) {
  EXPECT_EQ(*HuggingFaceName("gpt", "wte"), "transformer.wte.weight");
  EXPECT_EQ(*HuggingFaceName("gpt", "head.w"), "lm_head.weight");
  EXPECT_EQ(*HuggingFaceName("gpt", "h11.attn.qkv.w"), "transformer.h.11.attn.c_attn.weight");
  EXPECT_EQ(*HuggingFaceName("gpt", "h0.mlp.proj.b"), "transformer.h.0.mlp.c_proj.bias");
  EXPECT_EQ(*HuggingFaceName("gpt", "lnf.g"), "transformer.ln_f.weight");
  EXPECT_EQ(*HuggingFaceName("llama", "model.layers.0.self_attn.q_proj.weight"),
            "model.layers.0.self_attn.q_proj.weight");
  EXPECT_THAT(HuggingFaceName("gpt", "h1.attn.bogus").status().message(), HasSubstr("h1.attn.bogus"));
  EXPECT_FALSE(HuggingFaceName("gpt", "hx.ln1.g").ok());
  EXPECT_FALSE(HuggingFaceName("mlp", "w0").ok());
}

TEST_F(HuggingFaceTest, AWrittenDirectoryReadsBackWholeAndInShardsWithItsShape) {
  for (const std::string model : {"gpt", "llama"}) {
    for (const int64_t shard_bytes : {kDefaultShardBytes, int64_t{20'000}}) {
      SCOPED_TRACE(absl::StrCat(model, ", shards of ", shard_bytes));
      const ExampleJob job = Job(model, /*tied=*/model == "llama");
      ExampleJobOptions options;
      options.model = model;
      HuggingFaceExport how;
      how.max_shard_bytes = shard_bytes;
      ASSERT_TRUE(WriteHuggingFaceModel(dir_, job, options, Parameters(job), how).ok());
      const bool sharded = shard_bytes < kDefaultShardBytes;
      EXPECT_EQ(std::filesystem::exists(dir_ + "/model.safetensors.index.json"), sharded);
      EXPECT_EQ(std::filesystem::exists(dir_ + "/model.safetensors"), !sharded);
      int shards = 0;
      for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
        shards += entry.path().filename().string().starts_with("model-");
      }
      if (sharded) {
        EXPECT_GT(shards, 1);
        EXPECT_TRUE(std::filesystem::exists(dir_ + absl::StrFormat("/model-00001-of-%05d.safetensors", shards)));
      } else {
        EXPECT_EQ(shards, 0);  // the earlier export's shards are gone
      }

      // The config gives the shape back: no flag needed.
      ExampleJobOptions read;
      read.microbatches = 1;
      ASSERT_TRUE(TakeHuggingFaceConfig(dir_, read).ok());
      EXPECT_EQ(read.model, model);
      EXPECT_EQ(read.layers, 2);
      EXPECT_EQ(read.dim, 32);
      EXPECT_EQ(read.heads, 4);
      EXPECT_EQ(read.seq, 16);
      EXPECT_EQ(read.tied, model == "llama");
      absl::StatusOr<ExampleJob> again = MakeExampleJob(read);
      ASSERT_TRUE(again.ok()) << again.status();

      // Every parameter reads back to the bits written.
      absl::StatusOr<ir::StateSources> sources = HuggingFaceParameterSources(dir_, model, again->step);
      ASSERT_TRUE(sources.ok()) << sources.status();
      for (const auto& [name, written] : Parameters(job)) {
        absl::StatusOr<ir::HostTensor> expected = ir::MaterializeState(name, written);
        absl::StatusOr<ir::HostTensor> actual = ir::MaterializeState(name, sources->at(name));
        ASSERT_TRUE(expected.ok() && actual.ok()) << name;
        EXPECT_TRUE(std::holds_alternative<ir::StateFileSlice>(sources->at(name).origin)) << name;
        ASSERT_EQ(actual->num_bytes(), expected->num_bytes()) << name;
        EXPECT_EQ(std::memcmp(actual->data(), expected->data(), actual->num_bytes()), 0) << name;
      }
    }
  }
}

TEST_F(HuggingFaceTest, WhatTandemCannotRepresentIsRefusedNamingTheField) {
  struct Case {
    std::string config, field;
  };
  const Case cases[] = {
      {R"({"model_type": "mistral"})", "model_type"},
      {R"({"model_type": "llama", "attention_bias": true})", "attention_bias"},
      {R"({"model_type": "llama", "mlp_bias": true})", "mlp_bias"},
      {R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})", "rope_scaling"},
      {R"({"model_type": "llama", "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}})", "rope_type"},
      {R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 8})", "head_dim"},
      {R"({"model_type": "llama", "hidden_act": "gelu"})", "hidden_act"},
      {R"({"model_type": "gpt2", "activation_function": "relu"})", "activation_function"},
      {R"({"model_type": "gpt2", "layer_norm_epsilon": 1e-6})", "layer_norm_epsilon"},
      {R"({"model_type": "gpt2", "n_embd": 64, "n_inner": 100})", "n_inner"},
      {R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})", "scale_attn_by_inverse_layer_idx"},
      {R"({"model_type": "gpt2", "add_cross_attention": true})", "add_cross_attention"},
      {R"({"model_type": "gpt2", "n_layer": "twelve"})", "n_layer"},
      {R"({"model_type": "gpt2", "n_head": 0})", "n_head"},
      {R"([1, 2])", "not a JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config);
    WriteConfig(c.config);
    ExampleJobOptions options;
    absl::Status status = TakeHuggingFaceConfig(dir_, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
}

TEST_F(HuggingFaceTest, AFlagTheConfigContradictsIsRefusedAndOneItAllowsIsKept) {
  WriteConfig(R"({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
                  "max_position_embeddings": 64, "vocab_size": 300})");
  ExampleJobOptions options;
  options.dim = 64;
  absl::Status status = TakeHuggingFaceConfig(dir_, options);
  EXPECT_THAT(status.message(), HasSubstr("--dim 64 differs"));
  EXPECT_THAT(status.message(), HasSubstr("hidden_size 32"));

  // A llama's rotary positions allow a shorter sequence, not a longer one.
  options = {};
  options.seq = 16;
  ASSERT_TRUE(TakeHuggingFaceConfig(dir_, options).ok());
  EXPECT_EQ(options.seq, 16);
  EXPECT_EQ(options.kv_heads, 4);  // transformers' default: every head its own
  EXPECT_EQ(options.norm_eps, 1e-6);
  options = {};
  options.seq = 128;
  EXPECT_THAT(TakeHuggingFaceConfig(dir_, options).message(), HasSubstr("max_position_embeddings 64"));

  // A gpt's position table is its sequence.
  WriteConfig(R"({"model_type": "gpt2", "n_positions": 64})");
  options = {};
  options.seq = 16;
  EXPECT_THAT(TakeHuggingFaceConfig(dir_, options).message(), HasSubstr("n_positions 64"));
  options = {};
  options.preset = "gpt2-small";
  EXPECT_THAT(TakeHuggingFaceConfig(dir_, options).message(), HasSubstr("--preset"));
}

TEST_F(HuggingFaceTest, AMissingOrForeignTensorIsNamedWithItsFile) {
  const ExampleJob job = Job("gpt", /*tied=*/false);
  ExampleJobOptions options;
  options.model = "gpt";
  ASSERT_TRUE(WriteHuggingFaceModel(dir_, job, options, Parameters(job), {}).ok());
  // The same file read as a tied model: lm_head.weight is a tied copy, skipped.
  const ExampleJob tied = Job("gpt", /*tied=*/true);
  EXPECT_TRUE(HuggingFaceParameterSources(dir_, "gpt", tied.step).ok());
  // Without wpe, and with a tensor no gpt has.
  std::vector<std::pair<std::string, ir::StateSource>> tensors;
  for (const auto& [name, source] : Parameters(job)) {
    if (name == "wpe") continue;
    tensors.emplace_back(*HuggingFaceName("gpt", name), source);
  }
  ASSERT_TRUE(ir::WriteSafetensors(dir_ + "/model.safetensors", tensors, {}).ok());
  EXPECT_THAT(HuggingFaceParameterSources(dir_, "gpt", job.step).status().message(),
              HasSubstr("transformer.wpe.weight"));
  const ir::StateSource wpe = ir::SeedSources(job.step).at("wpe");
  tensors.emplace_back("transformer.wpe.weight", wpe);
  tensors.emplace_back("transformer.h.0.attn.q_proj.weight", wpe);
  ASSERT_TRUE(ir::WriteSafetensors(dir_ + "/model.safetensors", tensors, {}).ok());
  EXPECT_THAT(HuggingFaceParameterSources(dir_, "gpt", job.step).status().message(),
              HasSubstr("transformer.h.0.attn.q_proj.weight"));
}

}  // namespace
}  // namespace tandem::examples

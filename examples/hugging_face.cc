#include "examples/hugging_face.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "examples/data/sentencepiece_model_check.h"
#include "ir/excerpt.h"
#include "ir/read_file.h"
#include "ir/safetensors.h"
#include "ir/state_file.h"
#include "nlohmann/json.hpp"

namespace tandem::examples {
namespace {

constexpr char kConfig[] = "config.json";
constexpr char kWeights[] = "model.safetensors";
constexpr char kWeightsIndex[] = "model.safetensors.index.json";
constexpr char kTokenizerModel[] = "tokenizer.model";

// gpt's parameters inside block h<k>, by Tandem's name after "h<k>.", and
// Hugging Face's after "transformer.h.<k>.".
struct NamePair {
  absl::string_view tandem, hugging_face;
};
constexpr NamePair kGptBlockNames[] = {
    {"ln1.g", "ln_1.weight"},           {"ln1.b", "ln_1.bias"},
    {"attn.qkv.w", "attn.c_attn.weight"}, {"attn.qkv.b", "attn.c_attn.bias"},
    {"attn.proj.w", "attn.c_proj.weight"}, {"attn.proj.b", "attn.c_proj.bias"},
    {"ln2.g", "ln_2.weight"},           {"ln2.b", "ln_2.bias"},
    {"mlp.fc.w", "mlp.c_fc.weight"},    {"mlp.fc.b", "mlp.c_fc.bias"},
    {"mlp.proj.w", "mlp.c_proj.weight"}, {"mlp.proj.b", "mlp.c_proj.bias"},
};
constexpr NamePair kGptOuterNames[] = {
    {"wte", "transformer.wte.weight"},    {"wpe", "transformer.wpe.weight"}, {"lnf.g", "transformer.ln_f.weight"},
    {"lnf.b", "transformer.ln_f.bias"}, {"head.w", "lm_head.weight"},
};

// The base model's prefix of a transformers checkpoint's names.
absl::string_view BasePrefix(absl::string_view model) { return model == "gpt" ? "transformer." : "model."; }

// Reads a config's fields, each with transformers' default when absent;
// the first problem is kept, naming the field and the file.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& json, std::string path) : json_(json), path_(std::move(path)) {}

  int64_t Int(const char* field, int64_t fallback) {
    const nlohmann::json* value = Find(field);
    if (value == nullptr) return fallback;
    if (!value->is_number_integer()) return Wrong(field, "an integer", fallback);
    return value->get<int64_t>();
  }
  double Number(const char* field, double fallback) {
    const nlohmann::json* value = Find(field);
    if (value == nullptr) return fallback;
    if (!value->is_number()) return Wrong(field, "a number", fallback);
    return value->get<double>();
  }
  bool Bool(const char* field, bool fallback) {
    const nlohmann::json* value = Find(field);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) return Wrong(field, "true or false", fallback);
    return value->get<bool>();
  }
  std::string String(const char* field, const std::string& fallback) {
    const nlohmann::json* value = Find(field);
    if (value == nullptr) return fallback;
    if (!value->is_string()) return Wrong(field, "a string", fallback);
    return value->get<std::string>();
  }
  // The field, or null when absent or null.
  const nlohmann::json* Find(const char* field) const {
    auto found = json_.find(field);
    return found == json_.end() || found->is_null() ? nullptr : &*found;
  }
  // Records that `field` holds what Tandem's model cannot represent.
  void Refuse(const char* field, absl::string_view why) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, " ", why));
    }
  }
  void Fail(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
  }
  const absl::Status& status() const { return status_; }
  const std::string& path() const { return path_; }

 private:
  template <typename T>
  T Wrong(const char* field, absl::string_view expected, T fallback) {
    Refuse(field, absl::StrCat("is ", ir::Excerpt(Find(field)->dump()), ", not ", expected));
    return fallback;
  }

  const nlohmann::json& json_;
  std::string path_;
  absl::Status status_;
};

// Sets a size option from the config's `field`; a flag that already set
// it otherwise is refused.
void TakeSize(ConfigFields& config, const char* field, int64_t value, const char* flag, std::optional<int64_t>& option) {
  if (value < 1) {
    config.Refuse(field, absl::StrCat("is ", value, ", not a size"));
    return;
  }
  if (option.has_value() && *option != value) {
    config.Fail(absl::InvalidArgumentError(absl::StrCat(flag, " ", *option, " differs from ", config.path(), "'s ",
                                                        field, " ", value, ": the weights have the config's shape")));
    return;
  }
  option = value;
}

// Ties the head as the config says; a --tied the config denies is refused.
void TakeTied(ConfigFields& config, bool tied, ExampleJobOptions& options) {
  if (tied) {
    options.tied = true;
  } else if (options.tied) {
    config.Fail(absl::InvalidArgumentError(
        absl::StrCat("--tied differs from ", config.path(), "'s tie_word_embeddings false")));
  }
}

void TakeGpt2Config(ConfigFields& config, ExampleJobOptions& options) {
  const int64_t dim = config.Int("n_embd", 768);
  TakeSize(config, "vocab_size", config.Int("vocab_size", 50257), "--vocab", options.vocab);
  TakeSize(config, "n_embd", dim, "--dim", options.dim);
  TakeSize(config, "n_layer", config.Int("n_layer", 12), "--layers", options.layers);
  TakeSize(config, "n_head", config.Int("n_head", 12), "--heads", options.heads);
  // The position table is as long as the sequence.
  const int64_t positions = config.Int("n_positions", 1024);
  if (options.seq.has_value() && *options.seq != positions) {
    config.Fail(absl::InvalidArgumentError(
        absl::StrCat("--seq ", *options.seq, " differs from ", config.path(), "'s n_positions ", positions,
                     ": a gpt's sequence is as long as its position table")));
  }
  TakeSize(config, "n_positions", positions, "--seq", options.seq);
  if (const nlohmann::json* inner = config.Find("n_inner");
      inner != nullptr && (!inner->is_number_integer() || inner->get<int64_t>() != 4 * dim)) {
    config.Refuse("n_inner", absl::StrCat("is ", ir::Excerpt(inner->dump()), ": Tandem's gpt has an MLP 4 x n_embd wide (",
                                          4 * dim, ")"));
  }
  // transformers' gelu_new and gelu_pytorch_tanh are both the tanh
  // approximation Tandem's gelu computes.
  if (const std::string act = config.String("activation_function", "gelu_new");
      act != "gelu_new" && act != "gelu_pytorch_tanh") {
    config.Refuse("activation_function", absl::StrCat("is ", act, ": Tandem's gpt uses GELU's tanh approximation "
                                                      "(gelu_new)"));
  }
  if (const double eps = config.Number("layer_norm_epsilon", 1e-5); eps != 1e-5) {
    config.Refuse("layer_norm_epsilon", absl::StrCat("is ", eps, ": Tandem's gpt normalises with 1e-5"));
  }
  if (!config.Bool("scale_attn_weights", true)) {
    config.Refuse("scale_attn_weights", "is false: Tandem's attention scales by 1/sqrt(head width)");
  }
  if (config.Bool("scale_attn_by_inverse_layer_idx", false)) {
    config.Refuse("scale_attn_by_inverse_layer_idx", "is true: Tandem's attention scales every layer alike");
  }
  if (config.Bool("add_cross_attention", false)) {
    config.Refuse("add_cross_attention", "is true: Tandem's gpt is a decoder alone");
  }
  options.model = "gpt";
  TakeTied(config, config.Bool("tie_word_embeddings", true), options);
}

void TakeLlamaConfig(ConfigFields& config, ExampleJobOptions& options) {
  const int64_t dim = config.Int("hidden_size", 4096);
  const int64_t heads = config.Int("num_attention_heads", 32);
  TakeSize(config, "vocab_size", config.Int("vocab_size", 32000), "--vocab", options.vocab);
  TakeSize(config, "hidden_size", dim, "--dim", options.dim);
  TakeSize(config, "num_hidden_layers", config.Int("num_hidden_layers", 32), "--layers", options.layers);
  TakeSize(config, "num_attention_heads", heads, "--heads", options.heads);
  TakeSize(config, "num_key_value_heads", config.Int("num_key_value_heads", heads), "--kv-heads", options.kv_heads);
  TakeSize(config, "intermediate_size", config.Int("intermediate_size", 11008), "--mlp-hidden", options.mlp_hidden);
  if (heads > 0 && dim % heads == 0) {
    if (const int64_t head_dim = config.Int("head_dim", dim / heads); head_dim != dim / heads) {
      config.Refuse("head_dim", absl::StrCat("is ", head_dim, ": Tandem's llama has heads of hidden_size / "
                                             "num_attention_heads (", dim / heads, ")"));
    }
  }
  // Positions are rotary: a run may use a shorter sequence than the model's.
  const int64_t positions = config.Int("max_position_embeddings", 2048);
  if (options.seq.has_value() && *options.seq > positions) {
    config.Fail(absl::InvalidArgumentError(absl::StrCat("--seq ", *options.seq, " is longer than ", config.path(),
                                                        "'s max_position_embeddings ", positions)));
  }
  if (!options.seq.has_value()) TakeSize(config, "max_position_embeddings", positions, "--seq", options.seq);
  if (const std::string act = config.String("hidden_act", "silu"); act != "silu") {
    config.Refuse("hidden_act", absl::StrCat("is ", act, ": Tandem's llama's MLP is SwiGLU (silu)"));
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (config.Bool(bias, false)) config.Refuse(bias, "is true: Tandem's llama has no biases");
  }
  if (config.Find("rope_scaling") != nullptr) {
    config.Refuse("rope_scaling", "is set: Tandem's llama's rotary embedding is unscaled");
  }
  if (config.Int("pretraining_tp", 1) != 1) config.Refuse("pretraining_tp", "is not 1");
  // transformers 5 writes rope_parameters, earlier versions rope_theta.
  double theta = config.Number("rope_theta", 10000.0);
  if (const nlohmann::json* rope = config.Find("rope_parameters"); rope != nullptr) {
    ConfigFields parameters(*rope, absl::StrCat(config.path(), ": rope_parameters"));
    if (const std::string type = parameters.String("rope_type", "default"); type != "default") {
      parameters.Refuse("rope_type", absl::StrCat("is ", type, ": Tandem's llama's rotary embedding is unscaled"));
    }
    theta = parameters.Number("rope_theta", theta);
    config.Fail(parameters.status());
  }
  options.rope_theta = theta;
  options.norm_eps = config.Number("rms_norm_eps", 1e-6);
  options.model = "llama";
  TakeTied(config, config.Bool("tie_word_embeddings", false), options);
}

absl::StatusOr<nlohmann::json> ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ir::ReadFileUpTo(path, kMaxHuggingFaceJsonBytes, path);
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  return json;
}

// transformers' config.json of `job`'s language model.
absl::StatusOr<nlohmann::ordered_json> ConfigOf(const ExampleJob& job) {
  if (job.gpt.has_value()) {
    const GptConfig& c = *job.gpt;
    if (c.mlp_ratio != 4) {
      return absl::UnimplementedError(absl::StrCat("a gpt with an MLP ", c.mlp_ratio, " x its width"));
    }
    return nlohmann::ordered_json{{"architectures", {"GPT2LMHeadModel"}},
                                  {"model_type", "gpt2"},
                                  {"vocab_size", c.vocab_size},
                                  {"n_positions", c.sequence_length},
                                  {"n_embd", c.model_dim},
                                  {"n_layer", c.num_layers},
                                  {"n_head", c.num_heads},
                                  {"n_inner", c.mlp_ratio * c.model_dim},
                                  {"activation_function", "gelu_new"},
                                  {"layer_norm_epsilon", 1e-5},
                                  // Tandem trains without dropout.
                                  {"resid_pdrop", 0.0},
                                  {"embd_pdrop", 0.0},
                                  {"attn_pdrop", 0.0},
                                  {"scale_attn_weights", true},
                                  {"scale_attn_by_inverse_layer_idx", false},
                                  {"reorder_and_upcast_attn", false},
                                  {"tie_word_embeddings", c.tied_head},
                                  {"initializer_range", c.init_std},
                                  {"dtype", "float32"},
                                  {"use_cache", true}};
  }
  if (job.llama.has_value()) {
    const LlamaConfig& c = *job.llama;
    return nlohmann::ordered_json{
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"vocab_size", c.vocab_size},
        {"hidden_size", c.model_dim},
        {"intermediate_size", LlamaMlpWidth(c)},
        {"num_hidden_layers", c.num_layers},
        {"num_attention_heads", c.num_heads},
        {"num_key_value_heads", c.num_kv_heads},
        {"head_dim", c.model_dim / c.num_heads},
        {"max_position_embeddings", c.sequence_length},
        {"rms_norm_eps", c.norm_eps},
        // transformers 5 reads rope_parameters, earlier versions rope_theta.
        {"rope_theta", c.rope_theta},
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"tie_word_embeddings", c.tied_head},
        {"initializer_range", c.init_std},
        {"dtype", "float32"},
        {"use_cache", true}};
  }
  return absl::UnimplementedError("--format hf writes the language models, gpt and llama");
}

// A shard's file name, transformers' way.
std::string ShardName(size_t k, size_t n) { return absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1, n); }

// Whether a tensor of a transformers checkpoint is a buffer or a copy that
// no parameter reads.
bool SkippedBuffer(absl::string_view model, absl::string_view name, bool tied) {
  if (tied && name == "lm_head.weight") return true;
  if (model == "gpt") return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias");
  return absl::EndsWith(name, ".rotary_emb.inv_freq");
}

// The safetensors files of the directory: model.safetensors, or the shards
// its index names (plain names inside `dir`).
absl::StatusOr<std::vector<std::string>> WeightFiles(const std::string& dir) {
  const std::string index = absl::StrCat(dir, "/", kWeightsIndex);
  if (!std::filesystem::exists(index)) return std::vector<std::string>{absl::StrCat(dir, "/", kWeights)};
  absl::StatusOr<nlohmann::json> json = ReadJson(index);
  if (!json.ok()) return json.status();
  auto map = json->find("weight_map");
  if (map == json->end() || !map->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index, " has no weight_map object"));
  }
  std::set<std::string> files;
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        file.get<std::string>().find('/') != std::string::npos || file.get<std::string>().starts_with(".")) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": tensor '", ir::Excerpt(tensor), "' is in ",
                                                     ir::Excerpt(file.dump()), ", not a file of the directory"));
    }
    files.insert(file.get<std::string>());
  }
  std::vector<std::string> paths;
  for (const std::string& file : files) paths.push_back(absl::StrCat(dir, "/", file));
  return paths;
}

}  // namespace

bool IsHuggingFaceDirectory(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error) &&
         std::filesystem::is_regular_file(absl::StrCat(path, "/", kConfig), error);
}

absl::Status TakeHuggingFaceConfig(const std::string& dir, ExampleJobOptions& options) {
  const std::string path = absl::StrCat(dir, "/", kConfig);
  absl::StatusOr<nlohmann::json> json = ReadJson(path);
  if (!json.ok()) return json.status();
  if (!options.preset.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--preset ", options.preset, " and ", path, " both give the model's shape: drop --preset"));
  }
  ConfigFields config(*json, path);
  const std::string type = config.String("model_type", "");
  if (type == "gpt2") {
    TakeGpt2Config(config, options);
  } else if (type == "llama") {
    TakeLlamaConfig(config, options);
  } else {
    config.Refuse("model_type", absl::StrCat("is '", ir::Excerpt(type),
                                             "': Tandem's language models are gpt2 (GPT2LMHeadModel) and llama "
                                             "(LlamaForCausalLM)"));
  }
  if (!config.status().ok()) return config.status();
  const std::string tokenizer = absl::StrCat(dir, "/", kTokenizerModel);
  if (!options.tokenizer.has_value() && std::filesystem::exists(tokenizer)) options.tokenizer = tokenizer;
  return absl::OkStatus();
}

absl::StatusOr<std::string> HuggingFaceName(absl::string_view model, const std::string& parameter) {
  if (model == "llama") return parameter;
  if (model != "gpt") {
    return absl::InvalidArgumentError(absl::StrCat("the ", model, " model has no Hugging Face counterpart"));
  }
  for (const NamePair& pair : kGptOuterNames) {
    if (parameter == pair.tandem) return std::string(pair.hugging_face);
  }
  // h<k>.<rest>
  const size_t dot = parameter.find('.');
  int64_t layer = 0;
  if (parameter.starts_with("h") && dot != std::string::npos &&
      absl::SimpleAtoi(absl::string_view(parameter).substr(1, dot - 1), &layer) && layer >= 0) {
    const absl::string_view rest = absl::string_view(parameter).substr(dot + 1);
    for (const NamePair& pair : kGptBlockNames) {
      if (rest == pair.tandem) return absl::StrCat("transformer.h.", layer, ".", pair.hugging_face);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("gpt has no parameter '", ir::Excerpt(parameter), "'"));
}

absl::StatusOr<ir::StateSources> HuggingFaceParameterSources(const std::string& dir, absl::string_view model,
                                                             const ir::TrainStep& step) {
  absl::StatusOr<std::vector<std::string>> files = WeightFiles(dir);
  if (!files.ok()) return files.status();
  // Every tensor of the files, under its name with the base prefix.
  struct Found {
    ir::StateSource source;
    std::string name, path;  // as the file has it
  };
  std::map<std::string, Found> tensors;
  const absl::string_view prefix = BasePrefix(model);
  for (const std::string& path : *files) {
    absl::StatusOr<std::vector<ir::SafetensorsEntry>> entries = ir::IndexSafetensors(path);
    if (!entries.ok()) return entries.status();
    for (ir::SafetensorsEntry& entry : *entries) {
      const std::string name = absl::StartsWith(entry.name, prefix) || absl::StartsWith(entry.name, "lm_head.")
                                   ? entry.name
                                   : absl::StrCat(prefix, entry.name);
      Found found{ir::StateSource{entry.type, ir::StateFileSlice{path, entry.offset}}, entry.name, path};
      if (!tensors.emplace(name, std::move(found)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, " holds '", ir::Excerpt(entry.name), "' twice (", path, ")"));
      }
    }
  }
  const bool tied = !step.FindState(model == "gpt" ? "head.w" : "lm_head.weight");
  ir::StateSources parameters;
  for (const ir::StateSpec& spec : step.state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    absl::StatusOr<std::string> name = HuggingFaceName(model, spec.name);
    if (!name.ok()) return name.status();
    auto found = tensors.find(*name);
    if (found == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, " has no tensor ", *name, " (", ir::TypeToString(spec.type),
                                                     "), which the model its config.json describes has"));
    }
    if (found->second.source.type != spec.type) {
      return absl::InvalidArgumentError(absl::StrCat(
          found->second.path, ": ", found->second.name, " is ", ir::TypeToString(found->second.source.type),
          ", the model has it ", ir::TypeToString(spec.type),
          found->second.source.type.dtype != spec.type.dtype ? " (Tandem's parameters are f32: save it in float32)"
                                                             : ""));
    }
    parameters[spec.name] = found->second.source;
    tensors.erase(found);
  }
  for (const auto& [name, found] : tensors) {
    if (!SkippedBuffer(model, name, tied)) {
      return absl::InvalidArgumentError(absl::StrCat(found.path, " holds ", found.name,
                                                     ", which the model its config.json describes has no place for"));
    }
  }
  return ir::ParameterSourcesOf(parameters, dir, step);
}

absl::Status WriteHuggingFaceModel(const std::string& dir, const ExampleJob& job, const ExampleJobOptions& options,
                                   const std::vector<std::pair<std::string, ir::StateSource>>& parameters,
                                   const HuggingFaceExport& how) {
  absl::StatusOr<nlohmann::ordered_json> config = ConfigOf(job);
  if (!config.ok()) return config.status();
  const std::string model = job.gpt.has_value() ? "gpt" : "llama";
  std::vector<std::pair<std::string, ir::StateSource>> tensors;
  for (const auto& [name, source] : parameters) {
    absl::StatusOr<std::string> renamed = HuggingFaceName(model, name);
    if (!renamed.ok()) return renamed.status();
    tensors.emplace_back(*std::move(renamed), source);
  }
  // Shards in order, each up to max_shard_bytes (a larger tensor alone).
  std::vector<std::vector<std::pair<std::string, ir::StateSource>>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (auto& tensor : tensors) {
    const int64_t bytes = tensor.second.type.num_bytes();
    if (!shards.back().empty() && shard_bytes + bytes > how.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(tensor));
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot make the directory ", dir, ": ", error.message()));
  // What an earlier export left that this one does not write goes first,
  // so that the directory never holds two sets of weights.
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == kWeights || name == kWeightsIndex ||
                         (name.starts_with("model-") && absl::EndsWith(name, ".safetensors"));
    if (weights) std::filesystem::remove(entry.path(), error);
  }
  if (shards.size() == 1) {
    if (absl::Status status = ir::WriteSafetensors(absl::StrCat(dir, "/", kWeights), shards[0], how.metadata);
        !status.ok()) {
      return status;
    }
  } else {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name = ShardName(k, shards.size());
      if (absl::Status status = ir::WriteSafetensors(absl::StrCat(dir, "/", name), shards[k], how.metadata);
          !status.ok()) {
        return status;
      }
      for (const auto& tensor : shards[k]) weight_map[tensor.first] = name;
    }
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    if (absl::Status status = ir::WriteFileAtomically(absl::StrCat(dir, "/", kWeightsIndex), index.dump(2) + "\n");
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = ir::WriteFileAtomically(absl::StrCat(dir, "/", kConfig), config->dump(2) + "\n");
      !status.ok()) {
    return status;
  }
  const nlohmann::ordered_json generation = {{"do_sample", false}};
  if (absl::Status status =
          ir::WriteFileAtomically(absl::StrCat(dir, "/generation_config.json"), generation.dump(2) + "\n");
      !status.ok()) {
    return status;
  }
  if (!options.tokenizer.has_value()) return absl::OkStatus();
  // The SentencePiece model as it is: transformers' LlamaTokenizer reads
  // it, and with Tandem's settings (no dummy prefix, no BOS or EOS added)
  // gives the ids `tandem tokenize` gives.
  absl::StatusOr<std::string> tokenizer =
      ir::ReadFileUpTo(*options.tokenizer, kMaxTokenizerModelBytes, *options.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status();
  if (absl::Status status = ir::WriteFileAtomically(absl::StrCat(dir, "/", kTokenizerModel), *tokenizer);
      !status.ok()) {
    return status;
  }
  const nlohmann::ordered_json tokenizer_config = {{"tokenizer_class", "LlamaTokenizer"},
                                                   {"add_bos_token", false},
                                                   {"add_eos_token", false},
                                                   {"add_prefix_space", false},
                                                   {"legacy", false},
                                                   {"clean_up_tokenization_spaces", false}};
  return ir::WriteFileAtomically(absl::StrCat(dir, "/tokenizer_config.json"), tokenizer_config.dump(2) + "\n");
}

}  // namespace tandem::examples

// Hugging Face's model directory, both ways, for the language models: what
// `tandem export --format hf` writes and `--import DIR` reads.
//
// A directory holds config.json (the architecture and its sizes),
// generation_config.json, the parameters (model.safetensors, or shards
// model-0000k-of-0000n.safetensors listed by model.safetensors.index.json)
// and, for a model trained with a SentencePiece tokenizer, tokenizer.model
// with tokenizer_config.json. gpt is transformers' GPT2LMHeadModel, llama
// its LlamaForCausalLM: the parameters keep their layouts (GPT-2's Conv1D
// weights are [in, out] as Tandem's Linear's; both heads [vocab, dim]) and
// only gpt's are renamed (HuggingFaceName).
#ifndef TANDEM_EXAMPLES_HUGGING_FACE_H_
#define TANDEM_EXAMPLES_HUGGING_FACE_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "examples/example_job.h"
#include "ir/state_source.h"
#include "ir/train_step.h"

namespace tandem::examples {

// The most bytes config.json (and the shard index) may have: a model's
// config is a few kB, an index of 10,000 tensors about 1 MB.
inline constexpr int64_t kMaxHuggingFaceJsonBytes = int64_t{16} << 20;
// transformers' own default shard size (save_pretrained's max_shard_size).
inline constexpr int64_t kDefaultShardBytes = int64_t{5'000'000'000};

// Whether `path` is a directory holding a config.json.
bool IsHuggingFaceDirectory(const std::string& path);

// Sets the model `dir`'s config.json describes on `options`: the model
// (gpt2 → gpt, llama → llama), its sizes, its tied head, and llama's MLP
// width, rotary base and norm epsilon; a sequence length of the model's
// positions unless options.seq says less (llama; gpt's position table is
// as long as its sequence). With no tokenizer in `options`, the
// directory's tokenizer.model when it has one. Fields a config omits take
// transformers' defaults. InvalidArgument naming the field when the config
// describes what Tandem's models cannot represent (another architecture,
// biases llama lacks, rope scaling, another activation or norm epsilon,
// cross-attention, ...), and when a size already set in `options` (a flag)
// differs from the config's; the errors of reading the file.
absl::Status TakeHuggingFaceConfig(const std::string& dir, ExampleJobOptions& options);

// The name Hugging Face gives parameter `parameter` of `model` (gpt or
// llama): llama's are its own; gpt's "h3.attn.qkv.w" is
// "transformer.h.3.attn.c_attn.weight". InvalidArgument for a name the
// model does not have.
absl::StatusOr<std::string> HuggingFaceName(absl::string_view model, const std::string& parameter);

// `step`'s first state (the model `model`) with its parameters from the
// model directory `dir` (model.safetensors, or the shards its index lists)
// and its optimizer state from its initializers. Tensors are found under
// their Hugging Face names, with or without the base model's prefix
// ("transformer.", "model.") as the checkpoints of each transformers
// version have them; buffers that are no parameters (GPT-2's attention
// masks, LLaMA's rotary frequencies, a tied head's copy) are skipped.
// InvalidArgument naming the tensor and the file for a missing one, one of
// another type or shape, or one the model does not have.
absl::StatusOr<ir::StateSources> HuggingFaceParameterSources(const std::string& dir, absl::string_view model,
                                                             const ir::TrainStep& step);

struct HuggingFaceExport {
  // A shard holds at most this many bytes of tensors (one larger tensor
  // alone); the whole model in one model.safetensors when it fits.
  int64_t max_shard_bytes = kDefaultShardBytes;
  // Written to each file's safetensors metadata.
  std::map<std::string, std::string> metadata;
};

// Writes `parameters` (by Tandem's names, in the order to write them) of
// `job`'s language model as the Hugging Face model directory `dir`: the
// config, generation_config.json, the tensors (copied a piece at a time)
// and the SentencePiece tokenizer the job was built with, if any (a
// character-level model has none transformers represents: its directory
// holds no tokenizer). Unimplemented for a model other than gpt or llama;
// the errors of writing.
absl::Status WriteHuggingFaceModel(const std::string& dir, const ExampleJob& job,
                                   const ExampleJobOptions& options,
                                   const std::vector<std::pair<std::string, ir::StateSource>>& parameters,
                                   const HuggingFaceExport& how);

}  // namespace tandem::examples

#endif  // TANDEM_EXAMPLES_HUGGING_FACE_H_

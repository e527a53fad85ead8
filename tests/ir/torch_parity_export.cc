// Exports what tests/ir/torch_parity.py compares with PyTorch: the example
// GPT's and LLaMA's initial parameters, a deterministic batch, Tandem's loss and
// parameter gradients, and the parameters after 3 Adam steps on that batch.
//
//   torch_parity_export OUT_DIR
//
// writes one folder per case (OUT_DIR/untied, OUT_DIR/tied, OUT_DIR/llama,
// OUT_DIR/llama-tied), each with
// manifest.txt (the config, the optimizer and the parameter names in state
// order), init.safetensors (the initial parameters as `tandem export` writes
// them) and .npy files: tokens, labels, init.<p>, and for each Adam step
// k = 1..3 the loss and gradients before it (s<k>.loss, s<k>.grad.<p>) and
// the parameters after it (s<k>.param.<p>). A plain program rather than a GoogleTest: the check itself is
// the Python script, and the CTest test ir_torch_parity runs both.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "examples/models/gpt.h"
#include "examples/models/llama.h"
#include "ir/host_tensor.h"
#include "ir/initial_state.h"
#include "ir/optimizers.h"
#include "ir/safetensors.h"
#include "ir/trace.h"
#include "ir/train_step.h"

namespace tandem {
namespace {

constexpr int kAdamSteps = 3;

// One parity case: a model of the acceptance criteria and the Adam it
// trains with. `config` is the manifest's config line after "config ".
struct ParityCase {
  std::string name;
  ModelFunction model;
  ir::Shape batch_shape;  // [batch, sequence]
  int64_t vocab_size = 0;
  std::string config;
  AdamOptions adam;
};

ParityCase GptCase(std::string name, const examples::GptConfig& c, AdamOptions adam) {
  return {std::move(name), examples::GptModel(c), {c.batch_size, c.sequence_length}, c.vocab_size,
          absl::StrFormat("model=gpt vocab_size=%d sequence_length=%d model_dim=%d num_heads=%d num_layers=%d "
                          "mlp_ratio=%d batch_size=%d tied_head=%d",
                          c.vocab_size, c.sequence_length, c.model_dim, c.num_heads, c.num_layers, c.mlp_ratio,
                          c.batch_size, c.tied_head ? 1 : 0),
          adam};
}

ParityCase LlamaCase(std::string name, const examples::LlamaConfig& c, AdamOptions adam) {
  return {std::move(name), examples::LlamaModel(c), {c.batch_size, c.sequence_length}, c.vocab_size,
          absl::StrFormat("model=llama vocab_size=%d sequence_length=%d model_dim=%d num_heads=%d num_kv_heads=%d "
                          "num_layers=%d mlp_hidden=%d batch_size=%d tied_head=%d rope_theta=%.17g norm_eps=%.17g",
                          c.vocab_size, c.sequence_length, c.model_dim, c.num_heads, c.num_kv_heads, c.num_layers,
                          examples::LlamaMlpWidth(c), c.batch_size, c.tied_head ? 1 : 0, c.rope_theta, c.norm_eps),
          adam};
}

// Writes `tensor` as a NumPy .npy file (format 1.0, little-endian f32 or
// i32, C order); the header is padded with spaces to a multiple of 64 bytes.
absl::Status WriteNpy(const std::filesystem::path& path, const ir::HostTensor& tensor) {
  const char* descr = nullptr;
  switch (tensor.dtype()) {
    case ir::DType::kF32: descr = "<f4"; break;
    case ir::DType::kI32: descr = "<i4"; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("npy: unsupported dtype ", ir::DTypeName(tensor.dtype())));
  }
  std::string shape = "(";
  for (int64_t extent : tensor.shape()) absl::StrAppend(&shape, extent, ",");
  if (tensor.shape().size() > 1) shape.pop_back();  // (3,) but (2,3)
  shape += ")";
  std::string header =
      absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  constexpr size_t kPreamble = 10;  // magic (6) + version (2) + header length (2)
  size_t total = kPreamble + header.size() + 1;  // + the closing newline
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream file(path, std::ios::binary);
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  const uint16_t header_length = static_cast<uint16_t>(header.size());
  file.write("\x93NUMPY\x01\x00", 8);
  const char length_bytes[2] = {static_cast<char>(header_length & 0xff), static_cast<char>(header_length >> 8)};
  file.write(length_bytes, 2);
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  file.write(reinterpret_cast<const char*>(tensor.data()), tensor.num_bytes());
  if (!file) return absl::InternalError(absl::StrCat("write failed: ", path.string()));
  return absl::OkStatus();
}

// Ids in [0, vocab) from a 64-bit LCG (Knuth's MMIX constants), top bits.
ir::HostTensor DeterministicIds(const ir::Shape& shape, int64_t vocab, uint64_t seed) {
  ir::HostTensor ids(ir::TensorType{ir::DType::kI32, shape});
  uint64_t state = seed;
  for (int64_t i = 0; i < ids.num_elements(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    ids.i32()[i] = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

absl::Status ExportCase(const ParityCase& c, const std::filesystem::path& dir) {
  Adam adam(c.adam);
  absl::StatusOr<ir::TrainStep> step =
      TraceTrainStep(absl::StrCat("parity_", c.name), c.model, adam, TraceOptions{.num_microbatches = 1, .seed = 1234});
  if (!step.ok()) return step.status();

  std::filesystem::create_directories(dir);
  ir::TensorMap batch = {{"tokens", DeterministicIds(c.batch_shape, c.vocab_size, 17)},
                         {"labels", DeterministicIds(c.batch_shape, c.vocab_size, 29)}};
  for (const auto& [name, tensor] : batch) {
    if (absl::Status s = WriteNpy(dir / (name + ".npy"), tensor); !s.ok()) return s;
  }

  ir::TensorMap state = *ir::InitialState(*step);
  std::vector<std::string> parameters;
  std::vector<std::pair<std::string, ir::StateSource>> exported;
  for (const ir::StateSpec& spec : step->state) {
    if (spec.role != ir::StateRole::kParameter) continue;
    parameters.push_back(spec.name);
    if (absl::Status s = WriteNpy(dir / ("init." + spec.name + ".npy"), state.at(spec.name)); !s.ok()) return s;
    exported.emplace_back(spec.name, ir::StateSource{spec.type, state.at(spec.name)});
  }
  // The same parameters as `tandem export` writes them, which the script
  // loads in PyTorch on its own.
  if (absl::Status s = ir::WriteSafetensors((dir / "init.safetensors").string(), exported, {{"format", "pt"}});
      !s.ok()) {
    return s;
  }

  // Each Adam step k = 1..kAdamSteps: the loss and gradients at the state
  // before it (s<k>.loss, s<k>.grad.<p>; s1 is the initial state), then the
  // parameters after it (s<k>.param.<p>). RunReferenceStep runs the same
  // deterministic microbatch graph, so these are the gradients it applies.
  float initial_loss = 0;
  for (int s = 1; s <= kAdamSteps; ++s) {
    const std::string prefix = absl::StrCat("s", s, ".");
    ir::TensorMap inputs = state;
    for (const auto& [name, tensor] : batch) inputs[name] = tensor;
    absl::StatusOr<ir::TensorMap> outputs = cpu::RunGraph(step->microbatch, inputs);
    if (!outputs.ok()) return outputs.status();
    if (s == 1) initial_loss = outputs->at("loss").f32()[0];
    if (absl::Status st = WriteNpy(dir / (prefix + "loss.npy"), outputs->at("loss")); !st.ok()) return st;
    for (const std::string& p : parameters) {
      auto it = outputs->find(ir::GradientName(p, 0));
      if (it == outputs->end()) return absl::InternalError(absl::StrCat("no gradient output for ", p));
      if (absl::Status st = WriteNpy(dir / (prefix + "grad." + p + ".npy"), it->second); !st.ok()) return st;
    }
    absl::StatusOr<cpu::StepResult> result = cpu::RunReferenceStep(*step, state, {batch}, s);
    if (!result.ok()) return result.status();
    for (const std::string& p : parameters) {
      if (absl::Status st = WriteNpy(dir / (prefix + "param." + p + ".npy"), state.at(p)); !st.ok()) return st;
    }
  }

  std::ofstream manifest(dir / "manifest.txt");
  manifest << "config " << c.config << "\n";
  manifest << absl::StrFormat("adam lr=%.17g beta1=%.17g beta2=%.17g eps=%.17g steps=%d\n",
                              c.adam.learning_rate, c.adam.beta1, c.adam.beta2, c.adam.eps, kAdamSteps);
  for (const std::string& p : parameters) manifest << "param " << p << "\n";
  if (!manifest) return absl::InternalError("cannot write manifest.txt");
  std::cout << c.name << ": loss " << absl::StrFormat("%.9g", initial_loss) << ", "
            << parameters.size() << " parameters -> " << dir.string() << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torch_parity_export OUT_DIR\n";
    return 2;
  }
  tandem::cpu::SetBlasThreads(1);
  tandem::examples::GptConfig gpt{.vocab_size = 65,
                                  .sequence_length = 32,
                                  .model_dim = 64,
                                  .num_heads = 4,
                                  .num_layers = 2,
                                  .batch_size = 4,
                                  .num_stages = 1};
  tandem::AdamOptions adam{.learning_rate = 1e-2};
  std::vector<tandem::ParityCase> cases = {tandem::GptCase("untied", gpt, adam)};
  gpt.tied_head = true;
  cases.push_back(tandem::GptCase("tied", gpt, adam));
  // Grouped-query attention (4 heads share 2 kv heads), rotary, SwiGLU, RMSNorm.
  tandem::examples::LlamaConfig llama{.vocab_size = 65,
                                      .sequence_length = 32,
                                      .model_dim = 64,
                                      .num_heads = 4,
                                      .num_kv_heads = 2,
                                      .num_layers = 2,
                                      .batch_size = 4};
  cases.push_back(tandem::LlamaCase("llama", llama, adam));
  llama.tied_head = true;
  llama.num_kv_heads = 1;
  cases.push_back(tandem::LlamaCase("llama-tied", llama, adam));
  for (const tandem::ParityCase& c : cases) {
    absl::Status status = tandem::ExportCase(c, std::filesystem::path(argv[1]) / c.name);
    if (!status.ok()) {
      std::cerr << "torch_parity_export: " << c.name << ": " << status << "\n";
      return 1;
    }
  }
  return 0;
}

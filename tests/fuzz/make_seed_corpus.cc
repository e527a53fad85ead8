// make_seed_corpus OUT_DIR: writes the fuzz targets' seed corpora,
// OUT_DIR/<target>/<name>, from Tandem's own writers (the .sched printer,
// the CSV exporter, the IR printer, the state-file encoder, the program and
// tensor encoders, the planner's cost and plan files) applied to small generated schedules and a small traced
// MLP, plus near-valid variants of each (truncated, one field out of range,
// one token wrong) that reach the parsers' error paths. Deterministic: the
// committed corpus under tests/fuzz/corpus/ is this program's output
// (`build/tests/make_seed_corpus tests/fuzz/corpus`). Every input meant to
// be valid is checked to parse, so the corpus cannot rot silently.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "actor/data_plane_frame.h"
#include "actor/ipc_record.h"
#include "actor/replica_group.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "controller/checkpoint.h"
#include "controller/compiler.h"
#include "examples/data/sentencepiece_bridge.h"
#include "examples/example_job.h"
#include "ir/initial_state.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/safetensors.h"
#include "ir/state_file.h"
#include "rpc/program_codec.h"
#include "rpc/step_codec.h"
#include "schedules/cost_file.h"
#include "schedules/generators.h"
#include "schedules/plan_file.h"
#include "schedules/pytorch_csv.h"
#include "schedules/text_format.h"

namespace tandem::fuzz {
namespace {

namespace fs = std::filesystem;

class CorpusWriter {
 public:
  explicit CorpusWriter(fs::path root) : root_(std::move(root)) {}

  void Write(const std::string& target, const std::string& name, absl::string_view bytes) {
    const fs::path dir = root_ / target;
    fs::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) Die(absl::StrCat("cannot write ", (dir / name).string()));
    ++written_[target];
  }

  void Report() const {
    for (const auto& [target, count] : written_) std::printf("%s: %d inputs\n", target.c_str(), count);
  }

  [[noreturn]] static void Die(const std::string& message) {
    std::fprintf(stderr, "make_seed_corpus: %s\n", message.c_str());
    std::exit(1);
  }

 private:
  fs::path root_;
  std::map<std::string, int> written_;
};

template <typename T>
T Require(absl::StatusOr<T> value, absl::string_view what) {
  if (!value.ok()) CorpusWriter::Die(absl::StrCat(what, ": ", value.status().ToString()));
  return *std::move(value);
}

std::string Truncated(absl::string_view text) { return std::string(text.substr(0, text.size() / 2)); }

std::string Bytes(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

std::vector<std::pair<std::string, schedules::Schedule>> SmallSchedules() {
  std::vector<std::pair<std::string, schedules::Schedule>> result;
  const std::vector<std::pair<std::string, schedules::GeneratorOptions>> wanted = {
      {"gpipe", {.actors = 2, .microbatches = 3}},       {"1f1b", {.actors = 3, .microbatches = 4}},
      {"interleaved", {.actors = 2, .microbatches = 4}}, {"looped-bfs", {.actors = 2, .microbatches = 2}},
      {"zb-h1", {.actors = 2, .microbatches = 3}},       {"zb-v", {.actors = 2, .microbatches = 3}},
      {"dualpipev", {.actors = 2, .microbatches = 4}},
      {"graph-1f1b", {.actors = 3, .microbatches = 3, .stage_edges = {{0, 2}, {1, 2}}}},
  };
  for (const auto& [name, options] : wanted) {
    result.emplace_back(name, Require(schedules::Generate(name, options), name));
  }
  return result;
}

void WriteScheduleSeeds(CorpusWriter& writer, const std::vector<std::pair<std::string, schedules::Schedule>>& all) {
  const std::string target = "schedule_text";
  for (const auto& [name, schedule] : all) {
    const std::string text = schedules::PrintScheduleText(schedule);
    Require(schedules::ParseScheduleText(text), name);
    writer.Write(target, name + ".sched", text);
  }
  const std::string one = schedules::PrintScheduleText(all[1].second);
  writer.Write(target, "commented-crlf.sched",
               absl::StrCat("# hand-written\r\n", absl::StrReplaceAll(one, {{"\n", "  # note\r\n"}})));
  writer.Write(target, "explicit-placement.sched",
               "actors 2\nstages 4\nmicrobatches 1\nplacement 0 1 1 0\n"
               "actor 0: F0.0 F3.0 B3.0 B0.0\nactor 1: F1.0 F2.0 B2.0 B1.0\n");
  writer.Write(target, "near-truncated.sched", Truncated(one));
  writer.Write(target, "near-microbatch-out-of-range.sched", absl::StrReplaceAll(one, {{"F0.1", "F0.99"}}));
  writer.Write(target, "near-unknown-kind.sched", absl::StrReplaceAll(one, {{"B1.0", "X1.0"}}));
  writer.Write(target, "near-no-header.sched", "actor 0: F0.0 B0.0\n");
  writer.Write(target, "near-open-group.sched", "actors 1\nmicrobatches 1\nactor 0: (F0.0;B0.0\n");
  writer.Write(target, "near-backward-stage-edge.sched", "actors 3\nmicrobatches 1\nstage-graph 0->2 2->1\n");
}

void WriteCsvSeeds(CorpusWriter& writer, const std::vector<std::pair<std::string, schedules::Schedule>>& all) {
  const std::string target = "pytorch_csv";
  for (const auto& [name, schedule] : all) {
    if (!schedule.stage_edges.empty()) continue;  // the CSV has no stage graph
    const std::string text = schedules::PrintPytorchCsv(schedule);
    Require(schedules::ParsePytorchCsv(text), name);
    writer.Write(target, name + ".csv", text);
  }
  // PyTorch's older dialect (B then W read as I, W), idle cells, and
  // explicit transfers on two ranks.
  const std::vector<std::pair<std::string, std::string>> valid = {
      {"legacy-b-then-w.csv", "0F0,,0B0,0W0\n,1F0,1B0,1W0\n"},
      {"transfers.csv",
       "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
       "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n"},
      {"bw-full-backward.csv", "0F0,0BW0\n"},
  };
  for (const auto& [name, text] : valid) {
    Require(schedules::ParsePytorchCsv(text), name);
    writer.Write(target, name, text);
  }
  const std::string one = schedules::PrintPytorchCsv(all[1].second);
  writer.Write(target, "near-truncated.csv", Truncated(one));
  writer.Write(target, "near-bad-group.csv", "(0F0;1B0)OVERLAP\n");
  writer.Write(target, "near-missing-recv.csv", "0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n");
  writer.Write(target, "near-stage-on-two-ranks.csv", "0F0,0B0\n0F1,0B1\n");
  writer.Write(target, "near-huge-numbers.csv", "0F999999999999,0B1\n");
}

examples::ExampleJob SmallMlp(int32_t stages) {
  return Require(examples::MakeExampleJob({.model = "mlp",
                                           .stages = stages,
                                           .microbatches = 2,
                                           .layers = 2,
                                           .dim = 8,
                                           .batch = 2}),
                 "mlp");
}

void WriteIrSeeds(CorpusWriter& writer, const examples::ExampleJob& job, const controller::CompiledStep& compiled) {
  const std::string target = "ir_text";
  const std::string step = ir::PrintTrainStep(job.step);
  Require(ir::ParseTrainStep(step), "train step");
  writer.Write(target, "mlp-train-step.tir", step);
  int count = 0;
  for (const ir::ActorProgram& program : compiled.programs) {
    for (const ir::Function& function : program.functions) {
      if (count >= 4) break;
      const std::string text = ir::PrintGraph(function.graph);
      Require(ir::ParseGraph(text), function.name);
      writer.Write(target, absl::StrCat("graph-", count++, ".tir"), text);
    }
  }
  writer.Write(target, "near-truncated.tir", Truncated(step));
  writer.Write(target, "near-unknown-op.tir", absl::StrReplaceAll(step, {{"matmul", "matmil"}}));
  writer.Write(target, "near-bad-numbering.tir", absl::StrReplaceAll(step, {{"%1 =", "%7 ="}}));
  writer.Write(target, "near-bad-escape.tir", "graph @\"a\\x4\" {\n}\n");
  writer.Write(target, "near-stage-graph.tir",
               "train_step @t stages=3 stage_graph=\"0->2 1->2 2->9\" microbatches=1 {\n}\n");
  writer.Write(target, "near-huge-shape.tir",
               "graph @g {\n  %0 = input {name=\"x\", role=\"data\"} : f32[99999999999,99999999999]\n"
               "  output \"y\" = %0\n}\n");
}

void WriteStateSeeds(CorpusWriter& writer, const examples::ExampleJob& job) {
  const std::string target = "state_file";
  const ir::TensorMap state = *ir::InitialState(job.step);
  const std::string bytes = ir::EncodeStateFile(state);
  Require(ir::DecodeStateFile(bytes, "seed"), "state file");
  writer.Write(target, "mlp-initial.state", bytes);
  ir::TensorMap one;
  one.emplace(state.begin()->first, state.begin()->second);
  const std::string single = ir::EncodeStateFile(one);
  writer.Write(target, "one-tensor.state", single);
  writer.Write(target, "empty.state", ir::EncodeStateFile({}));
  writer.Write(target, "near-truncated.state", Truncated(single));
  std::string bad_magic = single;
  bad_magic[0] = 'X';
  writer.Write(target, "near-bad-magic.state", bad_magic);
  std::string huge_count = single;
  for (size_t i = 12; i < 16; ++i) huge_count[i] = '\xff';  // after magic and version
  writer.Write(target, "near-huge-count.state", huge_count);
  writer.Write(target, "near-trailing-byte.state", single + "x");
}

// safetensors files as `tandem export` writes them, and near-valid ones.
void WriteSafetensorsSeeds(CorpusWriter& writer, const examples::ExampleJob& job) {
  const std::string target = "safetensors";
  const ir::TensorMap state = *ir::InitialState(job.step);
  std::vector<std::pair<std::string, ir::StateSource>> tensors;
  for (const auto& [name, tensor] : state) tensors.emplace_back(name, ir::StateSource{tensor.type(), tensor});
  const fs::path path = fs::temp_directory_path() / absl::StrCat("tandem-seed-", getpid(), ".safetensors");
  if (absl::Status status = ir::WriteSafetensors(path.string(), tensors, {{"format", "pt"}}); !status.ok()) {
    CorpusWriter::Die(absl::StrCat("safetensors: ", status.message()));
  }
  Require(ir::IndexSafetensors(path.string()), "safetensors index");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(path);
  writer.Write(target, "mlp-initial.safetensors", bytes);
  writer.Write(target, "near-truncated.safetensors", Truncated(bytes));
  std::string shifted = bytes;
  const size_t offsets = shifted.find("data_offsets\":[0,");
  if (offsets != std::string::npos) shifted[offsets + 16] = '4';  // the first tensor begins at 4: a gap
  writer.Write(target, "near-gap.safetensors", shifted);
  std::string f64 = bytes;
  const size_t dtype = f64.find("\"F32\"");
  if (dtype != std::string::npos) f64.replace(dtype, 5, "\"F64\"");
  writer.Write(target, "near-unknown-dtype.safetensors", f64);
  std::string long_header = bytes;
  long_header[7] = '\x7f';  // a header length past the file
  writer.Write(target, "near-header-past-the-end.safetensors", long_header);
}

// SentencePiece models: Tandem's own (BPE, no normaliser table) and one with
// NFKC's table, as most downloaded models have, both trained here on a
// licence text; and near-valid ones whose table points outside itself.
void WriteTokenizerModelSeeds(CorpusWriter& writer) {
  const std::string target = "tokenizer_model";
  const fs::path directory = fs::temp_directory_path() / absl::StrCat("tandem-seed-spm-", getpid());
  fs::create_directories(directory);
  const std::string text = "/usr/share/common-licenses/GPL-3";
  auto train = [&](const std::string& name, const std::string& options) {
    const std::string prefix = (directory / name).string();
    if (const std::string error = examples::spm::Train(absl::StrCat("--input=", text, " --model_prefix=", prefix, " ",
                                                                    options, " --minloglevel=2"));
        !error.empty()) {
      CorpusWriter::Die(absl::StrCat("tokenizer_model: ", error));
    }
    std::ifstream in(prefix + ".model", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string bpe = train("bpe", "--vocab_size=400 --model_type=bpe --byte_fallback=true "
                                       "--normalization_rule_name=identity --add_dummy_prefix=false");
  const std::string nfkc = train("nfkc", "--vocab_size=300 --model_type=unigram --normalization_rule_name=nmt_nfkc");
  fs::remove_all(directory);
  writer.Write(target, "bpe-identity.model", bpe);
  writer.Write(target, "unigram-nfkc.model", nfkc);
  writer.Write(target, "near-truncated.model", Truncated(bpe));
  // A normaliser spec appended to a model merges into it; its charsmap's
  // trie (256 units) sends the search to unit 2^20.
  std::string charsmap = std::string("\x00\x04\x00\x00", 4) + std::string(1024, '\0') + std::string("x\0", 2);
  charsmap[4 + 3] = '\x40';
  std::string spec = std::string("\x12\x86\x08", 3) + charsmap;  // field 2, 1030 bytes
  writer.Write(target, "near-trie-outside.model", bpe + std::string("\x1a\x89\x08", 3) + spec);  // field 3, 1033 bytes
}

void WriteProgramSeeds(CorpusWriter& writer, const controller::CompiledStep& compiled) {
  const std::string target = "program_decoder";
  for (size_t actor = 0; actor < compiled.programs.size(); ++actor) {
    capnp::MallocMessageBuilder message;
    rpc::EncodeProgram(compiled.programs[actor], message.initRoot<rpc::wire::ActorProgram>());
    Require(rpc::DecodeProgram(message.getRoot<rpc::wire::ActorProgram>().asReader()), "program");
    writer.Write(target, absl::StrCat("mlp-actor-", actor, ".bin"), Bytes(message));
  }
  const ir::ActorProgram& program = compiled.programs[0];
  {
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<rpc::wire::ActorProgram>();
    rpc::EncodeProgram(program, root);
    root.getInstructions()[0].getInputs().set(0, 9999);
    writer.Write(target, "near-bad-buffer-index.bin", Bytes(message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<rpc::wire::ActorProgram>();
    rpc::EncodeProgram(program, root);
    root.getBuffers()[0].getType().setDtype(static_cast<rpc::wire::DType>(9));
    writer.Write(target, "near-bad-dtype.bin", Bytes(message));
  }
  {
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<rpc::wire::ActorProgram>();
    rpc::EncodeProgram(program, root);
    const std::string text(root.getFunctions()[0].getGraphText().cStr());
    root.getFunctions()[0].setGraphText(Truncated(text));
    writer.Write(target, "near-truncated-graph.bin", Bytes(message));
  }
  capnp::MallocMessageBuilder message;
  rpc::EncodeProgram(program, message.initRoot<rpc::wire::ActorProgram>());
  writer.Write(target, "near-truncated-message.bin", Truncated(Bytes(message)));
}

void WriteTensorSeeds(CorpusWriter& writer, const examples::ExampleJob& job) {
  const std::string target = "tensor_decoder";
  const std::vector<ir::TensorMap> batch = Require(job.train_batch(0), "train batch");
  ir::StepInputs inputs;
  for (size_t microbatch = 0; microbatch < batch.size(); ++microbatch) {
    for (const auto& [name, tensor] : batch[microbatch]) {
      inputs.emplace(ir::InputKey{name, static_cast<int32_t>(microbatch)}, tensor);
    }
  }
  auto encode = [&](const ir::StepInputs& tensors) {
    auto message = std::make_unique<capnp::MallocMessageBuilder>();
    auto list = message->initRoot<rpc::wire::Actor::RunStepParams>().initInputs(static_cast<unsigned>(tensors.size()));
    rpc::EncodeStepInputs(tensors, list);
    return message;
  };
  {
    auto message = encode(inputs);
    Require(rpc::DecodeStepInputs(message->getRoot<rpc::wire::Actor::RunStepParams>().asReader().getInputs(), "seed"),
            "inputs");
    writer.Write(target, "mlp-batch.bin", Bytes(*message));
    writer.Write(target, "near-truncated.bin", Truncated(Bytes(*message)));
  }
  {
    auto message = encode(inputs);
    auto list = message->getRoot<rpc::wire::Actor::RunStepParams>().getInputs();
    list[1].setName(list[0].getName());
    list[1].setMicrobatch(list[0].getMicrobatch());
    writer.Write(target, "near-given-twice.bin", Bytes(*message));
  }
  {
    auto message = encode(inputs);
    auto shape = message->getRoot<rpc::wire::Actor::RunStepParams>().getInputs()[0].getTensor().getType().getShape();
    shape.set(0, -3);
    writer.Write(target, "near-negative-extent.bin", Bytes(*message));
  }
  {
    auto message = encode(inputs);
    auto shape = message->getRoot<rpc::wire::Actor::RunStepParams>().getInputs()[0].getTensor().getType().getShape();
    shape.set(0, int64_t{1} << 40);
    writer.Write(target, "near-huge-extent.bin", Bytes(*message));
  }
  {
    auto message = encode(inputs);
    auto tensor = message->getRoot<rpc::wire::Actor::RunStepParams>().getInputs()[0].getTensor();
    tensor.setData(tensor.getData().slice(0, tensor.getData().size() / 2));
    writer.Write(target, "near-short-data.bin", Bytes(*message));
  }
  ir::StepResults results;
  results["loss"][0] = inputs.begin()->second;
  results["loss"][1] = inputs.begin()->second;
  capnp::MallocMessageBuilder message;
  auto list = message.initRoot<rpc::wire::Actor::RunStepResults>().initResults(rpc::CountStepResults(results));
  rpc::EncodeStepResults(results, list);
  writer.Write(target, "results.bin", Bytes(message));
}

// MANIFESTs as SaveCheckpoint writes them, and near misses: a flipped
// byte, a step that disagrees, a file name that leaves the directory.
void WriteManifestSeeds(CorpusWriter& writer, const examples::ExampleJob& job) {
  const std::string target = "checkpoint_manifest";
  controller::CheckpointManifest manifest{.model = job.step.name, .step = 10, .schedule = "1f1b", .actors = 2};
  for (const ir::StateSpec& spec : job.step.state) manifest.state[spec.name] = ir::TypeToString(spec.type);
  manifest.files = {{"actor-0.state", 1234, "0123abcd"}, {"actor-1.state", 5678, "89ef4567"}};
  const std::string text = controller::PrintCheckpointManifest(manifest);
  Require(controller::ParseCheckpointManifest(text, "seed"), "manifest");
  writer.Write(target, "mlp-step-10", text);
  std::string flipped = text;
  flipped[flipped.find("step\t10") + 5] = '0';
  writer.Write(target, "near-flipped-step", flipped);
  writer.Write(target, "near-truncated", text.substr(0, text.size() / 2));
  controller::CheckpointManifest escaping = manifest;
  escaping.files[1].name = "..";
  writer.Write(target, "near-escaping-file", controller::PrintCheckpointManifest(escaping));
  controller::CheckpointManifest three = manifest;
  three.actors = 3;
  writer.Write(target, "near-actor-count", controller::PrintCheckpointManifest(three));
}

// Cost files and plans as the planner writes them, for a chain and for a
// two-tower DAG (segment_graph, stage_graph), and near misses: a backward
// edge, an edge past the last segment, a stage that skips a segment.
void WritePlannerSeeds(CorpusWriter& writer) {
  const std::string target = "planner_files";
  schedules::CostFile costs{.model = "seed", .device = "cpu", .microbatch_size = 4};
  for (int i = 0; i < 6; ++i) {
    costs.segments.push_back({.name = absl::StrCat("seg", i), .forward_s = 0.001 * (i + 1), .backward_s = 0.002,
                              .backward_input_s = 0.001, .backward_weight_s = 0.001, .recompute_s = 0.001,
                              .activation_bytes = 4096, .stash_bytes = 8192, .remat_stash_bytes = 4096,
                              .parameter_bytes = 1024, .optimizer_bytes = 2048, .working_bytes = 512});
  }
  const std::string chain_costs = schedules::FormatCostFile(costs);
  Require(schedules::ParseCostFile(chain_costs), "chain cost file");
  writer.Write(target, "costs-chain", chain_costs);
  costs.segment_edges = {{0, 1}, {1, 4}, {2, 3}, {3, 4}, {4, 5}};
  const std::string dag_costs = schedules::FormatCostFile(costs);
  Require(schedules::ParseCostFile(dag_costs), "dag cost file");
  writer.Write(target, "costs-two-tower", dag_costs);
  writer.Write(target, "near-costs-backward-edge", absl::StrReplaceAll(dag_costs, {{"3->4", "4->3"}}));
  writer.Write(target, "near-costs-edge-past-the-end", absl::StrReplaceAll(dag_costs, {{"4->5", "4->6"}}));

  schedules::Plan plan{.model = "seed", .device = "cpu", .actors = 3, .schedule = "graph-1f1b", .microbatches = 4,
                       .microbatch_size = 2, .segments = 6};
  plan.stages = {{0, 2, false, 0}, {2, 4, false, 1}, {4, 6, true, 2}};
  plan.stage_edges = {{0, 2}, {1, 2}};
  plan.predicted_peak_bytes = {100, 200, 300};
  const std::string dag_plan = schedules::FormatPlanFile(plan);
  Require(schedules::ParsePlanFile(dag_plan), "dag plan");
  writer.Write(target, "plan-two-tower", dag_plan);
  plan.schedule = "1f1b";
  plan.stage_edges.clear();
  const std::string chain_plan = schedules::FormatPlanFile(plan);
  Require(schedules::ParsePlanFile(chain_plan), "chain plan");
  writer.Write(target, "plan-chain", chain_plan);
  writer.Write(target, "near-plan-stage-edge-out-of-range", absl::StrReplaceAll(dag_plan, {{"1->2", "1->3"}}));
  writer.Write(target, "near-plan-skipped-segment", absl::StrReplaceAll(dag_plan, {{"[2,4]", "[3,4]"}}));
}

// What the actors send each other about themselves: replica-group offers,
// CUDA IPC host records and data-plane frame heads, as their writers make
// them.
void WriteActorSeeds(CorpusWriter& writer) {
  const actor::ReplicaOffer offers[] = {{"127.0.0.1:41234"}, {"[::1]:5"}, {"10.0.0.7:29500"}};
  int index = 0;
  for (const actor::ReplicaOffer& offer : offers) {
    writer.Write("replica_offer", absl::StrCat("offer-", index++), Require(actor::EncodeReplicaOffer(offer), "offer"));
  }

  const auto words_of = [](const std::vector<int32_t>& words) {
    return std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int32_t));
  };
  // Records from actor 3 to actor 5, as the fuzz target expects them.
  actor::ipc::RecordWriter setup(actor::ipc::RecordKind::kSetup, 3, 5);
  setup.Put64(uint64_t{1} << 40);
  setup.PutHandle({});
  writer.Write("ipc_record", "setup", words_of(setup.Take()));
  actor::ipc::RecordWriter message(actor::ipc::RecordKind::kMessage, 3, 5);
  message.Put64(7);  // tag
  message.Put32(1);  // one tensor
  for (size_t i = 0; i < actor::ipc::kTensorWords; ++i) message.Put32(i == 1 ? 2 : 4);
  writer.Write("ipc_record", "message", words_of(message.Take()));
  writer.Write("ipc_record", "release", words_of(actor::ipc::RecordWriter(actor::ipc::RecordKind::kRelease, 3, 5).Take()));

  // Frames from actor 1 to actor 0: their heads, then zeros for the data.
  const std::vector<std::vector<ir::HostTensor>> frames = {
      {ir::HostTensor::FromFloats({2, 3}, {1, 2, 3, 4, 5, 6})},
      {ir::HostTensor::FromInts({4}, {1, 2, 3, 4}), ir::HostTensor::Scalar(0.5f)},
      {},
  };
  index = 0;
  for (const std::vector<ir::HostTensor>& tensors : frames) {
    const actor::FrameLayout layout = Require(actor::PlanFrame(1, 0, 9, tensors), "frame");
    std::string bytes(layout.header.frame_bytes, '\0');
    actor::WriteFrameHead(layout, reinterpret_cast<std::byte*>(bytes.data()));
    writer.Write("frame", absl::StrCat("frame-", index++), bytes);
  }
}

}  // namespace
}  // namespace tandem::fuzz

int main(int argc, char** argv) {
  using namespace tandem;  // NOLINT: a main() of one screen
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  fuzz::CorpusWriter writer(argv[1]);
  const auto all = fuzz::SmallSchedules();
  fuzz::WriteScheduleSeeds(writer, all);
  fuzz::WriteCsvSeeds(writer, all);
  const examples::ExampleJob job = fuzz::SmallMlp(2);
  const controller::CompiledStep compiled =
      fuzz::Require(controller::Compile(job.step, fuzz::Require(schedules::Generate("1f1b", {2, 2}), "1f1b")),
                    "compile");
  fuzz::WriteIrSeeds(writer, job, compiled);
  fuzz::WriteStateSeeds(writer, job);
  fuzz::WriteSafetensorsSeeds(writer, job);
  fuzz::WriteTokenizerModelSeeds(writer);
  fuzz::WriteProgramSeeds(writer, compiled);
  fuzz::WriteTensorSeeds(writer, job);
  fuzz::WriteManifestSeeds(writer, job);
  fuzz::WritePlannerSeeds(writer);
  fuzz::WriteActorSeeds(writer);
  writer.Report();
  return 0;
}

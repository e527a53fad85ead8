// Fuzz target: the IR text parser (ir::ParseGraph, ir::ParseTrainStep), which
// reads `tandem ir` files and every function graph an actor receives. Each
// input goes to both entry points. Beyond not crashing: errors name the
// file; what parses prints and parses back to the same text; the verifier
// copes with whatever parses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tests/fuzz/fuzz_support.h"

namespace tandem::ir {
namespace {

constexpr char kFile[] = "fuzz.tir";

template <typename Parsed, typename Parse, typename Print>
void CheckRoundTrip(const Parsed& parsed, Parse parse, Print print) {
  const std::string printed = print(parsed);
  absl::StatusOr<Parsed> reparsed = parse(printed, kFile);
  fuzz::FuzzCheck(reparsed.ok(), "the printed IR does not parse: " + reparsed.status().ToString() + "\n" + printed);
  fuzz::FuzzCheck(print(*reparsed) == printed, "print, parse, print changed the text:\n" + printed);
}

void Run(absl::string_view text) {
  absl::StatusOr<Graph> graph = ParseGraph(text, kFile);
  if (graph.ok()) {
    CheckRoundTrip(*graph, ParseGraph, PrintGraph);
    VerifyGraph(*graph).IgnoreError();
  } else {
    fuzz::CheckNamesFile(graph.status(), kFile);
  }
  absl::StatusOr<TrainStep> step = ParseTrainStep(text, kFile);
  if (step.ok()) {
    CheckRoundTrip(*step, ParseTrainStep, PrintTrainStep);
    VerifyTrainStep(*step).IgnoreError();
  } else {
    fuzz::CheckNamesFile(step.status(), kFile);
  }
}

}  // namespace
}  // namespace tandem::ir

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tandem::ir::Run(tandem::fuzz::AsText(data, size));
  return 0;
}

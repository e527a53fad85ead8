#include "ir/printer.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/attributes.h"
#include "ir/text_lexer.h"

namespace tandem::ir {
namespace {

// A name after '@' or before '=' in an attribute list: bare when it can be.
std::string NameText(const std::string& name) {
  return IsTextIdentifier(name) ? name : QuoteTextString(name);
}

std::string AttributeText(const AttributeValue& value) {
  if (const auto* text = std::get_if<std::string>(&value)) return QuoteTextString(*text);
  return AttributeValueToString(value);
}

std::string DoubleText(double value) { return AttributeValueToString(AttributeValue(value)); }

void AppendNode(ValueId id, const Node& node, absl::string_view indent, std::string* out) {
  absl::StrAppend(out, indent, "%", id, " = ", OpName(node.op));
  if (!node.operands.empty()) {
    absl::StrAppend(out, "(",
                    absl::StrJoin(node.operands, ", ",
                                  [](std::string* s, ValueId v) { absl::StrAppend(s, "%", v); }),
                    ")");
  }
  if (!node.attributes.empty()) {
    absl::StrAppend(out, " {");
    const char* separator = "";
    for (const auto& [name, value] : node.attributes.values()) {
      absl::StrAppend(out, separator, NameText(name), "=", AttributeText(value));
      separator = ", ";
    }
    absl::StrAppend(out, "}");
  }
  absl::StrAppend(out, " : ", TypeToString(node.type));
  bool default_placement = node.stage == 0 && node.phase == Phase::kForward;
  if (node.op != OpKind::kInput || !default_placement) {
    absl::StrAppend(out, " stage=", node.stage, " ", std::string(1, PhaseLetter(node.phase)));
  }
  if (!(node.location == SourceLocation{})) {
    absl::StrAppend(out, " loc(", QuoteTextString(node.location.file), ":", node.location.line,
                    ")");
  }
  absl::StrAppend(out, "\n");
}

void AppendGraph(const Graph& graph, absl::string_view indent, std::string* out) {
  absl::StrAppend(out, indent, "graph @", NameText(graph.name()), " {\n");
  std::string inner = absl::StrCat(indent, "  ");
  for (ValueId id = 0; id < graph.size(); ++id) AppendNode(id, graph.node(id), inner, out);
  for (const GraphOutput& output : graph.outputs()) {
    absl::StrAppend(out, inner, "output ", QuoteTextString(output.name), " = %", output.value,
                    "\n");
  }
  absl::StrAppend(out, indent, "}\n");
}

const char* InitializerKindName(Initializer::Kind kind) {
  switch (kind) {
    case Initializer::Kind::kZeros: return "zeros";
    case Initializer::Kind::kOnes: return "ones";
    case Initializer::Kind::kNormal: return "normal";
    case Initializer::Kind::kUniform: return "uniform";
  }
  return "?";
}

std::string InitializerText(const Initializer& init) {
  bool random =
      init.kind == Initializer::Kind::kNormal || init.kind == Initializer::Kind::kUniform;
  std::string text = InitializerKindName(init.kind);
  if (random || init.a != 0 || init.b != 0) {
    absl::StrAppend(&text, "(", DoubleText(init.a), ", ", DoubleText(init.b), ")");
  }
  if (random || init.seed != 0) absl::StrAppend(&text, " seed=", init.seed);
  return text;
}

}  // namespace

std::string PrintGraph(const Graph& graph) {
  std::string out;
  AppendGraph(graph, "", &out);
  return out;
}

std::string PrintTrainStep(const TrainStep& step) {
  std::string out = absl::StrCat("train_step @", NameText(step.name), " stages=", step.num_stages,
                                 step.stage_edges.empty()
                                     ? ""
                                     : absl::StrCat(" stage_graph=", QuoteTextString(FormatStageEdges(step.stage_edges))),
                                 " microbatches=", step.num_microbatches,
                                 step.num_replicas == 1 ? "" : absl::StrCat(" replicas=", step.num_replicas),
                                 step.microbatches_per_update == 0
                                     ? ""
                                     : absl::StrCat(" update_every=", step.microbatches_per_update),
                                 step.version_delay.empty()
                                     ? ""
                                     : absl::StrCat(" version_delays=[", absl::StrJoin(step.version_delay, ","), "]"),
                                 " {\n");
  for (const StateSpec& spec : step.state) {
    absl::StrAppend(&out, "  state ", QuoteTextString(spec.name), " : ", TypeToString(spec.type),
                    " ", StateRoleName(spec.role), " ");
    if (!spec.parameter.empty()) absl::StrAppend(&out, "of ", QuoteTextString(spec.parameter), " ");
    absl::StrAppend(&out, InitializerText(spec.init), "\n");
  }
  AppendGraph(step.microbatch, "  ", &out);
  for (const Accumulator& accumulator : step.accumulators) {
    absl::StrAppend(&out, "  accumulate ", QuoteTextString(accumulator.name), " = ",
                    QuoteTextString(accumulator.source), "\n");
  }
  if (step.computes_gradient_norm()) AppendGraph(step.norm, "  ", &out);
  AppendGraph(step.update, "  ", &out);
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace tandem::ir

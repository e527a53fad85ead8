#include "ir/parser.h"

#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ir/excerpt.h"
#include "ir/limits.h"
#include "ir/text_lexer.h"

// Local shorthands for propagating a failed Status / StatusOr.
#define TANDEM_PARSE_TRY(expr)                     \
  do {                                             \
    absl::Status parse_status_ = (expr);           \
    if (!parse_status_.ok()) return parse_status_; \
  } while (false)
#define TANDEM_PARSE_CONCAT_INNER(a, b) a##b
#define TANDEM_PARSE_CONCAT(a, b) TANDEM_PARSE_CONCAT_INNER(a, b)
#define TANDEM_PARSE_ASSIGN(lhs, expr) \
  TANDEM_PARSE_ASSIGN_IMPL(TANDEM_PARSE_CONCAT(parse_or_, __LINE__), lhs, expr)
#define TANDEM_PARSE_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(*tmp)

namespace tandem::ir {
namespace {

// Recursive descent over the lexer's tokens with one token of lookahead.
// Owns nothing but its lexer; one parse per instance.
class Parser {
 public:
  Parser(absl::string_view text, absl::string_view filename)
      : lexer_(text), filename_(filename), current_(lexer_.Next()) {}

  absl::StatusOr<Graph> ParseGraphFile() {
    TANDEM_PARSE_ASSIGN(Graph graph, ParseGraphBlock());
    TANDEM_PARSE_TRY(ExpectEnd());
    return graph;
  }

  absl::StatusOr<TrainStep> ParseTrainStepFile();

 private:
  // ---- Tokens.
  Token Take() {
    Token token = std::move(current_);
    current_ = lexer_.Next();
    return token;
  }
  bool AtPunct(char c) const {
    return current_.kind == TokenKind::kPunct && current_.text[0] == c;
  }
  bool AtKeyword(absl::string_view word) const {
    return current_.kind == TokenKind::kIdentifier && current_.text == word;
  }

  // ---- Errors.
  absl::Status ErrorAt(const Token& token, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(filename_, ":", token.line, ":", token.column, ": error: ", what));
  }
  // An error at the current token: the lexer's message for a malformed
  // token, "expected <what>, got <token>" otherwise.
  absl::Status Expected(absl::string_view what) const {
    if (current_.kind == TokenKind::kError) return ErrorAt(current_, current_.text);
    return ErrorAt(current_, absl::StrCat("expected ", what, ", got ", DescribeToken(current_)));
  }
  // At the end of input inside a block opened by `open`: the missing '}'.
  absl::Status MissingBrace(absl::string_view block, const Token& open) const {
    return ErrorAt(current_, absl::StrCat("missing '}' to close ", block, " opened at ",
                                          open.line, ":", open.column));
  }

  absl::Status ExpectPunct(char c) {
    if (!AtPunct(c)) return Expected(absl::StrCat("'", std::string(1, c), "'"));
    Take();
    return absl::OkStatus();
  }
  absl::Status ExpectKeyword(absl::string_view word) {
    if (!AtKeyword(word)) return Expected(absl::StrCat("'", word, "'"));
    Take();
    return absl::OkStatus();
  }
  absl::Status ExpectEnd() const {
    if (current_.kind == TokenKind::kEnd) return absl::OkStatus();
    return Expected("end of input");
  }

  // ---- Terminals.
  absl::StatusOr<int64_t> ParseInteger(absl::string_view what, int64_t min, int64_t max) {
    if (current_.kind != TokenKind::kInteger) return Expected(absl::StrCat("an integer ", what));
    int64_t value = 0;
    if (!absl::SimpleAtoi(current_.text, &value) || value < min || value > max) {
      return ErrorAt(current_, absl::StrCat(what, " ", Excerpt(current_.text), " is out of range [", min,
                                            ", ", max, "]"));
    }
    Take();
    return value;
  }
  absl::StatusOr<int32_t> ParseInt32(absl::string_view what) {
    TANDEM_PARSE_ASSIGN(int64_t value, ParseInteger(what, std::numeric_limits<int32_t>::min(),
                                                    std::numeric_limits<int32_t>::max()));
    return static_cast<int32_t>(value);
  }
  bool AtDouble() const {
    return current_.kind == TokenKind::kFloat || AtKeyword("inf") || AtKeyword("nan");
  }
  // A FLOAT, inf or nan; with `allow_integer`, also an INT.
  absl::StatusOr<double> ParseDouble(absl::string_view what, bool allow_integer) {
    if (!AtDouble() && !(allow_integer && current_.kind == TokenKind::kInteger)) {
      return Expected(what);
    }
    Token token = Take();
    if (token.text == "inf") return std::numeric_limits<double>::infinity();
    if (token.text == "nan") return std::numeric_limits<double>::quiet_NaN();
    return std::strtod(token.text.c_str(), nullptr);
  }
  absl::StatusOr<std::string> ParseString(absl::string_view what) {
    if (current_.kind != TokenKind::kString) return Expected(what);
    return Take().text;
  }
  // '@' followed by an identifier or a string.
  absl::StatusOr<std::string> ParseSymbol() {
    TANDEM_PARSE_TRY(ExpectPunct('@'));
    if (current_.kind != TokenKind::kIdentifier && current_.kind != TokenKind::kString) {
      return Expected("a name after '@'");
    }
    return Take().text;
  }
  absl::StatusOr<TensorType> ParseType();

  // ---- Graphs.
  absl::StatusOr<Graph> ParseGraphBlock();
  absl::Status ParseNode(Graph* graph);
  absl::StatusOr<ValueId> ParseUse(const Graph& graph, absl::string_view context);
  absl::StatusOr<Attributes> ParseAttributes();
  absl::StatusOr<AttributeValue> ParseAttributeValue();

  // ---- Train steps.
  absl::StatusOr<StateSpec> ParseState();
  absl::StatusOr<Initializer> ParseInitializer();

  Lexer lexer_;
  std::string filename_;
  Token current_;
};

absl::StatusOr<TensorType> Parser::ParseType() {
  if (current_.kind != TokenKind::kIdentifier) return Expected("a type such as f32[2,3]");
  TensorType type;
  const Token type_token = current_;
  absl::StatusOr<DType> dtype = ParseDType(current_.text);
  if (!dtype.ok()) return ErrorAt(current_, absl::StrCat("unknown dtype '", Excerpt(current_.text), "'"));
  type.dtype = *dtype;
  Take();
  if (!AtPunct('[')) return Expected("'[' and the shape after the dtype");
  Take();
  if (AtPunct(']')) {
    Take();
    return type;
  }
  while (true) {
    TANDEM_PARSE_ASSIGN(int64_t extent,
                        ParseInteger("extent", 0, std::numeric_limits<int64_t>::max()));
    type.shape.push_back(extent);
    if (AtPunct(']')) break;
    if (!AtPunct(',')) return Expected("',' or ']' in the shape");
    Take();
  }
  Take();
  // Bounded here, before anything is sized by it.
  if (absl::Status bytes = CheckedNumBytes(type).status(); !bytes.ok()) {
    return ErrorAt(type_token, bytes.message());
  }
  return type;
}

absl::StatusOr<Graph> Parser::ParseGraphBlock() {
  TANDEM_PARSE_TRY(ExpectKeyword("graph"));
  TANDEM_PARSE_ASSIGN(std::string name, ParseSymbol());
  Graph graph(name);
  Token open = current_;
  TANDEM_PARSE_TRY(ExpectPunct('{'));
  while (true) {
    if (current_.kind == TokenKind::kValueId) {
      TANDEM_PARSE_TRY(ParseNode(&graph));
    } else if (AtKeyword("output")) {
      Take();
      TANDEM_PARSE_ASSIGN(std::string output_name, ParseString("the output's name as a string"));
      TANDEM_PARSE_TRY(ExpectPunct('='));
      TANDEM_PARSE_ASSIGN(ValueId value, ParseUse(graph, "output"));
      graph.AddOutput(std::move(output_name), value);
    } else if (AtPunct('}')) {
      Take();
      return graph;
    } else if (current_.kind == TokenKind::kEnd) {
      return MissingBrace(absl::StrCat("graph @", Excerpt(name)), open);
    } else {
      return Expected("a node '%N = ...', 'output' or '}'");
    }
  }
}

absl::StatusOr<ValueId> Parser::ParseUse(const Graph& graph, absl::string_view context) {
  if (current_.kind != TokenKind::kValueId) return Expected("a value such as %0");
  int64_t id = 0;
  if (!absl::SimpleAtoi(current_.text, &id) || id >= graph.size()) {
    return ErrorAt(current_, absl::StrCat(context, " %", Excerpt(current_.text),
                                          " is not defined before this point"));
  }
  Take();
  return static_cast<ValueId>(id);
}

absl::Status Parser::ParseNode(Graph* graph) {
  int64_t id = -1;
  if (!absl::SimpleAtoi(current_.text, &id) || id != graph->size()) {
    return ErrorAt(current_, absl::StrCat("expected value %", graph->size(), ", got %",
                                          Excerpt(current_.text), " (values are numbered 0, 1, 2, ... "
                                          "in order)"));
  }
  Take();
  TANDEM_PARSE_TRY(ExpectPunct('='));
  if (current_.kind != TokenKind::kIdentifier) return Expected("an op name");
  Token op_token = Take();
  std::optional<OpKind> op = OpFromName(op_token.text);
  if (!op.has_value()) return ErrorAt(op_token, absl::StrCat("unknown op '", Excerpt(op_token.text), "'"));
  Node node;
  node.op = *op;
  if (AtPunct('(')) {
    Take();
    while (!AtPunct(')')) {
      if (!node.operands.empty()) {
        if (!AtPunct(',')) return Expected("',' or ')' in the operand list");
        Take();
      }
      TANDEM_PARSE_ASSIGN(ValueId operand, ParseUse(*graph, "operand"));
      node.operands.push_back(operand);
    }
    Take();
  }
  if (std::string problem = OperandCountProblem(node.op, node.operands.size()); !problem.empty()) {
    return ErrorAt(op_token, absl::StrCat("op '", op_token.text, "' ", problem));
  }
  if (AtPunct('{')) {
    TANDEM_PARSE_ASSIGN(node.attributes, ParseAttributes());
  }
  if (!AtPunct(':')) return Expected("':' and the result type");
  Take();
  TANDEM_PARSE_ASSIGN(node.type, ParseType());
  if (AtKeyword("stage")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_ASSIGN(node.stage, ParseInt32("stage"));
    std::optional<Phase> phase;
    if (current_.kind == TokenKind::kIdentifier && current_.text.size() == 1) {
      phase = PhaseFromLetter(current_.text[0]);
    }
    if (!phase.has_value()) return Expected("phase F, I, W or U");
    node.phase = *phase;
    Take();
  }
  if (AtKeyword("loc")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('('));
    TANDEM_PARSE_ASSIGN(node.location.file, ParseString("the file name as a string"));
    TANDEM_PARSE_TRY(ExpectPunct(':'));
    TANDEM_PARSE_ASSIGN(node.location.line, ParseInt32("line"));
    TANDEM_PARSE_TRY(ExpectPunct(')'));
  }
  graph->Append(std::move(node));
  return absl::OkStatus();
}

absl::StatusOr<Attributes> Parser::ParseAttributes() {
  Take();  // '{'
  Attributes attributes;
  while (!AtPunct('}')) {
    if (!attributes.empty()) {
      if (!AtPunct(',')) return Expected("',' or '}' in the attribute list");
      Take();
    }
    if (current_.kind != TokenKind::kIdentifier && current_.kind != TokenKind::kString) {
      return Expected("an attribute name");
    }
    Token name = Take();
    if (attributes.Has(name.text)) {
      return ErrorAt(name, absl::StrCat("duplicate attribute '", Excerpt(name.text), "'"));
    }
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_ASSIGN(AttributeValue value, ParseAttributeValue());
    attributes.Set(name.text, std::move(value));
  }
  Take();
  return attributes;
}

absl::StatusOr<AttributeValue> Parser::ParseAttributeValue() {
  if (current_.kind == TokenKind::kInteger) {
    TANDEM_PARSE_ASSIGN(int64_t value,
                        ParseInteger("value", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()));
    return AttributeValue(value);
  }
  if (AtDouble()) {
    TANDEM_PARSE_ASSIGN(double value, ParseDouble("number", false));
    return AttributeValue(value);
  }
  if (current_.kind == TokenKind::kString) return AttributeValue(Take().text);
  if (!AtPunct('[')) return Expected("an attribute value (integer, number, string or [list])");
  Take();
  std::vector<int64_t> values;
  while (!AtPunct(']')) {
    if (!values.empty()) {
      if (!AtPunct(',')) return Expected("',' or ']' in the list");
      Take();
    }
    TANDEM_PARSE_ASSIGN(int64_t value,
                        ParseInteger("value", std::numeric_limits<int64_t>::min(),
                                     std::numeric_limits<int64_t>::max()));
    values.push_back(value);
  }
  Take();
  return AttributeValue(std::move(values));
}

absl::StatusOr<TrainStep> Parser::ParseTrainStepFile() {
  TrainStep step;
  TANDEM_PARSE_TRY(ExpectKeyword("train_step"));
  TANDEM_PARSE_ASSIGN(step.name, ParseSymbol());
  TANDEM_PARSE_TRY(ExpectKeyword("stages"));
  TANDEM_PARSE_TRY(ExpectPunct('='));
  TANDEM_PARSE_ASSIGN(int64_t num_stages, ParseInteger("number of stages", 1, kMaxStages));
  step.num_stages = static_cast<int32_t>(num_stages);
  if (AtKeyword("stage_graph")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    const Token edges_token = current_;
    TANDEM_PARSE_ASSIGN(std::string edges_text, ParseString("the stage graph as a string, e.g. \"0->2 1->2\""));
    absl::StatusOr<std::vector<StageEdge>> edges = ParseStoredStageEdges(edges_text, step.num_stages, kMaxStageEdges);
    if (!edges.ok()) return ErrorAt(edges_token, edges.status().message());
    step.stage_edges = *std::move(edges);
  }
  TANDEM_PARSE_TRY(ExpectKeyword("microbatches"));
  TANDEM_PARSE_TRY(ExpectPunct('='));
  TANDEM_PARSE_ASSIGN(step.num_microbatches, ParseInt32("number of microbatches"));
  if (AtKeyword("replicas")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_ASSIGN(step.num_replicas, ParseInt32("number of replicas"));
  }
  if (AtKeyword("update_every")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_ASSIGN(step.microbatches_per_update, ParseInt32("microbatches per update"));
  }
  if (AtKeyword("version_delays")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_TRY(ExpectPunct('['));
    while (true) {
      if (static_cast<int64_t>(step.version_delay.size()) >= step.num_stages) {
        return Expected(absl::StrCat("']' after ", step.num_stages, " version delays, one per stage"));
      }
      TANDEM_PARSE_ASSIGN(int64_t delay, ParseInteger("version delay", 0, kMaxVersionDelay));
      step.version_delay.push_back(static_cast<int32_t>(delay));
      if (AtPunct(']')) break;
      TANDEM_PARSE_TRY(ExpectPunct(','));
    }
    Take();
  }
  Token open = current_;
  TANDEM_PARSE_TRY(ExpectPunct('{'));
  std::string block = absl::StrCat("train_step @", Excerpt(step.name));
  while (AtKeyword("state")) {
    TANDEM_PARSE_ASSIGN(StateSpec spec, ParseState());
    step.state.push_back(std::move(spec));
  }
  if (current_.kind == TokenKind::kEnd) return MissingBrace(block, open);
  if (!AtKeyword("graph")) return Expected("'state' or 'graph'");
  TANDEM_PARSE_ASSIGN(step.microbatch, ParseGraphBlock());
  while (AtKeyword("accumulate")) {
    Take();
    Accumulator accumulator;
    TANDEM_PARSE_ASSIGN(accumulator.name, ParseString("the accumulator's name as a string"));
    TANDEM_PARSE_TRY(ExpectPunct('='));
    TANDEM_PARSE_ASSIGN(accumulator.source, ParseString("the summed output's name as a string"));
    step.accumulators.push_back(std::move(accumulator));
  }
  if (current_.kind == TokenKind::kEnd) return MissingBrace(block, open);
  if (!AtKeyword("graph")) return Expected("'accumulate' or 'graph'");
  TANDEM_PARSE_ASSIGN(Graph graph, ParseGraphBlock());
  if (graph.name() == "norm" && AtKeyword("graph")) {  // the norm graph (clipping), then the update
    step.norm = std::move(graph);
    TANDEM_PARSE_ASSIGN(graph, ParseGraphBlock());
  }
  step.update = std::move(graph);
  if (current_.kind == TokenKind::kEnd) return MissingBrace(block, open);
  TANDEM_PARSE_TRY(ExpectPunct('}'));
  TANDEM_PARSE_TRY(ExpectEnd());
  return step;
}

absl::StatusOr<StateSpec> Parser::ParseState() {
  Take();  // 'state'
  StateSpec spec;
  TANDEM_PARSE_ASSIGN(spec.name, ParseString("the state's name as a string"));
  TANDEM_PARSE_TRY(ExpectPunct(':'));
  TANDEM_PARSE_ASSIGN(spec.type, ParseType());
  if (AtKeyword("parameter")) {
    spec.role = StateRole::kParameter;
  } else if (AtKeyword("optimizer_state")) {
    spec.role = StateRole::kOptimizerState;
  } else if (AtKeyword("cache")) {
    spec.role = StateRole::kCache;
  } else {
    return Expected("'parameter', 'optimizer_state' or 'cache'");
  }
  Take();
  if (spec.role == StateRole::kOptimizerState && AtKeyword("of")) {
    Take();
    TANDEM_PARSE_ASSIGN(spec.parameter, ParseString("the slot's parameter as a string"));
  }
  TANDEM_PARSE_ASSIGN(spec.init, ParseInitializer());
  return spec;
}

absl::StatusOr<Initializer> Parser::ParseInitializer() {
  Initializer init;
  static constexpr std::pair<const char*, Initializer::Kind> kKinds[] = {
      {"zeros", Initializer::Kind::kZeros},
      {"ones", Initializer::Kind::kOnes},
      {"normal", Initializer::Kind::kNormal},
      {"uniform", Initializer::Kind::kUniform},
  };
  bool found = false;
  for (const auto& [name, kind] : kKinds) {
    if (AtKeyword(name)) {
      init.kind = kind;
      found = true;
    }
  }
  if (!found) {
    return Expected("an initializer: zeros, ones, normal(mean, std) or uniform(low, high)");
  }
  Token kind_token = Take();
  bool random =
      init.kind == Initializer::Kind::kNormal || init.kind == Initializer::Kind::kUniform;
  if (AtPunct('(')) {
    Take();
    TANDEM_PARSE_ASSIGN(init.a, ParseDouble("a number", true));
    TANDEM_PARSE_TRY(ExpectPunct(','));
    TANDEM_PARSE_ASSIGN(init.b, ParseDouble("a number", true));
    TANDEM_PARSE_TRY(ExpectPunct(')'));
  } else if (random) {
    return Expected(absl::StrCat("'(' and the two arguments of ", kind_token.text));
  }
  if (AtKeyword("seed")) {
    Take();
    TANDEM_PARSE_TRY(ExpectPunct('='));
    if (current_.kind != TokenKind::kInteger) return Expected("the seed, an integer");
    if (!absl::SimpleAtoi(current_.text, &init.seed) || current_.text[0] == '-') {
      return ErrorAt(current_, absl::StrCat("seed ", Excerpt(current_.text),
                                            " is not an unsigned 64-bit integer"));
    }
    Take();
  }
  return init;
}

}  // namespace

absl::StatusOr<Graph> ParseGraph(absl::string_view text, absl::string_view filename) {
  return Parser(text, filename).ParseGraphFile();
}

absl::StatusOr<TrainStep> ParseTrainStep(absl::string_view text, absl::string_view filename) {
  return Parser(text, filename).ParseTrainStepFile();
}

}  // namespace tandem::ir

#undef TANDEM_PARSE_TRY
#undef TANDEM_PARSE_CONCAT_INNER
#undef TANDEM_PARSE_CONCAT
#undef TANDEM_PARSE_ASSIGN
#undef TANDEM_PARSE_ASSIGN_IMPL

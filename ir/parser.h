// The IR's text form: parsing what printer.h prints (the grammar is there).
//
// A hand-written lexer and recursive-descent parser. It checks the syntax,
// the op names, each op's number of operands, that values are numbered
// 0, 1, 2, ... in order and that every operand and output names an earlier
// value. It does not infer or check shapes: a node keeps the type written
// for it, and Verify() judges the graph. Errors are InvalidArgument with
// "filename:line:col: error: what", pointing at the offending token
// (1-based line and column).
#ifndef TANDEM_IR_PARSER_H_
#define TANDEM_IR_PARSER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/graph.h"
#include "ir/train_step.h"

namespace tandem::ir {

// One standalone `graph @name { ... }` and nothing else.
absl::StatusOr<Graph> ParseGraph(absl::string_view text,
                                 absl::string_view filename = "<input>");

// One `train_step @name ... { ... }` and nothing else.
absl::StatusOr<TrainStep> ParseTrainStep(absl::string_view text,
                                         absl::string_view filename = "<input>");

}  // namespace tandem::ir

#endif  // TANDEM_IR_PARSER_H_

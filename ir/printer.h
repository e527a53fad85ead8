// The IR's text form: printing. parser.h reads it back.
//
// Line-oriented and MLIR-flavoured, one node per line, so that two dumps
// diff well. Printing then parsing gives back an equal Graph / TrainStep
// (every field: types, attributes, stages, phases, locations), and parsing
// then printing gives back the same text.
//
//   train_step @gpt stages=2 microbatches=4 {
//     state "wte" : f32[65,64] parameter normal(0.0, 0.02) seed=17
//     state "adam.m.wte" : f32[65,64] optimizer_state zeros
//     graph @microbatch {
//       %0 = input {name="wte", role="parameter"} : f32[65,64]
//       %3 = matmul(%1, %2) {transpose_b=1} : f32[8,64] stage=0 F loc("examples/gpt.cc":33)
//       output "loss" = %40
//       output "grad.wte.s0" = %55
//     }
//     accumulate "acc.wte.s0" = "grad.wte.s0"
//     graph @update {
//       ...
//     }
//   }
//
// Grammar (whitespace and newlines are free; `//` or `#` starts a comment
// that runs to the end of the line):
//   train_step := 'train_step' symbol 'stages' '=' INT 'microbatches' '=' INT
//                 '{' state* graph accumulate* graph '}'
//   state      := 'state' STRING ':' type ('parameter' | 'optimizer_state') init
//   init       := ('zeros' | 'ones') ['(' num ',' num ')'] ['seed' '=' INT]
//               | ('normal' | 'uniform') '(' num ',' num ')' ['seed' '=' INT]
//   accumulate := 'accumulate' STRING '=' STRING       (accumulator = source)
//   graph      := 'graph' symbol '{' (node | output)* '}'
//   node       := VALUE '=' OP ['(' [VALUE (',' VALUE)*] ')'] [attrs] ':' type
//                 ['stage' '=' INT PHASE] ['loc' '(' STRING ':' INT ')']
//   output     := 'output' STRING '=' VALUE
//   attrs      := '{' [name '=' attr (',' name '=' attr)*] '}'
//   attr       := INT | FLOAT | STRING | '[' [INT (',' INT)*] ']'
//   type       := DTYPE '[' [INT (',' INT)*] ']'          (f32[] is a scalar)
//   symbol     := '@' (IDENT | STRING);  name := IDENT | STRING
// VALUE is %N; the node defining %N must be the graph's N-th (from 0), and an
// operand must be defined before it is used. PHASE is F, I, W or U. A FLOAT
// contains '.', 'e', or is inf / -inf / nan; anything else numeric is an INT.
// Strings use \" \\ \n \t and \xHH escapes. The printer writes the operand
// list only when there are operands, attributes only when there are some,
// `stage=S P` on every node except an input at stage 0 in phase F, `loc(...)`
// only for a location other than the default (unknown) one, the
// initializer's arguments only for normal/uniform or when nonzero, and its
// seed only for normal/uniform or when nonzero. Omitted parts read back as
// those defaults.
#ifndef TANDEM_IR_PRINTER_H_
#define TANDEM_IR_PRINTER_H_

#include <string>

#include "ir/graph.h"
#include "ir/train_step.h"

namespace tandem::ir {

// A standalone `graph @name { ... }`, ending in a newline.
std::string PrintGraph(const Graph& graph);

// `train_step @name ... { ... }`, ending in a newline.
std::string PrintTrainStep(const TrainStep& step);

}  // namespace tandem::ir

#endif  // TANDEM_IR_PRINTER_H_

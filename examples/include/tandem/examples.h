// Tandem's example models and their data, for scripts that want them:
// the GPT and MLP of the CLI (tandem::examples::GptModel, MlpModel), the
// character corpus and the synthetic batches, and the ready-made example
// jobs (MakeExampleJob). Link Tandem::examples (libtandem_examples.so),
// which brings Tandem::tandem; <tandem/tandem.h> itself does not include
// these. The models are written with the public API only (ir/layers.h).
#ifndef TANDEM_EXAMPLES_H_
#define TANDEM_EXAMPLES_H_

#include "examples/data/char_corpus.h"
#include "examples/data/synthetic.h"
#include "examples/example_job.h"
#include "examples/models/gpt.h"
#include "examples/models/mlp.h"

#endif  // TANDEM_EXAMPLES_H_

// `tandem tokenize`: trains a SentencePiece BPE tokenizer on a corpus, or
// encodes a corpus into a token file that `tandem train --data FILE
// --tokenizer M.model` samples from.
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/str_format.h"
#include "examples/data/corpus.h"
#include "examples/data/token_file.h"
#include "examples/data/tokenizer.h"
#include "tools/cli/commands.h"

namespace tandem::cli {
namespace {

struct TokenizeOptions {
  bool train = false;
  std::string input;
  std::string model;
  std::string output;
  int64_t vocab = 0;
};

}  // namespace

void AddTokenizeCommand(CommandLine& command_line) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = command_line.Add(
      command_line.root(), "tokenize", "train a BPE tokenizer, or encode a text into a token file",
      "--train --input TEXT --vocab N --model M.model | --model M.model --input TEXT --output tokens.bin",
      "With --train, trains a SentencePiece BPE model of N pieces on TEXT (a UTF-8 file, or a directory of them) "
      "and writes M.model (and M.vocab beside it); the model keeps text exactly, so decoding gives it back. "
      "Without, encodes TEXT with M.model into a flat file of token ids (uint16 for vocabularies of up to 65,536 "
      "pieces, else uint32, little-endian: nanoGPT's layout), a piece of lines at a time; train on it with "
      "`tandem train --model llama --data tokens.bin --tokenizer M.model`.");
  command->add_flag("--train", options->train, "train a tokenizer instead of encoding");
  command->add_option("--input", options->input, "the text: a UTF-8 file or a directory of them")->required();
  command->add_option("--model", options->model, "the SentencePiece model (.model) to write or use")->required();
  command->add_option("--output", options->output, "the token file to write (without --train)");
  command->add_option("--vocab", options->vocab, "the pieces of the vocabulary to train (with --train)");
  command_line.OnRun(command, [command, options, &streams = command_line.streams()] {
    if (options->train) {
      if (command->count("--output") > 0) {
        return Failure(streams.err, *command, absl::InvalidArgumentError("--output goes with encoding, not --train"), 2);
      }
      if (command->count("--vocab") == 0) {
        return Failure(streams.err, *command, absl::InvalidArgumentError("--train needs --vocab N"), 2);
      }
      absl::StatusOr<std::vector<std::string>> files = examples::TextFiles(options->input);
      if (!files.ok()) return Failure(streams.err, *command, files.status());
      if (absl::Status status = examples::Tokenizer::Train(*files, options->vocab, options->model); !status.ok()) {
        return Failure(streams.err, *command, status);
      }
      streams.out << absl::StrFormat("trained a BPE tokenizer of %d pieces on %d files of %s: %s\n", options->vocab,
                                     files->size(), options->input, options->model);
      return 0;
    }
    if (options->output.empty()) {
      return Failure(streams.err, *command, absl::InvalidArgumentError("encoding needs --output FILE"), 2);
    }
    absl::StatusOr<examples::Tokenizer> tokenizer = examples::Tokenizer::Load(options->model);
    if (!tokenizer.ok()) return Failure(streams.err, *command, tokenizer.status());
    absl::StatusOr<examples::TokenizedText> counts = examples::TokenizeText(*tokenizer, options->input, options->output);
    if (!counts.ok()) return Failure(streams.err, *command, counts.status());
    streams.out << absl::StrFormat(
        "encoded %d bytes of %s into %d tokens (%.2f bytes a token) as uint%d in %s\n", counts->bytes, options->input,
        counts->tokens, counts->tokens == 0 ? 0.0 : static_cast<double>(counts->bytes) / counts->tokens,
        8 * examples::TokenFile::TokenBytes(tokenizer->vocab_size()), options->output);
    return 0;
  });
}

}  // namespace tandem::cli

// Internal to examples/data/tokenizer.cc (and its test): the SentencePiece calls the
// tokenizer makes, behind std types only. Debian's SentencePiece headers
// declare their own absl::string_view, which clashes with Abseil's, so they
// are included in sentencepiece_bridge.cc alone, which includes no Abseil.
#ifndef TANDEM_EXAMPLES_DATA_SENTENCEPIECE_BRIDGE_H_
#define TANDEM_EXAMPLES_DATA_SENTENCEPIECE_BRIDGE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::examples::spm {

class Model;  // a loaded SentencePieceProcessor; immutable

// Each returns "" on success, else the library's message.
// `serialized` is a model file's bytes, checked first
// (sentencepiece_model_check.h): the library trusts its tables.
std::string LoadSerialized(std::string_view serialized, std::shared_ptr<const Model>* model);
int PieceCount(const Model& model);
std::string Encode(const Model& model, std::string_view text, std::vector<int>* ids);
std::string Decode(const Model& model, const std::vector<int>& ids, std::string* text);
// SentencePieceTrainer::Train with its command-line style arguments.
std::string Train(const std::string& arguments);

}  // namespace tandem::examples::spm

#endif  // TANDEM_EXAMPLES_DATA_SENTENCEPIECE_BRIDGE_H_

// No Abseil header may come into this file (sentencepiece_bridge.h says why).
#include "examples/data/sentencepiece_bridge.h"

#include "sentencepiece_processor.h"
#include "sentencepiece_trainer.h"

namespace tandem::examples::spm {

class Model {
 public:
  sentencepiece::SentencePieceProcessor processor;
};

std::string LoadSerialized(std::string_view serialized, std::shared_ptr<const Model>* model) {
  auto loaded = std::make_shared<Model>();
  const sentencepiece::util::Status status = loaded->processor.LoadFromSerializedProto(serialized);
  if (!status.ok()) return status.ToString();
  *model = std::move(loaded);
  return "";
}

int PieceCount(const Model& model) { return model.processor.GetPieceSize(); }

std::string Encode(const Model& model, std::string_view text, std::vector<int>* ids) {
  const sentencepiece::util::Status status = model.processor.Encode(text, ids);
  return status.ok() ? "" : status.ToString();
}

std::string Decode(const Model& model, const std::vector<int>& ids, std::string* text) {
  const sentencepiece::util::Status status = model.processor.Decode(ids, text);
  return status.ok() ? "" : status.ToString();
}

std::string Train(const std::string& arguments) {
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(arguments);
  return status.ok() ? "" : status.ToString();
}

}  // namespace tandem::examples::spm

#include "ir/graph_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "ir/limits.h"
#include "ir/shape_rules.h"

namespace tandem::ir {

ValueId GraphBuilder::Add(OpKind op, std::vector<ValueId> operands, Attributes attributes,
                          const SourceLocation& location) {
  std::vector<TensorType> types;
  types.reserve(operands.size());
  for (ValueId operand : operands) {
    if (operand == kInvalidValue) return kInvalidValue;
    types.push_back(graph_->type(operand));
  }
  absl::StatusOr<TensorType> type = InferResultType(op, types, attributes);
  if (type.ok()) {
    if (absl::Status bytes = CheckedNumBytes(*type).status(); !bytes.ok()) {
      type = absl::InvalidArgumentError(absl::StrCat(OpName(op), ": ", bytes.message()));
    }
  }
  if (type.ok() && phase_ == Phase::kForward) {
    for (ValueId operand : operands) {
      if (absl::Status read = CheckStageRead(op, operand); !read.ok()) {
        type = read;
        break;
      }
    }
  }
  if (!type.ok()) {
    Fail(location_override_ ? *location_override_ : location, type.status().message());
    return kInvalidValue;
  }
  return Append(op, std::move(operands), std::move(attributes), *std::move(type), location);
}

ValueId GraphBuilder::AddInput(const std::string& name, const std::string& role, TensorType type,
                               const SourceLocation& location) {
  if (absl::Status bytes = CheckedNumBytes(type).status(); !bytes.ok()) {
    Fail(location_override_ ? *location_override_ : location, absl::StrCat(role, " '", name, "': ", bytes.message()));
    return kInvalidValue;
  }
  return Append(OpKind::kInput, {}, Attributes{{"name", name}, {"role", role}}, std::move(type),
                location);
}

ValueId GraphBuilder::AddConstant(double value, TensorType type, const SourceLocation& location) {
  return Append(OpKind::kConstant, {}, Attributes{{"value", value}}, std::move(type), location);
}

int32_t GraphBuilder::OpenStage(std::vector<int32_t> predecessors) {
  std::sort(predecessors.begin(), predecessors.end());
  predecessors.erase(std::unique(predecessors.begin(), predecessors.end()), predecessors.end());
  predecessors_.push_back(std::move(predecessors));
  const int32_t from = stage_;
  stage_ = num_stages() - 1;
  // A stage opened inside a branch belongs to it until told otherwise.
  if (from >= 0 && static_cast<size_t>(from) < stage_labels_.size()) set_stage_label(stage_, stage_labels_[from]);
  return stage_;
}

void GraphBuilder::SetPredecessors(std::vector<int32_t> predecessors) {
  std::sort(predecessors.begin(), predecessors.end());
  predecessors.erase(std::unique(predecessors.begin(), predecessors.end()), predecessors.end());
  predecessors_.at(stage_) = std::move(predecessors);
}

bool GraphBuilder::StageHasOps(int32_t stage) const {
  return stage >= 0 && stage < static_cast<int32_t>(ops_.size()) && ops_[stage] > 0;
}

void GraphBuilder::set_stage_label(int32_t stage, std::string label) {
  if (stage < 0) return;
  if (static_cast<size_t>(stage) >= stage_labels_.size()) stage_labels_.resize(stage + 1);
  stage_labels_[stage] = std::move(label);
}

std::string GraphBuilder::StageName(int32_t stage) const {
  const bool labelled = stage >= 0 && static_cast<size_t>(stage) < stage_labels_.size() &&
                        !stage_labels_[stage].empty();
  return labelled ? absl::StrCat("stage ", stage, " (", stage_labels_[stage], ")") : absl::StrCat("stage ", stage);
}

absl::Status GraphBuilder::CheckStageRead(OpKind op, ValueId operand) {
  const Node& producer = graph_->node(operand);
  const int32_t from = producer.stage;
  if (producer.op == OpKind::kInput || producer.op == OpKind::kConstant || producer.phase != Phase::kForward ||
      from == stage_ || from < 0 || stage_ < 0 || from >= num_stages() || stage_ >= num_stages() ||
      stage_graph().Reaches(from, stage_)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      OpName(op), " in ", StageName(stage_), " reads a value of ", StageName(from), " (from ",
      producer.location.ToString(), "), but ", StageName(from), " does not feed ", StageName(stage_),
      ": a stage reads only values of the stages before it on a path of the stage graph (branches that "
      "run side by side see each other's values only after they merge)"));
}

void GraphBuilder::Fail(const SourceLocation& location, absl::string_view message) {
  if (!status_.ok()) return;
  status_ = absl::InvalidArgumentError(absl::StrCat(location.ToString(), ": ", message));
}

ValueId GraphBuilder::Append(OpKind op, std::vector<ValueId> operands, Attributes attributes,
                             TensorType type, const SourceLocation& location) {
  Node node;
  node.op = op;
  node.operands = std::move(operands);
  node.attributes = std::move(attributes);
  node.type = std::move(type);
  node.stage = stage_;
  node.phase = phase_;
  if (op != OpKind::kInput && op != OpKind::kConstant && stage_ >= 0 && stage_ < kMaxStages) {
    if (static_cast<size_t>(stage_) >= ops_.size()) ops_.resize(stage_ + 1, 0);
    ++ops_[stage_];
  }
  node.location = location_override_ ? *location_override_ : location;
  return graph_->Append(std::move(node));
}

}  // namespace tandem::ir

#include "schedules/schedule.h"

#include "absl/strings/str_cat.h"

namespace tandem::schedules {

char TaskKindLetter(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return 'F';
    case TaskKind::kBackward: return 'B';
    case TaskKind::kBackwardInput: return 'I';
    case TaskKind::kBackwardWeight: return 'W';
  }
  return '?';
}

std::string TaskName(const Task& task) {
  return absl::StrCat(std::string(1, TaskKindLetter(task.kind)), task.stage.value, ".",
                      task.microbatch.value);
}

std::string SlotName(const Slot& slot) {
  if (slot.tasks.size() == 1) return TaskName(slot.tasks[0]);
  std::string text = "(";
  for (size_t i = 0; i < slot.tasks.size(); ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ";", TaskName(slot.tasks[i]));
  }
  text += ")";
  return text;
}

bool Schedule::SplitsBackward() const {
  for (const auto& program : programs) {
    for (const Slot& slot : program) {
      for (const Task& task : slot.tasks) {
        if (task.kind == TaskKind::kBackwardInput || task.kind == TaskKind::kBackwardWeight) {
          return true;
        }
      }
    }
  }
  return false;
}

int64_t Schedule::NumTasks() const {
  int64_t n = 0;
  for (const auto& program : programs) {
    for (const Slot& slot : program) n += static_cast<int64_t>(slot.tasks.size());
  }
  return n;
}

}  // namespace tandem::schedules

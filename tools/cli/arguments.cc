#include "tools/cli/arguments.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::cli {

void Arguments::AddOption(std::string name, std::string help,
                          std::optional<std::string> default_value) {
  declaration_order_.push_back(name);
  specs_[std::move(name)] = Spec{std::move(help), true, std::move(default_value)};
}

void Arguments::AddFlag(std::string name, std::string help) {
  declaration_order_.push_back(name);
  specs_[std::move(name)] = Spec{std::move(help), false, std::nullopt};
}

absl::Status Arguments::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    auto spec = specs_.find(name);
    if (spec == specs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    }
    if (values_.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("option --", name, " given twice"));
    }
    if (!spec->second.takes_value) {
      if (inline_value) {
        return absl::InvalidArgumentError(absl::StrCat("option --", name, " takes no value"));
      }
      values_[name] = "";
      continue;
    }
    if (inline_value) {
      values_[name] = *inline_value;
    } else if (i + 1 < args.size()) {
      values_[name] = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("option --", name, " needs a value"));
    }
  }
  return absl::OkStatus();
}

bool Arguments::Has(const std::string& name) const { return values_.count(name) > 0; }

std::optional<std::string> Arguments::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end()) return it->second.default_value;
  return std::nullopt;
}

absl::StatusOr<std::string> Arguments::Require(const std::string& name) const {
  std::optional<std::string> value = Get(name);
  if (!value) return absl::InvalidArgumentError(absl::StrCat("missing required option --", name));
  return *value;
}

absl::StatusOr<int64_t> Arguments::GetInt(const std::string& name) const {
  absl::StatusOr<std::string> text = Require(name);
  if (!text.ok()) return text.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("option --", name, " needs an integer, got '", *text, "'"));
  }
  return value;
}

std::string Arguments::Usage() const {
  std::string usage;
  for (const std::string& name : declaration_order_) {
    const Spec& spec = specs_.at(name);
    std::string left = absl::StrCat("--", name, spec.takes_value ? " VALUE" : "");
    absl::StrAppendFormat(&usage, "  %-26s %s", left, spec.help);
    if (spec.default_value) absl::StrAppend(&usage, " (default: ", *spec.default_value, ")");
    absl::StrAppend(&usage, "\n");
  }
  return usage;
}

}  // namespace tandem::cli

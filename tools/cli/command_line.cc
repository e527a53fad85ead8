#include "tools/cli/command_line.h"

#include <ostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::cli {
namespace {

// `text` with its words on lines of at most `width` characters.
std::string Wrap(const std::string& text, size_t width) {
  std::string wrapped;
  size_t line = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line > 0 && line + 1 + word.size() > width) {
      wrapped += "\n";
      line = 0;
    } else if (line > 0) {
      wrapped += " ";
      ++line;
    }
    absl::StrAppend(&wrapped, word);
    line += word.size();
  }
  return wrapped;
}

// CLI11's help layout with Tandem's usage line ("usage: tandem sched gen
// NAME --actors P ...") and a description paragraph apart from the summary
// that the parent's subcommand list shows.
class Formatter : public CLI::Formatter {
 public:
  struct Text {
    std::string synopsis;
    std::string description;
  };
  void Set(const CLI::App* app, Text text) { texts_[app] = std::move(text); }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    return absl::StrCat(make_usage(app, name), make_description(app), make_positionals(app), make_groups(app, mode),
                        make_subcommands(app, mode), "\n", make_footer(app));
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto it = texts_.find(app);
    const std::string synopsis = it != texts_.end() ? it->second.synopsis : "[options]";
    return absl::StrCat("usage: ", name, " ", synopsis, "\n");
  }
  std::string make_description(const CLI::App* app) const override {
    auto it = texts_.find(app);
    const std::string& text =
        it != texts_.end() && !it->second.description.empty() ? it->second.description : app->get_description();
    return text.empty() ? "" : absl::StrCat("\n", Wrap(text, 100), "\n");
  }

 private:
  std::map<const CLI::App*, Text> texts_;
};

// The command the parse got to: the last subcommand named, or the root.
const CLI::App& Deepest(const CLI::App& root) {
  const CLI::App* app = &root;
  while (true) {
    std::vector<CLI::App*> named = app->get_subcommands();
    if (named.empty()) return *app;
    app = named.front();
  }
}

}  // namespace

CommandLine::CommandLine(CommandStreams streams)
    : streams_(streams),
      root_(std::make_unique<CLI::App>("Tandem: pipeline-parallel training with one controller and one actor per "
                                       "device.",
                                       "tandem")) {
  auto formatter = std::make_shared<Formatter>();
  formatter->column_width(34);
  formatter->Set(root_.get(), {"<command> [options]", ""});
  root_->formatter(formatter);
  root_->require_subcommand(1);
  root_->footer("Run `tandem <command> --help` for the options of one.\n");
}

CLI::App* CommandLine::Add(CLI::App& parent, const std::string& name, const std::string& summary,
                           const std::string& synopsis, const std::string& description) {
  CLI::App* command = parent.add_subcommand(name, summary);
  command->footer("");
  std::static_pointer_cast<Formatter>(root_->get_formatter())->Set(command, {synopsis, description});
  return command;
}

CLI::App* CommandLine::AddGroup(CLI::App& parent, const std::string& name, const std::string& summary,
                                const std::string& description) {
  CLI::App* group = Add(parent, name, summary, "<subcommand> [options]", description);
  group->require_subcommand(1);
  group->footer(absl::StrCat("Run `", CommandPath(*group), " <subcommand> --help` for the options of one.\n"));
  return group;
}

void CommandLine::OnRun(CLI::App* command, std::function<int()> body) {
  command->callback([this, body = std::move(body)] { exit_code_ = body(); });
}

int CommandLine::Run(const std::vector<std::string>& args) {
  if (args.empty()) {
    streams_.err << root_->help();
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    root_->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    streams_.out << root_->help();  // the help of the command named last
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    streams_.out << root_->help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& error) {
    const CLI::App& command = Deepest(*root_);
    std::string message = error.what();
    // A command that needs a subcommand and got a word it does not know.
    const std::vector<std::string> rest = command.remaining();
    if (command.get_require_subcommand_min() > 0 && !rest.empty() && !rest.front().starts_with("-")) {
      message = absl::StrCat("unknown subcommand '", rest.front(), "'");
    }
    return UsageError(streams_.err, command, message);
  }
  return exit_code_;
}

std::string CommandPath(const CLI::App& command) {
  const CLI::App* parent = command.get_parent();
  return parent == nullptr ? command.get_name() : absl::StrCat(CommandPath(*parent), " ", command.get_name());
}

int UsageError(std::ostream& err, const CLI::App& command, const std::string& message) {
  const std::string path = CommandPath(command);
  err << path << ": " << message << "\nRun `" << path << " --help` for usage.\n";
  return 2;
}

int Failure(std::ostream& err, const CLI::App& command, const absl::Status& status, int exit_code) {
  err << CommandPath(command) << ": " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
  return exit_code;
}

}  // namespace tandem::cli

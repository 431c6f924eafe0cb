// Reading berth's command line around CLI11 (cli/arguments.h).
#include "cli/arguments.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "common/strings.h"

namespace berth::cli {
namespace {

// An option of `app` named by `arg` ("-n", "--name", "--name=x", "-nx", "-it"): the option, and
// whether its value is the next argument. Null for an unknown one.
const CLI::Option* OptionOf(const CLI::App& app, const std::string& arg, bool* value_follows) {
  *value_follows = false;
  const size_t eq = arg.find('=');
  const std::string name = arg.substr(0, eq);
  const CLI::Option* opt = app.get_option_no_throw(name);
  if (opt == nullptr && arg.size() > 2 && arg[1] != '-') {
    opt = app.get_option_no_throw(arg.substr(0, 2));  // -it (flags together) or -nNAME
    return opt;
  }
  if (opt != nullptr && eq == std::string::npos) *value_follows = opt->get_items_expected_min() > 0;
  return opt;
}

std::vector<std::string> NamesOf(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> OptionNamesOf(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

std::string DidYouMean(const std::string& word, const std::vector<std::string>& choices) {
  const std::string nearest = Nearest(word, choices);
  return nearest.empty() ? "" : " (did you mean " + nearest + "?)";
}

int Usage(const std::string& command, const std::string& message) {
  std::cerr << "berth" << (command.empty() ? "" : " " + command) << ": " << message << "\n";
  return 2;
}

}  // namespace

bool LooksLikeTaskFile(const std::string& arg) {
  auto ends = [&](std::string_view suffix) {
    return arg.size() >= suffix.size() &&
           arg.compare(arg.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::error_code ec;
  return ends(".yaml") || ends(".yml") ||
         (std::filesystem::is_regular_file(arg, ec) && arg.find(' ') == std::string::npos);
}

std::string Nearest(const std::string& word, const std::vector<std::string>& choices) {
  // Options are compared without their dashes ("-a" is nearest "--all", not "-h"); a name the
  // word begins comes first.
  auto bare = [](const std::string& s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string w = bare(word);
  std::string best;
  size_t best_distance = 4;
  for (const std::string& c : choices) {
    const std::string b = bare(c);
    const size_t d = !w.empty() && b.starts_with(w) ? 0 : EditDistance(w, b) + 1;
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> MarkExecCommand(const CLI::App& exec, std::vector<std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return args;
    if (arg.size() > 1 && arg[0] == '-') {
      bool value_follows = false;
      OptionOf(exec, arg, &value_follows);
      if (value_follows) ++i;
      continue;
    }
    if (LooksLikeTaskFile(arg)) return args;  // a task file: berth's options may follow it
    args.insert(args.begin() + static_cast<std::ptrdiff_t>(i), "--");
    return args;
  }
  return args;
}

size_t SubcommandIndex(const CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return args.size();
    if (arg.size() > 1 && arg[0] == '-') {
      bool value_follows = false;
      OptionOf(app, arg, &value_follows);
      if (value_follows) ++i;
      continue;
    }
    return i;
  }
  return args.size();
}

int ParseFailure(const CLI::App& app, const std::vector<std::string>& args,
                 const CLI::ParseError& e) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  // The deepest command the words name, and where its own arguments begin.
  const CLI::App* command = &app;
  std::string path;
  size_t from = 0;
  while (true) {
    std::vector<std::string> rest(args.begin() + static_cast<std::ptrdiff_t>(from), args.end());
    const size_t at = SubcommandIndex(*command, rest);
    const std::vector<std::string> names = NamesOf(*command);
    if (names.empty()) break;
    if (at == rest.size()) {
      return Usage(path, "say which command (" + (path.empty() ? "berth" : "berth " + path) +
                             " --help lists them)");
    }
    const std::vector<const CLI::App*> found =
        command->get_subcommands([&](const CLI::App* sub) { return sub->get_name() == rest[at]; });
    const CLI::App* sub = found.empty() ? nullptr : found.front();
    if (sub == nullptr) {
      return Usage(path, "unknown command '" + rest[at] + "'" + DidYouMean(rest[at], names) + "; " +
                             (path.empty() ? "berth" : "berth " + path) + " --help lists them");
    }
    command = sub;
    path += (path.empty() ? "" : " ") + sub->get_name();
    from += at + 1;
  }
  // An option the command does not know, before any "--".
  for (size_t i = from; i < args.size() && args[i] != "--"; ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') continue;
    bool value_follows = false;
    if (OptionOf(*command, arg, &value_follows) == nullptr) {
      const std::string name = arg.substr(0, arg.find('='));
      return Usage(path, "unknown option " + name + DidYouMean(name, OptionNamesOf(*command)) +
                             "; berth " + path + " --help lists them");
    }
    if (value_follows) ++i;
  }
  std::string message = e.what();
  if (const auto* conversion = dynamic_cast<const CLI::ConversionError*>(&e)) {
    // "Could not convert: ids = abc"
    const std::string what = conversion->what();
    const size_t colon = what.find(": ");
    const size_t equals = what.find(" = ");
    if (colon != std::string::npos && equals != std::string::npos && equals > colon) {
      message = fmt::format("'{}' is not a valid value of {}", what.substr(equals + 3),
                            what.substr(colon + 2, equals - colon - 2));
    }
  } else if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    message = "unexpected arguments: " + message.substr(message.find(':') + 1);
  }
  if (!message.empty()) message[0] = static_cast<char>(std::tolower(message[0]));
  return Usage(path, message + "; berth " + path + " --help says how it is used");
}

}  // namespace berth::cli

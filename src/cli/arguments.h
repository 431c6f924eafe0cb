// How `berth`'s command line is read around CLI11: the command of `berth exec` is everything from
// its first word on (never berth's options), and every usage error is said one way — the command,
// what was wrong, the nearest known name — with exit status 2.
//
// Thread-safety: none needed (pure functions of their arguments, run on the CLI's one thread).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace berth::cli {

// `exec`'s arguments (those after the word "exec") with "--" put before the first word of a command
// that is not a task file, so that what follows is the command's own (`berth exec python3 train.py
// -n 3`, as `docker run IMAGE CMD ARGS` and `srun CMD ARGS` read). A task file may be followed by
// berth's options (`berth exec task.yaml -d`), and arguments that have their "--" already are left
// alone.
std::vector<std::string> MarkExecCommand(const CLI::App& exec, std::vector<std::string> args);

// The index in `args` (argv without the program's name) of the word that names the subcommand of
// `app`, skipping `app`'s own options and their values; args.size() when there is none.
size_t SubcommandIndex(const CLI::App& app, const std::vector<std::string>& args);

// Prints a usage error `e` of `app` (parsed from `args`) as "berth CMD: what was wrong" with the
// nearest known name where one was misspelled, and answers 2; help and --version are printed as
// CLI11 prints them (0).
int ParseFailure(const CLI::App& app, const std::vector<std::string>& args,
                 const CLI::ParseError& e);

// Whether an argument of `berth exec` names a task file rather than a command: a .yaml or .yml, or
// a file here (without a space in its name).
bool LooksLikeTaskFile(const std::string& arg);

// Of `choices`, the one nearest `word` (at most two edits away, or that it begins), or "".
std::string Nearest(const std::string& word, const std::vector<std::string>& choices);

}  // namespace berth::cli

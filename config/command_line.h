// `dtlaunch [options] program [args...]`: torchrun's flags (`_` and `-` spellings) and their PET_*
// variables, parsed into LaunchOptions through the table in config/flags.h. The environment and
// the disk are passed in so tests need neither setenv nor files.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "config/files.h"
#include "config/flags.h"
#include "config/launch_options.h"

namespace dtl::config {

using dtl::EnvLookup;
using dtl::process_env;

/// A command line that parsed: a launch, or text to print before exiting with 0.
struct Parsed {
  std::optional<LaunchOptions> options;  ///< set when a launch should happen
  std::string output;                    ///< otherwise: help, version or the settings, for stdout (exit 0)
  std::vector<std::string> warnings;     ///< one line each, for stderr, without "warning: "
  std::optional<LaunchOptions> shown;    ///< with --print_config: the settings printed
};
/// What parse_command_line answers: Parsed, or bad input (exit code 2, one line).
using ParseResult = Result<Parsed>;

/// One option of dtlaunch's command line as --help shows it, for the man page and completion.
struct OptionDoc {
  std::vector<std::string> spellings;  ///< "-r", "--redirects"
  bool takes_value = false;
  std::string group;  ///< the --help section
  std::string help;
  std::vector<std::string> choices;  ///< the words the value may be; empty: any
  bool names_path = false;           ///< the value is a file or folder
};

/// Every option --help lists, in its order.
std::vector<OptionDoc> option_docs();

/// accelerate's spelling: `dtlaunch launch ARGS` is `dtlaunch ARGS`, with accelerate's meanings.
inline constexpr const char* kLaunchWord = "launch";
/// `dtlaunch torch.distributed.launch ARGS` and `dtlaunch deepspeed ARGS`: those launchers' conventions
/// (the `--local-rank=N` argument, deepspeed's variables, every worker sees every GPU).
inline constexpr const char* kDistributedLaunchWord = "torch.distributed.launch";
inline constexpr const char* kDeepspeedWord = "deepspeed";

/// Parses the arguments after argv[0], with the config file in effect (--config_file,
/// $DTLAUNCH_CONFIG_FILE or the default one) read through `files`. Precedence, for every setting:
/// flag > PET_*/DTLAUNCH_*/accelerate's variable > config file > default, and each setting's Source
/// says which gave it. `--print_config` answers with the settings and their sources.
ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env,
                               const ReadFile& files);
/// The same, with the real disk.
ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env);

/// An option of its own that a command takes beside some of the settings (rdzv-server's --host).
struct CommandOption {
  std::string names;  ///< "--host", or spellings joined by ','
  std::string help;
  std::optional<std::string> value;  ///< set by parse_command_settings when given (the last one)
};

/// The line of a command other than the launch (`dtlaunch rdzv-server`): settings `rows` read as
/// dtlaunch reads them (spellings, variables, config file, errors and each setting's Source; the
/// others keep their defaults), with the command's own `defaults` for some, plus the options `own`,
/// and no program. `command` names it in help and errors ("dtlaunch rdzv-server").
ParseResult parse_command_settings(const std::string& command, const std::string& description,
                                   const std::vector<Setting>& rows, const std::map<Setting, const char*>& defaults,
                                   std::vector<CommandOption>& own, const std::vector<std::string>& args,
                                   const EnvLookup& env, const ReadFile& files);

}  // namespace dtl::config

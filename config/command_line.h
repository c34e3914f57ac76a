// `dtlaunch [options] program [args...]`: torchrun's flags (`_` and `-` spellings) and their PET_*
// variables, parsed into LaunchOptions. The environment is passed in so tests need no setenv.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/files.h"
#include "config/launch_options.h"

namespace dtl::config {

/// Looks up an environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The process environment, for the real binary.
EnvLookup process_env();

struct ParseResult {
  ParseResult() = default;
  ParseResult(std::optional<LaunchOptions> o, int code, std::string out)
      : options(std::move(o)), exit_code(code), output(std::move(out)) {}

  std::optional<LaunchOptions> options;  ///< set when a launch should happen
  int exit_code = 0;                     ///< otherwise: exit with this code ...
  std::string output;                    ///< ... after printing this (help, version or one error line)
  std::vector<std::string> warnings;     ///< one line each, for stderr, without "warning: "
  std::optional<LaunchOptions> shown;    ///< with --print_config: the settings printed
};

/// Parses the arguments after argv[0], with the config file in effect (--config_file,
/// $DTLAUNCH_CONFIG_FILE or the default one) read through `files`. Precedence, for every setting:
/// flag > PET_*/DTLAUNCH_* variable > config file > default. `--print_config` answers with the
/// settings and their sources. Errors come back as one line starting "dtlaunch: error: ".
ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env,
                               const ReadFile& files);
/// The same, with the real disk.
ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env);

/// Pure value parsers, exposed for their own tests; each throws std::invalid_argument with the reason.
NprocSpec parse_nproc(const std::string& text);
StreamsSpec parse_streams(const std::string& text);
std::set<int> parse_rank_list(const std::string& text);
std::vector<int> parse_signal_list(const std::string& text);
std::vector<int> parse_gpu_ids(const std::string& text);
/// `--nnodes`: N or MIN:MAX with 0 < MIN <= MAX.
std::pair<int, int> parse_nnodes(const std::string& text);
RdzvConf parse_rdzv_conf(const std::string& text);

}  // namespace dtl::config

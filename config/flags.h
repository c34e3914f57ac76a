// dtlaunch's settings as one table: a row per setting, with its spellings, the variables that stand
// in for it, its config-file keys, how its text parses into LaunchOptions, its default and its help.
// The command line, the PET_* fallback, the config files, --print_config, the wizard, --help and
// docs/cli.md's flag table all read this table; a new setting is one row.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/launch_options.h"

namespace dtl::config {

/// How a config file writes the value.
enum class Type {
  text,        ///< one scalar
  switch_,     ///< a flag without a value; a YAML boolean in files
  list,        ///< "0,2" or a YAML list
  text_or_no,  ///< a scalar where YAML's unquoted `no` (false) means the word "no"
};

struct Flag {
  Setting id;
  const char* name;              ///< `--name`, `--name-with-dashes`, PET_NAME, and the config file's key
  const char* short_name = "";   ///< "-r", or ""
  std::vector<const char*> variables = {};  ///< looked up after PET_NAME, in order
  const char* accelerate_key = "";          ///< accelerate's name for the setting, or ""
  bool accelerate_as_is = false;  ///< accelerate's key holds the value as is (else config_file.cc maps it)
  Type type = Type::text;
  const char* default_value = "";  ///< the text a flag would give; "" is unset
  const char* default_shown = "";  ///< what an unset default means, for --help and docs/cli.md, or ""
  const char* group = "";          ///< the --help section
  const char* help = "";           ///< one line; `code` in backquotes
  std::vector<const char*> choices = {};  ///< the words the value may be (completion offers them)
  bool names_path = false;                ///< the value is a file or folder (completion offers paths)
  /// Parses the text into `o`; throws std::invalid_argument with the reason ("expected ...").
  void (*apply)(const std::string& text, LaunchOptions& o) = nullptr;
  /// accelerate launch's spelling of this setting when it differs (`num_processes`), or "". Given in
  /// that spelling, the value has accelerate's meaning (command_line.cc converts it).
  const char* accelerate_flag = "";
  /// accelerate's own setting: the text, as given, goes to LaunchOptions::accelerate.values.
  bool accelerate_only = false;
  /// A secret: its variables are kept from the workers' environment.
  bool secret = false;
  /// Other tools' names of the same setting with the same meaning (deepspeed's `num_gpus`).
  std::vector<const char*> aliases = {};
  /// accelerate's rows: the variable accelerate launch gives the workers for this setting, or "".
  /// For these rows `default_shown` is the value the workers get when the setting is unset.
  const char* worker_variable = "";
};

/// The table, one row per Setting, in Setting order.
const std::vector<Flag>& flags();
const Flag& flag(Setting id);
/// The row named `name` ("nproc_per_node"), or nullptr.
const Flag* find_flag(const std::string& name);

/// "--nproc_per_node" and "--nproc-per-node" (one when the name has no `_`).
std::vector<std::string> long_spellings(const Flag& f);
/// PET_NAME, then the row's own variables.
std::vector<std::string> variable_names(const Flag& f);
/// The variables of every secret setting (PET_RDZV_TOKEN, DTLAUNCH_RDZV_TOKEN): dtlaunch reads
/// them, its workers never see them.
std::vector<std::string> secret_variables();
/// accelerate launch's flags that dtlaunch refuses, and why, for "--flag": "" when dtlaunch knows
/// no such accelerate flag.
std::string refused_accelerate_flag(const std::string& flag);
/// The row's help, led by its worker variable when it has one ("`FSDP_VERSION`; ...").
std::string help_text(const Flag& f);
/// The --help sections, in order.
std::vector<std::string> help_groups();
/// docs/cli.md's flag tables, one per --help section (flag | default | meaning).
std::string flags_markdown();

/// Pure value parsers, for the table and their own tests; each throws std::invalid_argument with
/// the reason.
/// A switch's text: 1/true/True/yes, or 0/false/False/no/empty.
bool parse_bool(const std::string& text);
NprocSpec parse_nproc(const std::string& text);
StreamsSpec parse_streams(const std::string& text);
std::set<int> parse_rank_list(const std::string& text);
std::vector<int> parse_signal_list(const std::string& text);
std::vector<int> parse_gpu_ids(const std::string& text);
/// `--nnodes`: N or MIN:MAX with 0 < MIN <= MAX.
std::pair<int, int> parse_nnodes(const std::string& text);
/// `--rdzv_conf`'s `k=v,k=v` items, trimmed; throws on an item without a key or a value.
std::vector<std::pair<std::string, std::string>> parse_rdzv_items(const std::string& text);
/// The items with torch's meaning for the backend in use (static or c10d). A key torch ignores is
/// ignored here too and named in `ignored` ("'foo' (why)"), when given.
RdzvConf parse_rdzv_conf(const std::string& text, bool static_backend = false,
                         std::vector<std::string>* ignored = nullptr);

}  // namespace dtl::config

// Config files: dtlaunch's own YAML, whose keys are the flag table's names, and accelerate's, read as
// accelerate writes them. Both become flag values that carry their file location, so that
// parse_command_line merges them with flags and variables by one rule.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/command_line.h"
#include "config/files.h"

namespace dtl::config {

/// The longest value a file may give a setting or a variable (a path is at most 4096): longer is an
/// error that names the key, rather than a surprise in the workers or in --print_config.
inline constexpr size_t kMaxValueBytes = 16 << 10;

/// One setting from a file, as the flag of the same name would take it.
struct FileValue {
  std::string value;
  std::string where;  ///< "cfg.yaml:4:17: nproc_per_node": the location and the key as written
  std::string note;   ///< how accelerate's keys became this value, for --print_config
};

struct ConfigFile {
  enum class Format { dtlaunch, accelerate };
  Format format = Format::dtlaunch;
  std::string path;
  std::map<std::string, FileValue> values;             ///< by flag name
  std::vector<std::pair<std::string, FileValue>> env;  ///< the `env:` section, in file order
  std::vector<std::string> warnings;                   ///< one line each, without "warning: "
  // accelerate's files only:
  std::vector<std::string> deepspeed_fields;  ///< deepspeed_config's keys, for ACCELERATE_CONFIG_DS_FIELDS
  bool use_cpu = false;                       ///< the use_cpu key itself (MULTI_CPU alone does not set it)
};

/// The note of fp8_config's override_linear_precision given as a string, which accelerate reads
/// character by character.
inline constexpr const char* kOverrideCharacters = "a string: accelerate takes its first three characters";

/// Files with `distributed_type` or `compute_environment` are accelerate's; the others dtlaunch's,
/// whose keys are the rows of the flag table (config/flags.h) and `env`. An error is one line:
/// "cfg.yaml:3:5: key: expected ..., got ...".
Result<ConfigFile> parse_config(const std::string& text, const std::string& path);

/// Which file is in effect, and what chose it ("--config_file", "DTLAUNCH_CONFIG_FILE", "default").
struct ConfigLocation {
  std::string path;
  std::string chosen_by;
};

/// $XDG_CONFIG_HOME/dtlaunch/default_config.yaml, else ~/.config/dtlaunch/...; "" with neither set.
std::string default_config_path(const EnvLookup& env);

/// --config_file, else $DTLAUNCH_CONFIG_FILE, else the default path. An empty value means no file.
std::optional<ConfigLocation> locate_config(const std::optional<std::string>& flag, const EnvLookup& env);

/// Reads and parses the file; a default file that does not exist is no file (std::nullopt), a named
/// one is an error.
Result<std::optional<ConfigFile>> load_config(const std::optional<ConfigLocation>& where, const ReadFile& files);

/// The candidate nearest to `word` by edit distance (`-` and `_` alike), or "" when none is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

/// `text` as a YAML scalar that reads back as the same string (quoted only when it must be).
std::string yaml_scalar(const std::string& text);

/// A line of --print_config.
struct EffectiveSetting {
  std::string name;
  std::string value;   ///< as the flag holds it; switches "1"/"0"
  std::string source;  ///< "--nproc_per_node", "PET_NPROC_PER_NODE", "cfg.yaml:3:17: ...", "default"
  bool is_switch = false;
  std::string comment;  ///< a line above the setting ("accelerate: --num_processes, ..."), or ""
};

/// The settings as a dtlaunch config file, each with where it came from as a comment.
std::string format_settings(const std::string& header, const std::vector<EffectiveSetting>& settings,
                            const std::vector<EffectiveSetting>& env);

}  // namespace dtl::config

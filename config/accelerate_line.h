// accelerate launch's meanings on dtlaunch's command line, between reading each setting and parsing
// it: its spellings of shared settings (--num_processes is the total over --num_machines), its
// defaults, its rules, and what the run takes from it (config/accelerate.h then turns that into the
// workers' variables). Used by command_line.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config_file.h"
#include "config/resolved.h"

namespace dtl::config {

/// The command line's values by row, as dtlaunch spells a setting and as accelerate launch does.
class TypedValues {
 public:
  virtual ~TypedValues() = default;
  virtual std::optional<Resolved> own_spelling(size_t row) const = 0;
  virtual std::optional<Resolved> accelerate_spelling(size_t row) const = 0;
};

/// Takes accelerate's spellings into `settings`; both spellings of one setting must agree.
Status accelerate_spellings(const TypedValues& line, std::vector<Resolved>& settings);

/// accelerate's rules between its own settings; a multi-machine DeepSpeed run through DeepSpeed's own
/// launchers becomes the ssh fan-out over deepspeed_hostfile (o.fanout).
Status check_accelerate_rules(const std::vector<Resolved>& settings, LaunchOptions& o);

/// accelerate launch's defaults where torchrun's differ (after `launch`, or with accelerate's file).
void accelerate_defaults(bool launch, bool accelerate_file, std::vector<Resolved>& settings);

/// What accelerate launch would make of the run beyond the shared settings (o.accelerate).
void take_accelerate_facts(bool launch, const ConfigFile* file, const std::vector<Resolved>& settings,
                           LaunchOptions& o);

/// --print_config's line above a setting that accelerate spells or means otherwise ("" for none).
std::string other_name(const Flag& f, const LaunchOptions& o);

}  // namespace dtl::config

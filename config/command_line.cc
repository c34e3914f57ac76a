#include "config/command_line.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "config/accelerate_line.h"
#include "config/cluster_env.h"
#include "config/config_file.h"
#include "config/pod_variables.h"
#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// Help, version or the settings: what to print before exiting with 0.
Parsed answered(std::string output) {
  Parsed r;
  r.output = std::move(output);
  return r;
}

/// What a user reads in --help: the row's help without Markdown, its default and its variables
/// beyond PET_*.
std::string help_line(const Flag& f, const char* default_value) {
  std::string help = text::replace_all(help_text(f), "`", "");
  std::string def = text::replace_all(*f.default_shown ? f.default_shown : default_value, "`", "");
  if (!def.empty()) help += " (default: " + def + ")";
  for (const char* v : f.variables) help += std::string(" (or $") + v + ")";
  return help;
}

/// torchrun's long options (torch 2.15's argparse parser, in its order), which a prefix resolves
/// against first, so that an abbreviation torchrun takes means here what it means there.
const std::vector<std::string>& torchrun_options() {
  static const std::vector<std::string> options = [] {
    std::vector<std::string> out;
    for (const auto& name : text::split(
             "help nnodes nproc-per-node nproc_per_node rdzv-backend rdzv_backend rdzv-endpoint rdzv_endpoint rdzv-id "
             "rdzv_id rdzv-conf rdzv_conf standalone max-restarts max_restarts monitor-interval monitor_interval "
             "start-method start_method event-log-handler event_log_handler role module no-python no_python run-path "
             "run_path log-dir log_dir redirects tee log-line-prefix-template log_line_prefix_template "
             "local-ranks-filter local_ranks_filter duplicate-stdout-filters duplicate_stdout_filters "
             "duplicate-stderr-filters duplicate_stderr_filters node-rank node_rank master-addr master_addr master-port "
             "master_port local-addr local_addr logs-specs logs_specs numa-binding numa_binding signals-to-handle "
             "signals_to_handle shutdown-timeout shutdown_timeout virtual-local-rank virtual_local_rank "
             "print-completion print_completion",
             ' ')) {
      out.push_back("--" + name);
    }
    return out;
  }();
  return options;
}

/// An option of dtlaunch's own line, as its arguments are scanned before CLI11 reads them.
struct Spelling {
  std::optional<size_t> row;  ///< the table's row; none for the options that are no setting
  bool takes_value = false;
  bool abbreviable = true;  ///< argparse's prefixes; accelerate launch's spellings take none
};

/// Every spelling of dtlaunch's own line, and the long ones in the order a prefix's candidates are named.
struct Spellings {
  std::map<std::string, Spelling> by_name;
  std::vector<std::string> long_names;
};

const Spellings& spellings() {
  static const Spellings all = [] {
    Spellings s;
    auto add = [&](const std::string& name, Spelling what) {
      if (s.by_name.emplace(name, what).second && what.abbreviable && name.rfind("--", 0) == 0) {
        s.long_names.push_back(name);
      }
    };
    for (size_t i = 0; i < flags().size(); ++i) {
      const Flag& f = flags()[i];
      const bool valued = f.type != Type::switch_;
      for (const auto& name : long_spellings(f)) add(name, {i, valued, true});
      if (*f.short_name) add(f.short_name, {i, valued, false});
      if (*f.accelerate_flag) {
        add(std::string("--") + f.accelerate_flag, {i, valued, false});
        add("--" + text::replace_all(f.accelerate_flag, "_", "-"), {i, valued, false});
      }
    }
    for (const char* name : {"--config_file", "--config-file"}) add(name, {std::nullopt, true, true});
    for (const char* name : {"--print_config", "--print-config", "--help", "--version"}) add(name, {});
    for (const char* name : {"-h", "--help_markdown"}) add(name, {std::nullopt, false, false});
    return s;
  }();
  return all;
}

/// The long options that `prefix` abbreviates among `names`, as argparse finds them.
std::vector<std::string> abbreviated(const std::string& prefix, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  }
  return out;
}

/// The launcher's own arguments (up to the program) with argparse's abbreviations written out, as
/// torchrun (and torch.distributed.launch and deepspeed, argparse too) takes them: `--nproc_per=2`
/// is `--nproc_per_node=2`. A prefix resolves among torchrun's options first, then among dtlaunch's
/// others; one that matches several options of a kind is refused, as argparse refuses it.
Result<std::vector<std::string>> expand_abbreviations(const std::vector<std::string>& args) {
  const Spellings& known = spellings();
  std::vector<std::string> out = args;
  for (size_t i = 0; i < out.size(); ++i) {
    std::string& a = out[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program and its arguments
    const bool is_long = a[1] == '-';
    const size_t eq = a.find('=');
    std::string name = is_long ? a.substr(0, eq) : a.substr(0, 2);
    auto it = known.by_name.find(name);
    if (it == known.by_name.end() && is_long && name.size() > 2) {
      for (const auto* names : {&torchrun_options(), &known.long_names}) {
        const auto candidates = abbreviated(name, *names);
        if (candidates.size() > 1) {
          return fail("ambiguous option: " + printable(name) + " could match " + text::join(candidates, ", ") +
                      " (see dtlaunch --help)");
        }
        if (candidates.size() == 1) {
          a = candidates.front() + (eq == std::string::npos ? "" : a.substr(eq));
          name = candidates.front();
          it = known.by_name.find(name);
          break;
        }
      }
    }
    if (it == known.by_name.end()) break;  // unknown: CLI11 says so
    const bool attached = is_long ? eq != std::string::npos : a.size() > 2;
    if (it->second.takes_value && !attached) ++i;  // its value
  }
  return out;
}

/// The command line as CLI11 reads it: one option per row of the table, and the options that are
/// not settings (which file holds settings, and a look at them).
class CommandLine : public TypedValues {
 public:
  /// dtlaunch's own line. With `args`, only the rows those arguments name become CLI11 options:
  /// CLI11 checks each new option against all the others, and registering every row cost a launch
  /// more than a millisecond; --help and the documentation register them all.
  explicit CommandLine(const std::vector<std::string>* args = nullptr)
      : texts_(flags().size()), accelerate_texts_(flags().size()), takes_(flags().size(), true) {
    app_.prefix_command();
    app_.set_version_flag("--version", "dtlaunch " DTL_VERSION);
    app_.footer("Every --flag_name is also accepted as --flag-name and as the variable PET_FLAG_NAME\n"
                "(the flag wins over the variable, which wins over what srun or mpirun say, then the config file).\n"
                "Documentation: README.md and docs/ (installed in share/doc/dtlaunch).\n"
                "Also: dtlaunch config (write a config file by answering questions; --help for more),\n"
                "dtlaunch env (versions, GPUs and settings, for a bug report).");
    const bool every_row = !args || std::any_of(args->begin(), args->end(), [](const std::string& a) {
      return a == "-h" || a == "--help" || a == "--help_markdown";
    });
    if (every_row) {  // in --help's order: the settings, then the config file
      add_rows(std::nullopt, true);
      add_meta_options();
    } else {  // the options that are no row first: named_rows asks CLI11 which of them take a value
      add_meta_options();
      add_rows(named_rows(*args), true);
    }
  }

  /// Another command's line: settings `rows` as dtlaunch takes them, the config file, and `own`
  /// options; no program.
  CommandLine(const std::string& command, const std::string& description, const std::vector<Setting>& rows,
              const std::map<Setting, const char*>& defaults, const std::vector<CommandOption>& own)
      : texts_(flags().size()),
        accelerate_texts_(flags().size()),
        takes_(flags().size(), false),
        own_texts_(own.size()),
        command_(command),
        defaults_(defaults) {
    app_.name(command);
    app_.description(command + ": " + description);
    for (size_t i = 0; i < own.size(); ++i) {
      own_.push_back(app_.add_option(own[i].names, own_texts_[i], own[i].help)
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast));
    }
    for (Setting id : rows) takes_[static_cast<size_t>(id)] = true;
    add_rows(std::nullopt, false);
    add_config_option();
  }

  /// The values the command's own options were given.
  void own_values(std::vector<CommandOption>& own) const {
    for (size_t i = 0; i < own.size(); ++i) {
      if (own_[i]->count()) own[i].value = own_texts_[i];
    }
  }

  /// Row `i`'s default: the table's, unless the command has its own.
  const char* default_of(size_t i) const {
    auto own = defaults_.find(flags()[i].id);
    return own != defaults_.end() ? own->second : flags()[i].default_value;
  }

  /// Whether this command line takes row `i`.
  bool takes(size_t i) const { return takes_[i]; }

  /// Parses `args`; help, version and CLI11's errors come back as the whole answer.
  std::optional<ParseResult> parse(const std::vector<std::string>& args) {
    std::vector<std::string> reversed = argparse_spellings(args);
    std::reverse(reversed.begin(), reversed.end());
    try {
      app_.parse(reversed);
    } catch (const CLI::CallForHelp&) {
      return answered(app_.help());
    } catch (const CLI::CallForVersion& e) {
      return answered(e.what());
    } catch (const CLI::ParseError& e) {
      return fail(printable(e.what()) + " (see " + command_ + " --help)");
    }
    if (help_markdown_) return answered(flags_markdown());
    return std::nullopt;
  }

  std::vector<OptionDoc> docs() const {
    std::vector<OptionDoc> out;
    for (const CLI::Option* o : app_.get_options()) {
      if (o->get_group().empty()) continue;  // hidden
      OptionDoc d{{}, o->get_expected_min() > 0, o->get_group(), o->get_description(), {}, o == config_option_};
      for (const auto& s : o->get_snames()) d.spellings.push_back("-" + s);
      for (const auto& l : o->get_lnames()) d.spellings.push_back("--" + l);
      if (auto row = std::find(options_.begin(), options_.end(), o); row != options_.end()) {
        const Flag& f = flags()[static_cast<size_t>(row - options_.begin())];
        d.choices.assign(f.choices.begin(), f.choices.end());
        d.names_path = f.names_path;
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  /// Row `i`'s value and the spelling that gave it, when the command line has it.
  std::optional<Resolved> own_spelling(size_t i) const override {
    const Flag& f = flags()[i];
    if (!options_[i] || options_[i]->count() == 0) return std::nullopt;
    auto spelled = typed_.find(options_[i]);
    std::string where = spelled != typed_.end() ? spelled->second : options_[i]->get_name();
    return Resolved{&f, f.type == Type::switch_ ? "1" : texts_[i], Source{Source::Kind::flag, where, ""}};
  }

  /// Row `i`'s value in accelerate's spelling (`--num_processes 8`), as typed, when given.
  std::optional<Resolved> accelerate_spelling(size_t i) const override {
    const Flag& f = flags()[i];
    const CLI::Option* o = accelerate_options_[i];
    if (!o || o->count() == 0) return std::nullopt;
    auto spelled = typed_.find(o);
    std::string where = spelled != typed_.end() ? spelled->second : o->get_name();
    return Resolved{&f, f.type == Type::switch_ ? "1" : accelerate_texts_[i], Source{Source::Kind::flag, where, ""}};
  }

  std::optional<std::string> config_file() const {
    return config_option_->count() ? std::optional(config_file_) : std::nullopt;
  }
  bool print_config() const { return print_config_; }
  /// The program and its arguments; an option first is one CLI11 did not know.
  std::vector<std::string> rest() const {
    auto rest = app_.remaining();
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    return rest;
  }

  /// The rows whose spellings (or accelerate's) `args` use before the program.
  std::set<size_t> named_rows(const std::vector<std::string>& args) const {
    std::set<size_t> rows;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program and its arguments
      const bool is_long = a[1] == '-';
      const std::string name = is_long ? a.substr(0, a.find('=')) : a.substr(0, 2);
      const bool attached = is_long ? a.find('=') != std::string::npos : a.size() > 2;
      auto it = spellings().by_name.find(name);
      if (it == spellings().by_name.end()) break;  // unknown: CLI11 says so
      if (it->second.row) rows.insert(*it->second.row);
      if (it->second.takes_value && !attached) ++i;  // its value
    }
    return rows;
  }

  /// One option per row of the table that this line takes (and is among `only`, when given), in the
  /// table's order; on dtlaunch's own line also accelerate launch's spelling of a shared setting, an
  /// option of its own (converted in resolve()).
  void add_rows(const std::optional<std::set<size_t>>& only, bool accelerate_spellings) {
    for (size_t i = 0; i < flags().size(); ++i) {
      const Flag& f = flags()[i];
      if (!takes_[i] || (only && !only->count(i))) {
        options_.push_back(nullptr);
        accelerate_options_.push_back(nullptr);
        continue;
      }
      std::string names = text::join(long_spellings(f));
      if (*f.short_name) names = std::string(f.short_name) + "," + names;
      // Given twice, the last value wins, as with torchrun's argparse (wrappers append overrides).
      const std::string help = help_line(f, default_of(i));
      CLI::Option* o = f.type == Type::switch_ ? app_.add_flag(names, help)
                                               : app_.add_option(names, texts_[i], help)
                                                     ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      options_.push_back(o->group(f.group));
      CLI::Option* a = nullptr;
      if (*f.accelerate_flag && accelerate_spellings) {
        const std::string acc = f.accelerate_flag;
        std::string spelled = "--" + acc;
        if (acc.find('_') != std::string::npos) spelled += ",--" + text::replace_all(acc, "_", "-");
        const std::string acc_help = "accelerate's spelling of --" + std::string(f.name);
        a = f.type == Type::switch_ ? app_.add_flag(spelled, acc_help)
                                    : app_.add_option(spelled, accelerate_texts_[i], acc_help)
                                          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
        a->group(f.group);
      }
      accelerate_options_.push_back(a);
    }
  }

  /// The options that are no setting: which file holds settings, and a look at them.
  void add_meta_options() {
    add_config_option();
    app_.add_flag("--print_config,--print-config", print_config_,
                  "print the settings in effect and where each comes from, then exit")
        ->group("Config files");
    app_.add_flag("--help_markdown", help_markdown_, "docs/cli.md's flag tables")->group("");  // hidden
  }

  void add_config_option() {
    config_option_ = app_.add_option("--config_file,--config-file", config_file_,
                                     "YAML settings (dtlaunch's or accelerate's); default $DTLAUNCH_CONFIG_FILE, else "
                                     "~/.config/dtlaunch/default_config.yaml when it exists; '' for none")
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                         ->group("Config files");
  }

 private:
  /// The launcher's own arguments (up to the program) rewritten where torchrun's argparse and CLI11
  /// read them differently: `--flag=` is an empty value (CLI11 would take the next argument as the
  /// value), and `-r=3` is `-r 3` (CLI11 would read '=3'). Notes each option's spelling as typed
  /// (the last one); a short option is named by its long spelling.
  std::vector<std::string> argparse_spellings(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    size_t i = 0;
    for (; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program and its arguments
      const bool is_long = a[1] == '-';
      const size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const CLI::Option* opt = app_.get_option_no_throw(name);
      if (!opt) break;  // unknown: CLI11 says so
      typed_[opt] = is_long ? name : opt->get_name();
      const bool takes_value = opt->get_expected_min() > 0;
      if (takes_value && eq != std::string::npos && (eq + 1 == a.size() || !is_long)) {
        out.push_back(name);
        out.push_back(a.substr(eq + 1));
        continue;
      }
      out.push_back(a);
      const bool attached = eq != std::string::npos || (!is_long && a.size() > 2);
      if (takes_value && !attached && i + 1 < args.size()) out.push_back(args[++i]);
    }
    out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
    return out;
  }

  CLI::App app_{"dtlaunch: start one worker per GPU with torchrun's environment, and supervise them", "dtlaunch"};
  std::vector<std::string> texts_;  ///< by row
  std::vector<CLI::Option*> options_;
  std::vector<std::string> accelerate_texts_;   ///< by row: accelerate's spelling's value
  std::vector<CLI::Option*> accelerate_options_;  ///< by row; nullptr where accelerate has no other spelling
  std::map<const CLI::Option*, std::string> typed_;
  std::vector<bool> takes_;  ///< by row: whether this line takes the setting (a command takes some)
  std::vector<std::string> own_texts_;  ///< a command's own options' values
  std::vector<CLI::Option*> own_;
  std::string config_file_;
  std::string command_ = "dtlaunch";
  std::map<Setting, const char*> defaults_;  ///< a command's own defaults, by row
  CLI::Option* config_option_ = nullptr;
  bool print_config_ = false;
  bool help_markdown_ = false;
};

/// Setting `i`'s text and source: flag > variable > detected from the scheduler > config file > default.
Resolved resolve(size_t i, const CommandLine& cl, const EnvLookup& env, const ClusterDetection& detected,
                 const ConfigFile* file) {
  const Flag& f = flags()[i];
  if (auto typed = cl.own_spelling(i)) return *typed;
  for (const auto& name : cl.takes(i) ? variable_names(f) : std::vector<std::string>{}) {
    if (auto v = env(name)) return Resolved{&f, *v, Source{Source::Kind::env, name, ""}};
  }
  if (auto it = detected.values.find(f.id); it != detected.values.end() && cl.takes(i)) {
    return Resolved{&f, it->second.text, Source{Source::Kind::detected, it->second.variable, it->second.note}};
  }
  if (file && cl.takes(i)) {
    if (auto it = file->values.find(f.name); it != file->values.end()) {
      return Resolved{&f, it->second.value, Source{Source::Kind::file, it->second.where, it->second.note}};
    }
  }
  return Resolved{&f, cl.default_of(i), Source{Source::Kind::default_, std::string("--") + f.name, ""}};
}

/// The rules that involve two settings, checked here, after every row has parsed, whatever the
/// source of each value; and the one thing a setting implies for another (use_cpu drops gpu_ids).
Status check_rules(const std::vector<Resolved>& settings, LaunchOptions& o) {
  if (o.use_cpu) o.gpu_ids.reset();  // a CPU job uses no GPU (accelerate's CPU files say gpu_ids: all)
  if (auto checked = check_accelerate_rules(settings, o); !checked) return checked;
  const auto setting = [&](Setting id) -> const Resolved& { return settings[static_cast<size_t>(id)]; };
  if (o.node_rank >= o.max_nodes) {
    return value_error(setting(Setting::node_rank), "expected a node rank in 0.." + std::to_string(o.max_nodes - 1));
  }
  if (o.module && o.no_python) {
    return value_error(setting(Setting::module), "--module runs python -m and cannot be combined with --no_python");
  }
  if (o.virtual_local_rank && o.gpu_visibility == GpuVisibility::all &&
      o.source(Setting::gpu_visibility).kind != Source::Kind::default_) {
    return value_error(setting(Setting::gpu_visibility),
                       "expected per_worker, since virtual_local_rank shows each worker only its own GPU (" +
                           o.source(Setting::virtual_local_rank).where + ")");
  }
  const Resolved& nproc = setting(Setting::nproc_per_node);
  if (o.use_cpu && o.nproc_per_node.kind == NprocSpec::Kind::gpu) {
    return value_error(nproc, "expected a count, cpu or auto, since use_cpu is set (" + o.source(Setting::use_cpu).where + ")");
  }
  if (o.gpu_ids && o.nproc_per_node.kind == NprocSpec::Kind::count &&
      o.nproc_per_node.count > static_cast<int>(o.gpu_ids->size())) {
    const Source ids = o.source(Setting::gpu_ids);
    const std::string listed = std::to_string(o.gpu_ids->size());
    if (nproc.source.kind == Source::Kind::file || ids.kind == Source::Kind::file) {  // a file's own wording
      return value_error(nproc, "expected at most " + listed + " workers per node, the GPUs listed in gpu_ids (" +
                                    ids.where + ")");
    }
    std::vector<std::string> items;
    for (int id : *o.gpu_ids) items.push_back(std::to_string(id));
    return fail(o.named(Setting::nproc_per_node, std::to_string(o.nproc_per_node.count)) + " is more than the " + listed +
                " GPUs listed in " + o.named(Setting::gpu_ids, text::join(items)));
  }
  return {};
}

/// Parses every setting into `o`, in the table's order, and records where each came from.
Status parse_settings(const std::vector<Resolved>& settings, LaunchOptions& o) {
  for (const auto& s : settings) {
    try {
      s.flag->apply(s.text, o);
      if (s.flag->accelerate_only && !s.text.empty()) o.accelerate.values[s.flag->name] = s.text;
    } catch (const std::invalid_argument& e) {
      return value_error(s, e.what());
    }
    o.sources[s.flag->id] = s.source;
  }
  return check_rules(settings, o);
}

/// The file's env: entries, unless the environment already has the variable; as --print_config shows them.
std::vector<EffectiveSetting> add_file_env(const ConfigFile& file, const EnvLookup& env, LaunchOptions& o) {
  std::vector<EffectiveSetting> shown;
  for (const auto& [name, v] : file.env) {
    if (auto inherited = env(name)) {
      shown.push_back({name, *inherited, "environment (the file says " + yaml_scalar(v.value) + ")", false, ""});
    } else {
      o.extra_env.emplace_back(name, v.value);
      shown.push_back({name, v.value, v.where, false, ""});
    }
  }
  return shown;
}

std::string print_config(const std::vector<Resolved>& settings, const std::vector<EffectiveSetting>& env,
                         const ConfigFile* file, const std::optional<ConfigLocation>& location,
                         const LaunchOptions& o) {
  std::string header = "# dtlaunch settings in effect, and where each comes from "
                       "(flag > variable > detected > config file > default)\n# config file: ";
  if (file) {
    header += printable(file->path) + (file->format == ConfigFile::Format::accelerate ? " (accelerate's format)"
                                                                           : " (dtlaunch's format)");
  } else if (location) {
    header += "none (" + printable(location->path) + " does not exist)";
  } else {
    header += "none";
  }
  std::vector<EffectiveSetting> lines;
  for (const auto& s : settings) {
    std::string source = s.source.kind == Source::Kind::default_ ? "default" : s.source.where;
    if (!s.source.note.empty()) source += " (" + s.source.note + ")";
    const bool secret = s.flag->secret && !s.text.empty();  // `dtlaunch env` output gets pasted
    const bool is_switch = s.flag->type == Type::switch_;
    std::string value = secret ? "<hidden>" : s.text;
    if (is_switch) value = parse_bool(s.text) ? "1" : "0";  // as it parsed: ACCELERATE_USE_CPU=true is on
    lines.push_back({s.flag->name, value, source, is_switch, other_name(*s.flag, o)});
  }
  return format_settings(header + "\n", lines, env);
}

/// Whose conventions the command line follows, from its first word: dtlaunch's (torchrun's), or
/// accelerate launch's, torch.distributed.launch's or deepspeed's.
enum class Convention { torchrun, accelerate, distributed_launch, deepspeed };

Convention convention_of(const std::vector<std::string>& args) {
  if (args.empty()) return Convention::torchrun;
  if (args.front() == kLaunchWord) return Convention::accelerate;
  if (args.front() == kDistributedLaunchWord) return Convention::distributed_launch;
  if (args.front() == kDeepspeedWord) return Convention::deepspeed;
  return Convention::torchrun;
}

/// torch.distributed.launch's and deepspeed's defaults where torchrun's differ: their scripts pick
/// cuda:LOCAL_RANK, so every worker sees every GPU; deepspeed starts one worker per GPU.
void convention_defaults(Convention c, std::vector<Resolved>& settings) {
  if (c != Convention::distributed_launch && c != Convention::deepspeed) return;
  const char* who = c == Convention::deepspeed ? "deepspeed" : "torch.distributed.launch";
  Resolved& visibility = row(settings, Setting::gpu_visibility);
  if (visibility.source.kind == Source::Kind::default_) {
    visibility.text = "all";
    visibility.source.note = std::string(who) + ": every worker sees every GPU";
  }
  Resolved& nproc = row(settings, Setting::nproc_per_node);
  if (c == Convention::deepspeed && nproc.source.kind == Source::Kind::default_) {
    nproc.source.note = "deepspeed: one per GPU when the machine has GPUs";
  }
}

/// What the convention adds once every setting is parsed: the `--local-rank=N` argument and
/// deepspeed's variables.
Status take_convention(Convention c, LaunchOptions& o) {
  if (c == Convention::distributed_launch && !o.use_env) {
    if (o.no_python) {  // torch.distributed.launch's own rule: a program cannot be made to parse it
      return fail(o.source(Setting::no_python).where + ": torch.distributed.launch passes --local-rank=N to the program, so "
                  "--no_python needs --use_env (as torch.distributed.launch says)");
    }
    o.local_rank_arg = LaunchOptions::LocalRankArg::torch_version;
  }
  if (c != Convention::deepspeed) return {};
  if (!o.no_local_rank) o.local_rank_arg = LaunchOptions::LocalRankArg::underscore;
  o.deepspeed_variables = true;
  o.fanout.deepspeed_runner = true;
  if (o.source(Setting::nproc_per_node).kind == Source::Kind::default_) o.nproc_per_node = {NprocSpec::Kind::gpu_or_one, 1};
  return {};
}

/// Every setting, resolved and parsed into `options`, with the config file in effect, by the
/// command line's convention.
struct Gathered {
  LaunchOptions options;
  std::vector<Resolved> settings;
  std::optional<ConfigLocation> location;
  std::optional<ConfigFile> file;
  std::vector<std::string> warnings;  ///< the file's, then the settings'
};

/// --rdzv_conf read as torch reads it for the backend in use; the keys it ignores are named.
Status take_rdzv_conf(const std::vector<Resolved>& settings, LaunchOptions& o, std::vector<std::string>& warnings) {
  const Resolved& conf = row(settings, Setting::rdzv_conf);
  std::vector<std::string> ignored;
  try {
    o.rdzv_conf = parse_rdzv_conf(conf.text, o.rdzv_backend == "static", &ignored);
  } catch (const std::invalid_argument& e) {
    return value_error(conf, e.what());
  }
  for (const auto& key : ignored) warnings.push_back(conf.source.where + ": ignoring " + key);
  return {};
}

/// A detected value that the scheduler's other variables forbid (two srun tasks on one node), when in use.
Status refused_detection(const ClusterDetection& detected, std::vector<Resolved>& settings) {
  for (const auto& [id, value] : detected.values) {
    if (value.refusal && row(settings, id).source.kind == Source::Kind::detected) return fail(*value.refusal);
  }
  return {};
}

/// `detect`: take what the scheduler that started dtlaunch says (a launch; not another command).
Result<Gathered> gather(const CommandLine& cl, const EnvLookup& env, const ReadFile& files, Convention convention,
                        bool detect) {
  const bool launch = convention == Convention::accelerate;
  Gathered g;
  g.location = locate_config(cl.config_file(), env);
  auto loaded = load_config(g.location, files);
  if (!loaded) return tl::unexpected(loaded.error());
  g.file = std::move(*loaded);
  if (g.file) g.warnings = g.file->warnings;
  const ConfigFile* in_effect = g.file ? &*g.file : nullptr;
  const ClusterDetection detected = detect ? detect_cluster(env) : ClusterDetection{};
  for (size_t i = 0; i < flags().size(); ++i) g.settings.push_back(resolve(i, cl, env, detected, in_effect));
  if (auto refused = refused_detection(detected, g.settings); !refused) return tl::unexpected(refused.error());
  if (auto taken = accelerate_spellings(cl, g.settings); !taken) return tl::unexpected(taken.error());
  accelerate_defaults(launch, g.file && g.file->format == ConfigFile::Format::accelerate, g.settings);
  convention_defaults(convention, g.settings);
  g.options.accelerate.file = g.file && g.file->format == ConfigFile::Format::accelerate;
  if (auto parsed = parse_settings(g.settings, g.options); !parsed) return tl::unexpected(parsed.error());
  if (auto conf = take_rdzv_conf(g.settings, g.options, g.warnings); !conf) return tl::unexpected(conf.error());
  take_accelerate_facts(launch, in_effect, g.settings, g.options);
  if (auto taken = take_convention(convention, g.options); !taken) return tl::unexpected(taken.error());
  if (g.file) g.options.config_file = g.file->path;
  return g;
}

}  // namespace

std::vector<OptionDoc> option_docs() { return CommandLine().docs(); }

ParseResult parse_command_line(const std::vector<std::string>& all_args, const EnvLookup& env,
                               const ReadFile& files) {
  // `dtlaunch launch ARGS` is `accelerate launch ARGS`: accelerate's meaning, and its workers' variables;
  // `dtlaunch torch.distributed.launch ARGS` and `dtlaunch deepspeed ARGS` likewise.
  const Convention convention = convention_of(all_args);
  const bool word = convention != Convention::torchrun;
  std::vector<std::string> args(all_args.begin() + (word ? 1 : 0), all_args.end());
  if (convention != Convention::accelerate) {  // accelerate launch's argparse takes no abbreviation
    auto expanded = expand_abbreviations(args);
    if (!expanded) return tl::unexpected(expanded.error());
    args = std::move(*expanded);
  }
  CommandLine cl(&args);
  if (auto answered = cl.parse(args)) return *answered;
  auto gathered = gather(cl, env, files, convention, true);
  if (!gathered) return tl::unexpected(gathered.error());
  auto& [o, settings, location, file, warnings] = *gathered;
  const ConfigFile* in_effect = file ? &*file : nullptr;
  std::vector<EffectiveSetting> env_settings;
  if (file) env_settings = add_file_env(*file, env, o);
  auto rest = cl.rest();
  if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    if (auto why = refused_accelerate_flag(rest.front()); !why.empty()) return fail(why);
    return fail("unknown option " + printable(rest.front()) + " (see dtlaunch --help)");
  }
  Parsed result;
  result.warnings = warnings;
  if (cl.print_config()) {
    result.output = print_config(settings, env_settings, in_effect, location, o);
    result.shown = std::move(o);
    return result;
  }
  if (rest.empty()) return fail("no program to launch (usage: dtlaunch [options] program [args...])");
  if (auto checked = check_pod_variables(env, o); !checked) return tl::unexpected(checked.error());
  o.program = rest.front();
  o.program_args.assign(rest.begin() + 1, rest.end());
  result.options = std::move(o);
  return result;
}

ParseResult parse_command_settings(const std::string& command, const std::string& description,
                                   const std::vector<Setting>& rows, const std::map<Setting, const char*>& defaults,
                                   std::vector<CommandOption>& own, const std::vector<std::string>& args,
                                   const EnvLookup& env, const ReadFile& files) {
  CommandLine cl(command, description, rows, defaults, own);
  if (auto answered = cl.parse(args)) return *answered;
  cl.own_values(own);
  auto gathered = gather(cl, env, files, Convention::torchrun, false);
  if (!gathered) return tl::unexpected(gathered.error());
  auto& g = *gathered;
  Parsed result;
  result.warnings = g.warnings;
  result.options = std::move(g.options);
  return result;
}

ParseResult parse_command_line(const std::vector<std::string>& args, const EnvLookup& env) {
  return parse_command_line(args, env, disk_files());
}

}  // namespace dtl::config

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "base/error.h"
#include "base/posix.h"
#include "commands/commands.h"
#include "commands/terminal.h"
#include "config/config_file.h"
#include "config/flags.h"
#include "config/wizard.h"
#include "node/gpus.h"
#include "base/printable.h"

namespace dtl::commands {
namespace {

constexpr const char* kUsage =
    "usage: dtlaunch config [--config_file FILE] [--force]            ask, then write FILE\n"
    "       dtlaunch config default [--config_file FILE] [--force]    write FILE for this machine, no questions\n"
    "       dtlaunch config show [--config_file FILE]                 print the file in effect\n"
    "       dtlaunch config validate FILE                             check a file (dtlaunch's or accelerate's)\n"
    "\n"
    "FILE: $DTLAUNCH_CONFIG_FILE, else $XDG_CONFIG_HOME/dtlaunch/default_config.yaml, else\n"
    "~/.config/dtlaunch/default_config.yaml. --fake_gpus N (or DTLAUNCH_FAKE_GPUS) pretends to have N GPUs.\n";

struct ConfigArgs {
  std::string action = "wizard";
  std::optional<std::string> file;
  bool force = false;
  std::optional<std::string> fake_gpus;
};

/// The arguments, or a one-line usage error ("config: ...", exit code 2).
Result<ConfigArgs> parse_args(const std::vector<std::string>& args) {
  ConfigArgs out;
  bool positional_seen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // "--name VALUE" or "--name=VALUE", with `_` or `-`: whether `a` is that option, its value taken.
    auto value_of = [&](const std::string& underscored, const std::string& dashed,
                        std::optional<std::string>& into) -> Result<bool> {
      for (const std::string& name : {underscored, dashed}) {
        if (a == name) {
          if (i + 1 >= args.size()) return fail("config: " + a + " needs a value");
          into = args[++i];
          return true;
        }
        if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
          into = a.substr(name.size() + 1);
          return true;
        }
      }
      return false;
    };
    auto file = value_of("--config_file", "--config-file", out.file);
    if (!file) return tl::unexpected(file.error());
    if (*file) continue;
    auto fake_gpus = value_of("--fake_gpus", "--fake-gpus", out.fake_gpus);
    if (!fake_gpus) return tl::unexpected(fake_gpus.error());
    if (*fake_gpus) continue;
    if (a == "--force") {
      out.force = true;
    } else if (a == "-h" || a == "--help") {
      out.action = "help";
      return out;
    } else if (a.size() > 1 && a[0] == '-') {
      return fail("config: unknown option " + printable(a) + " (see dtlaunch config --help)");
    } else if (!positional_seen && (a == "default" || a == "show" || a == "validate")) {
      out.action = a;
      positional_seen = true;
    } else if (out.action == "validate" && !out.file) {
      out.file = a;
    } else {
      return fail("config: unexpected argument '" + printable(a) + "' (see dtlaunch config --help)");
    }
  }
  return out;
}

/// Prints the error line and gives the exit code.
int report(const std::string& message, int code = 2) {
  std::cerr << error_line(Error{message, code});
  return code;
}
int report(const Error& e) { return report(e.message, e.exit_code); }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

/// --fake_gpus, else its variables, as a launch reads them (the flag table's row).
Result<config::MachineFacts> machine_facts(const ConfigArgs& a, const EnvLookup& env) {
  const config::Flag& row = config::flag(config::Setting::fake_gpus);
  std::optional<std::string> fake = a.fake_gpus;
  std::string from = "--fake_gpus";
  for (const auto& name : config::variable_names(row)) {
    if (!fake && env(name)) {
      fake = env(name);
      from = name;
    }
  }
  config::LaunchOptions parsed;
  try {
    if (fake) row.apply(*fake, parsed);
  } catch (const std::invalid_argument& e) {
    return fail(from + ": " + e.what() + " (got '" + printable(*fake) + "')");
  }
  const std::optional<int> count = parsed.fake_gpus;
  auto inventory = node::discover_gpus(count);
  return config::MachineFacts{static_cast<int>(inventory.gpus.size()), inventory.source, posix::host_name()};
}

/// The file that is written: --config_file, else $DTLAUNCH_CONFIG_FILE, else the default path.
std::string target_path(const ConfigArgs& a, const EnvLookup& env) {
  if (a.file && !a.file->empty()) return *a.file;
  if (auto v = env("DTLAUNCH_CONFIG_FILE"); v && !v->empty()) return *v;
  return config::default_config_path(env);
}

/// The written text parses back to the answered settings; anything else is dtlaunch's bug.
Status check_loads_back(const std::string& path, const std::string& text) {
  auto r = config::parse_command_line({"--config_file", path, "--print_config"},
                                      [](const std::string&) { return std::optional<std::string>(); },
                                      [&](const std::string&) { return config::FileRead{config::FileRead::Status::ok, text}; });
  if (!r) return tl::unexpected(r.error());
  return {};
}

int write_config(const std::string& path, const std::string& text, std::ostream& out) {
  if (auto back = check_loads_back(path, text); !back) {
    return report("config: the file would not load back: " + back.error().message, 1);
  }
  if (auto why = config::write_file_atomically(path, text); !why.empty()) {
    return report("config: cannot write " + printable(path) + ": " + why, 1);
  }
  out << "\nWrote " << path << ":\n\n" << text << "\n`dtlaunch --print_config` shows the settings in effect.\n";
  return 0;
}

int run_wizard_command(const ConfigArgs& a, const EnvLookup& env, const std::string& path) {
  auto facts = machine_facts(a, env);
  if (!facts) return report(facts.error());
  std::optional<config::WizardAnswers> answers;
  int aborted = 0;
  {
    ConsoleTerminal term(STDIN_FILENO, STDOUT_FILENO, env("TERM").value_or(""));
    term.write("dtlaunch config: the answers go to " + path +
               ". Enter takes the [default]; Ctrl-C stops without writing anything.\n");
    if (exists(path) && !a.force) {
      auto overwrite = config::confirm(term, path + " exists. Overwrite it?", false, aborted);
      if (overwrite == false) {
        std::cerr << "dtlaunch: config: " << path << " left as it was; nothing written\n";
        return 1;
      }
    }
    if (!aborted) {
      auto result = config::run_wizard(term, *facts);
      answers = result.answers;
      aborted = result.exit_code;
    }
  }  // the terminal is restored here, before anything else is printed
  if (!answers) {
    if (aborted == 130) {
      std::cerr << "dtlaunch: config: interrupted; nothing written\n";
      return 130;
    }
    return report("config: the input ended before every question was answered; nothing written", 1);
  }
  return write_config(path, config::render_config(*answers, "dtlaunch config"), std::cout);
}

int run_default(const ConfigArgs& a, const EnvLookup& env, const std::string& path) {
  if (exists(path) && !a.force) {
    return report("config default: " + printable(path) + " already exists (--force overwrites it)");
  }
  auto facts = machine_facts(a, env);
  if (!facts) return report(facts.error());
  auto answers = config::default_answers(*facts);
  return write_config(path, config::render_config(answers, "dtlaunch config default"), std::cout);
}

int run_show(const ConfigArgs& a, const EnvLookup& env) {
  auto where = config::locate_config(a.file, env);
  if (!where) {
    std::cerr << "dtlaunch: config show: no config file (" << (a.file ? "--config_file" : "DTLAUNCH_CONFIG_FILE")
              << " is empty)\n";
    return 1;
  }
  auto read = config::disk_files()(where->path);
  if (read.status == config::FileRead::Status::missing) {
    std::cerr << "dtlaunch: config show: no config file: " << where->path
              << " does not exist (dtlaunch config writes one)\n";
    return 1;
  }
  if (read.status != config::FileRead::Status::ok) {
    return report("config show: cannot read '" + printable(where->path) + "': " + read.text, 1);
  }
  std::cout << "# " << where->path << "\n" << read.text << (read.text.ends_with('\n') || read.text.empty() ? "" : "\n");
  return 0;
}

int run_validate(const ConfigArgs& a) {
  if (!a.file || a.file->empty()) return report("config validate: which file? (usage: dtlaunch config validate FILE)");
  // Read here first, so that a missing file is named as the user gave it (not as --config_file).
  if (auto read = config::disk_files()(*a.file); read.status != config::FileRead::Status::ok) {
    return report("config validate: cannot read '" + printable(*a.file) + "': " + read.text);
  }
  // The file alone: no flags and no variables take part.
  auto r = config::parse_command_line({"--config_file", *a.file, "--print_config"},
                                      [](const std::string&) { return std::optional<std::string>(); });
  if (!r) return report(r.error());
  for (const auto& w : r->warnings) std::cerr << "dtlaunch: warning: " << w << "\n";
  std::cout << "# " << *a.file << " is valid; alone (no flags, no variables), it gives:\n" << r->output;
  return 0;
}

}  // namespace

int run_config(const std::vector<std::string>& args, const EnvLookup& env) {
  auto parsed = parse_args(args);
  if (!parsed) return report(parsed.error());
  const ConfigArgs& a = *parsed;
  if (a.action == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (a.action == "show") return run_show(a, env);
  if (a.action == "validate") return run_validate(a);
  const std::string path = target_path(a, env);
  if (path.empty()) {
    return report("config: where should the file go? Set HOME or XDG_CONFIG_HOME, or pass --config_file FILE");
  }
  if (a.action == "default") return run_default(a, env, path);
  return run_wizard_command(a, env, path);
}

}  // namespace dtl::commands

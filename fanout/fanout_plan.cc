#include "fanout/fanout_plan.h"

#include <wordexp.h>

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "base/posix.h"
#include "config/files.h"
#include "config/flags.h"
#include "config/hostfile.h"
#include "base/text.h"
#include "node/spawn.h"
#include "rendezvous/auth.h"
#include "base/printable.h"

extern char** environ;

namespace dtl::fanout {
using config::LaunchOptions;
using config::Setting;
using config::Source;

namespace {

/// The variable prefixes every host's agent gets from here (DeepSpeed forwards the same kind).
constexpr std::array kForwardedPrefixes = {"NCCL_", "GLOO_", "PYTHON", "CUDA_", "TORCH_", "HF_", "OMP_"};
/// Of those, what says something about this machine only: which of its GPUs (a login node's, or
/// Slurm's for this step's). Sent on, it narrowed every host to this one's GPUs; deepspeed's runner
/// does not send it either. `--export CUDA_VISIBLE_DEVICES` still does.
constexpr std::array kThisHostOnly = {"CUDA_VISIBLE_DEVICES"};

/// The environment's entries that go to every host: the forwarded prefixes, and the variables of
/// dtlaunch's own settings (PET_*, DTLAUNCH_*, ACCELERATE_*), secrets excepted.
Variables forwarded(const std::vector<std::string>& environment) {
  std::vector<std::string> own;
  for (const auto& f : config::flags()) {
    for (const auto& v : config::variable_names(f)) own.push_back(v);
  }
  const auto secret = config::secret_variables();
  Variables out;
  for (const auto& entry : environment) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = entry.substr(0, eq);
    if (std::find(secret.begin(), secret.end(), name) != secret.end()) continue;
    const bool wanted = std::find(own.begin(), own.end(), name) != own.end() ||
                        (std::any_of(kForwardedPrefixes.begin(), kForwardedPrefixes.end(),
                                     [&](const char* p) { return name.rfind(p, 0) == 0; }) &&
                         std::find(kThisHostOnly.begin(), kThisHostOnly.end(), name) == kThisHostOnly.end());
    if (wanted) out.emplace_back(name, entry.substr(eq + 1));
  }
  return out;
}

std::optional<std::string> lookup(const std::vector<std::string>& environment, const std::string& name) {
  for (const auto& entry : environment) {
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=') {
      return entry.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

/// ./.dtlaunch_env and deepspeed's .deepspeed_env: NAME=VALUE lines (blanks around the name and the
/// value dropped, as deepspeed's runner strips them), `#` comments, blank lines.
Result<Variables> env_file(const std::string& text, const std::string& path) {
  Variables out;
  int line = 0;
  for (auto raw : text::split(text, '\n')) {
    ++line;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (raw.empty() || raw[0] == '#') continue;
    const auto eq = raw.find('=');
    const std::string name = eq == std::string::npos ? "" : text::trim(raw.substr(0, eq));
    if (!text::is_variable_name(name)) {
      return fail(path + ":" + std::to_string(line) + ": expected NAME=VALUE, got " + printable(raw, 80));
    }
    out.emplace_back(name, text::trim(raw.substr(eq + 1)));
  }
  return out;
}

/// The settings the fan-out decides for every host; given anyway, they are an error, not ignored.
Status refuse_fanout_conflicts(const LaunchOptions& o) {
  const auto refuse = [&](Setting name, const std::string& why) -> Status {
    const auto k = o.source(name).kind;
    if (k == Source::Kind::default_ || k == Source::Kind::file) return {};
    return fail(o.source(name).where + " cannot be combined with " +
                o.source(o.fanout.hostfile.empty() ? Setting::hosts : Setting::hostfile).where + ": " + why);
  };
  for (const auto& [name, why] : std::vector<std::pair<Setting, std::string>>{
           {Setting::node_rank, "each host's rank is its place in the host list"},
           {Setting::rdzv_backend, "the hosts meet through the static rendezvous on the first host"},
           {Setting::rdzv_endpoint, "the hosts meet at --master_addr:--master_port (the first host by default)"},
           {Setting::standalone, "the job runs on the listed hosts"},
           {Setting::rdzv_token, "every job gets a fresh token, sent to the hosts over ssh"},
           {Setting::rdzv_token_file, "every job gets a fresh token, sent to the hosts over ssh"},
           {Setting::node_name, "each host is named as in the host list"}}) {
    if (auto allowed = refuse(name, why); !allowed) return allowed;
  }
  if (o.typed(Setting::nnodes) && o.min_nodes != o.max_nodes) {
    return fail(o.named(Setting::nnodes, std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes)) +
                ": the fan-out starts a fixed number of hosts");
  }
  return {};
}

bool filtered(const LaunchOptions& o) { return !o.fanout.include.empty() || !o.fanout.exclude.empty(); }

/// The workers of every host when a count was set, flag, variable or config file: deepspeed's
/// --num_gpus, which is also what accelerate passes for num_processes / num_machines (and leaves out
/// when a filter names the slots). nullopt: each host's slots decide.
std::optional<int> count_per_host(const LaunchOptions& o) {
  const auto k = o.source(Setting::nproc_per_node).kind;
  if (o.nproc_per_node.kind != config::NprocSpec::Kind::count || k == Source::Kind::default_) return std::nullopt;
  if (k == Source::Kind::file && filtered(o)) return std::nullopt;
  return o.nproc_per_node.count;
}

/// The hosts of the job: the file or list, filtered, cut to --nnodes, with --nproc_per_node checked
/// against each host's slots.
Result<std::vector<config::Host>> job_hosts(const LaunchOptions& o, const FanoutInputs& in) {
  const auto& f = o.fanout;
  if (!f.hostfile.empty() && !f.hosts.empty()) {
    return fail(o.source(Setting::hostfile).where + " and " + o.source(Setting::hosts).where + " cannot be combined");
  }
  auto listed = f.hostfile.empty() ? config::parse_host_list(f.hosts, o.source(Setting::hosts).where)
                                   : config::parse_hostfile(in.hostfile_text, f.hostfile);
  if (!listed) return tl::unexpected(listed.error());
  auto hosts = config::filter_hosts(std::move(*listed), f.include, o.source(Setting::include).where, f.exclude,
                                    o.source(Setting::exclude).where);
  if (!hosts) return tl::unexpected(hosts.error());
  auto& h = *hosts;
  if (o.typed(Setting::nnodes)) {
    if (filtered(o)) return fail(o.source(Setting::nnodes).where + " cannot be combined with --include/--exclude (as in deepspeed)");
    if (o.min_nodes > static_cast<int>(h.size())) {
      return fail(o.named(Setting::nnodes, std::to_string(o.min_nodes)) + " but the host list has " +
                  std::to_string(h.size()) + " hosts");
    }
    h.resize(o.min_nodes);  // deepspeed's --num_nodes: the first N hosts
  }
  if (auto count = count_per_host(o)) {
    if (filtered(o)) {
      return fail(o.source(Setting::nproc_per_node).where + " cannot be combined with --include/--exclude (as in deepspeed)");
    }
    for (const auto& host : h) {  // deepspeed's --num_gpus: the first N slots of each host
      if (host.slots && *count > *host.slots) {
        return fail(o.named(Setting::nproc_per_node, std::to_string(*count)) + " but host " + host.name +
                    " has slots=" + std::to_string(*host.slots));
      }
    }
  }
  return hosts;
}

}  // namespace


const std::vector<std::string>& host_setting_names() {
  static const std::vector<std::string> names{"PET_NNODES",       "PET_NODE_RANK",  "PET_MASTER_ADDR",
                                              "PET_MASTER_PORT",  "PET_RDZV_BACKEND", "PET_NODE_NAME",
                                              "PET_NPROC_PER_NODE", "PET_GPU_IDS",  "DTLAUNCH_RDZV_TOKEN"};
  return names;
}


Result<FanoutPlan> plan_fanout(const LaunchOptions& o, const FanoutInputs& in) {
  if (auto allowed = refuse_fanout_conflicts(o); !allowed) return tl::unexpected(allowed.error());
  auto listed = job_hosts(o, in);
  if (!listed) return tl::unexpected(listed.error());
  const auto& hosts = *listed;

  // ssh's command line, as a shell would split --ssh_command (no command substitution).
  wordexp_t words;
  if (wordexp(o.fanout.ssh_command.c_str(), &words, WRDE_NOCMD) != 0) {
    return fail(o.named(Setting::ssh_command, o.fanout.ssh_command) + ": cannot split it as a shell would");
  }
  std::vector<std::string> ssh(words.we_wordv, words.we_wordv + words.we_wordc);
  wordfree(&words);
  if (ssh.empty()) return fail(o.named(Setting::ssh_command, o.fanout.ssh_command) + ": expected a program");
  auto ssh_path = in.find_program(ssh[0]);
  if (!ssh_path) return fail(o.named(Setting::ssh_command, o.fanout.ssh_command) + ": " + printable(ssh[0], 80) + " is not on PATH");
  ssh.insert(ssh.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"});
  if (o.fanout.ssh_port) ssh.insert(ssh.end(), {"-p", std::to_string(o.fanout.ssh_port)});

  Variables common = forwarded(in.environment);
  // deepspeed's multi-node runner: its working directory first, on every host; but under accelerate
  // launch, accelerate's own PYTHONPATH (the inherited one, then the working directory), which it
  // appends to ./.deepspeed_env, is the one every host ends up with (each agent's worker_variables)
  if (o.fanout.deepspeed_runner && !o.accelerate.launch) {
    const auto inherited = lookup(in.environment, "PYTHONPATH");
    common.emplace_back("PYTHONPATH", in.cwd + (inherited ? ":" + *inherited : ""));
  }
  for (const auto& [path, contents] : in.env_files) {
    auto vars = env_file(contents, path);
    if (!vars) return tl::unexpected(vars.error());
    for (auto& v : *vars) common.push_back(std::move(v));
  }
  for (const auto& item : o.fanout.exports) {
    const auto eq = item.find('=');
    if (eq != std::string::npos) {
      common.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    } else if (auto value = lookup(in.environment, item)) {
      common.emplace_back(item, *value);
    } else {
      return fail(o.source(Setting::export_).where + ": " + item + " is not set here");
    }
  }

  std::string remote = "cd " + shell_quote(in.cwd) + " && exec " + shell_quote(o.fanout.remote_dtlaunch) + " fanout-node";
  for (const auto& a : in.args) remote += " " + shell_quote(a);

  const bool master_given = o.source(Setting::master_addr).kind != Source::Kind::default_;
  // Without it, the first host's answer may name a better address (Fanout::go).
  const std::string master = master_given ? o.master_addr : meeting_address(hosts.front().name, {});
  const auto count = count_per_host(o);
  FanoutPlan plan;
  plan.ssh_path = *ssh_path;
  plan.remote_dtlaunch = o.fanout.remote_dtlaunch;
  plan.environment = in.environment;
  plan.stop_timeout_s = o.shutdown_timeout_s;
  plan.master_from_first_host = !master_given;
  for (size_t rank = 0; rank < hosts.size(); ++rank) {
    const auto& h = hosts[rank];
    NodeStart n{h.name, ssh, common};
    n.argv.insert(n.argv.end(), {h.name, remote});
    auto& v = n.variables;
    v.insert(v.end(), {{"PET_NNODES", std::to_string(hosts.size())},
                       {"PET_NODE_RANK", std::to_string(rank)},
                       {"PET_MASTER_ADDR", master},
                       {"PET_MASTER_PORT", std::to_string(o.master_port ? o.master_port : 29500)},
                       {"PET_RDZV_BACKEND", "static"},
                       {"PET_NODE_NAME", h.name},
                       {"DTLAUNCH_RDZV_TOKEN", in.token}});
    if (!o.typed(Setting::nproc_per_node)) {  // a typed count reaches the host as typed
      if (count) {  // from a config file, which the host may not have
        v.emplace_back("PET_NPROC_PER_NODE", std::to_string(*count));
      } else if (h.slots) {
        v.emplace_back("PET_NPROC_PER_NODE", std::to_string(h.chosen.empty() ? *h.slots : static_cast<int>(h.chosen.size())));
      }
    }
    if (!h.chosen.empty()) {
      std::vector<std::string> ids;
      for (int s : h.chosen) ids.push_back(std::to_string(s));
      v.emplace_back("PET_GPU_IDS", text::join(ids));
    }
    plan.nodes.push_back(std::move(n));
  }
  return plan;
}


std::vector<std::string> env_file_paths(const LaunchOptions& o, const EnvLookup& env, const std::string& cwd) {
  std::vector<std::string> paths;
  if (o.fanout.deepspeed_runner) {
    const std::string name = env("DS_ENV_FILE").value_or(".deepspeed_env");
    const auto under = [&](const std::string& dir) { return name.starts_with('/') ? name : dir + "/" + name; };
    if (auto home = env("HOME")) paths.push_back(under(*home));
    if (paths.empty() || paths.back() != under(cwd)) paths.push_back(under(cwd));
  }
  paths.push_back(cwd + "/.dtlaunch_env");
  return paths;
}

std::vector<std::string> environment_entries() {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) out.emplace_back(*e);
  return out;
}

Result<FanoutInputs> read_fanout_inputs(const LaunchOptions& o, const std::vector<std::string>& args,
                                        const EnvLookup& env) {
  FanoutInputs in;
  in.args = args;
  in.environment = environment_entries();
  in.cwd = posix::current_directory();
  const auto read = config::disk_files();
  if (!o.fanout.hostfile.empty()) {
    auto file = read(o.fanout.hostfile);
    if (file.status != config::FileRead::Status::ok) {
      return fail(o.source(Setting::hostfile).where + ": cannot read " + o.fanout.hostfile + ": " +
                  (file.status == config::FileRead::Status::missing ? "no such file" : file.text));
    }
    in.hostfile_text = file.text;
  }
  for (const auto& path : env_file_paths(o, env, in.cwd)) {
    if (auto file = read(path); file.status == config::FileRead::Status::ok) in.env_files.emplace_back(path, file.text);
  }
  for (uint8_t byte : rendezvous::random_nonce()) in.token += fmt::format("{:02x}", byte);  // a secret: OpenSSL's
  const std::string path = env("PATH").value_or("");
  in.find_program = [path](const std::string& name) { return posix::find_executable(name, path); };
  return in;
}

}  // namespace dtl::fanout

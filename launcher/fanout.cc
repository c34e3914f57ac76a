#include "launcher/fanout.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <array>
#include <chrono>
#include <memory>
#include <sstream>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "base/posix.h"
#include "config/flags.h"
#include "config/hostfile.h"
#include "config/text.h"
#include "launcher/console.h"
#include "launcher/line_prefixer.h"
#include "launcher/spawn.h"

#ifndef DTL_VERSION
#define DTL_VERSION "unknown"
#endif

namespace dtl::launcher {
namespace asio = boost::asio;
using config::LaunchOptions;
using config::Source;

namespace {

constexpr size_t kMaxVariablesBytes = 1 << 20;
/// The first word of a node's hello; its version follows.
constexpr std::string_view kHelloWord = "dtlaunch-node ";
/// How long every host has to answer the preflight (ssh's own ConnectTimeout is 10 s).
constexpr auto kPreflightTimeout = std::chrono::seconds(30);
/// The variable prefixes every host's agent gets from here (DeepSpeed forwards the same kind).
constexpr std::array kForwardedPrefixes = {"NCCL_", "GLOO_", "PYTHON", "CUDA_", "TORCH_", "HF_", "OMP_"};
/// Of those, what says something about this machine only: which of its GPUs (a login node's, or
/// Slurm's for this step's). Sent on, it narrowed every host to this one's GPUs; deepspeed's runner
/// does not send it either. `--export CUDA_VISIBLE_DEVICES` still does.
constexpr std::array kThisHostOnly = {"CUDA_VISIBLE_DEVICES"};

bool typed(const LaunchOptions& o, const char* name) {
  const auto k = o.source(name).kind;
  return k == Source::Kind::flag || k == Source::Kind::env;
}

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
std::variant<Variables, Error> env_file(const std::string& text, const std::string& path) {
  Variables out;
  int line = 0;
  for (auto raw : text::split(text, '\n')) {
    ++line;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    if (raw.empty() || raw[0] == '#') continue;
    const auto eq = raw.find('=');
    const std::string name = eq == std::string::npos ? "" : text::trim(raw.substr(0, eq));
    if (!text::is_variable_name(name)) {
      return Error{path + ":" + std::to_string(line) + ": expected NAME=VALUE, got " + printable(raw, 80), 2};
    }
    out.emplace_back(name, text::trim(raw.substr(eq + 1)));
  }
  return out;
}

/// The settings the fan-out decides for every host; given anyway, they are an error, not ignored.
std::optional<Error> refuse_fanout_conflicts(const LaunchOptions& o) {
  const auto refuse = [&](const char* name, const std::string& why) -> std::optional<Error> {
    const auto k = o.source(name).kind;
    if (k == Source::Kind::default_ || k == Source::Kind::file) return std::nullopt;
    return Error{o.source(name).where + " cannot be combined with " + o.source(o.fanout.hostfile.empty() ? "hosts" : "hostfile").where + ": " + why, 2};
  };
  for (const auto& [name, why] : std::vector<std::pair<const char*, std::string>>{
           {"node_rank", "each host's rank is its place in the host list"},
           {"rdzv_backend", "the hosts meet through the static rendezvous on the first host"},
           {"rdzv_endpoint", "the hosts meet at --master_addr:--master_port (the first host by default)"},
           {"standalone", "the job runs on the listed hosts"},
           {"rdzv_token", "every job gets a fresh token, sent to the hosts over ssh"},
           {"rdzv_token_file", "every job gets a fresh token, sent to the hosts over ssh"},
           {"node_name", "each host is named as in the host list"}}) {
    if (auto e = refuse(name, why)) return e;
  }
  if (typed(o, "nnodes") && o.min_nodes != o.max_nodes) {
    return Error{o.named("nnodes", std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes)) +
                     ": the fan-out starts a fixed number of hosts",
                 2};
  }
  return std::nullopt;
}

bool filtered(const LaunchOptions& o) { return !o.fanout.include.empty() || !o.fanout.exclude.empty(); }

/// The workers of every host when a count was set, flag, variable or config file: deepspeed's
/// --num_gpus, which is also what accelerate passes for num_processes / num_machines (and leaves out
/// when a filter names the slots). nullopt: each host's slots decide.
std::optional<int> count_per_host(const LaunchOptions& o) {
  const auto k = o.source("nproc_per_node").kind;
  if (o.nproc_per_node.kind != config::NprocSpec::Kind::count || k == Source::Kind::default_) return std::nullopt;
  if (k == Source::Kind::file && filtered(o)) return std::nullopt;
  return o.nproc_per_node.count;
}

/// The hosts of the job: the file or list, filtered, cut to --nnodes, with --nproc_per_node checked
/// against each host's slots.
std::variant<std::vector<config::Host>, Error> job_hosts(const LaunchOptions& o, const FanoutInputs& in) {
  const auto& f = o.fanout;
  if (!f.hostfile.empty() && !f.hosts.empty()) {
    return Error{o.source("hostfile").where + " and " + o.source("hosts").where + " cannot be combined", 2};
  }
  auto listed = f.hostfile.empty() ? config::parse_host_list(f.hosts, o.source("hosts").where)
                                   : config::parse_hostfile(in.hostfile_text, f.hostfile);
  if (auto* e = std::get_if<Error>(&listed)) return *e;
  auto hosts = config::filter_hosts(std::get<std::vector<config::Host>>(std::move(listed)), f.include,
                                    o.source("include").where, f.exclude, o.source("exclude").where);
  if (auto* e = std::get_if<Error>(&hosts)) return *e;
  auto& h = std::get<std::vector<config::Host>>(hosts);
  if (typed(o, "nnodes")) {
    if (filtered(o)) return Error{o.source("nnodes").where + " cannot be combined with --include/--exclude (as in deepspeed)", 2};
    if (o.min_nodes > static_cast<int>(h.size())) {
      return Error{o.named("nnodes", std::to_string(o.min_nodes)) + " but the host list has " +
                       std::to_string(h.size()) + " hosts",
                   2};
    }
    h.resize(o.min_nodes);  // deepspeed's --num_nodes: the first N hosts
  }
  if (auto count = count_per_host(o)) {
    if (filtered(o)) {
      return Error{o.source("nproc_per_node").where + " cannot be combined with --include/--exclude (as in deepspeed)", 2};
    }
    for (const auto& host : h) {  // deepspeed's --num_gpus: the first N slots of each host
      if (host.slots && *count > *host.slots) {
        return Error{o.named("nproc_per_node", std::to_string(*count)) + " but host " + host.name +
                         " has slots=" + std::to_string(*host.slots),
                     2};
      }
    }
  }
  return hosts;
}

}  // namespace

std::optional<Error> refuse_fanout_settings_without_hosts(const LaunchOptions& o) {
  if (o.fanout.agent || o.fanout.wanted()) return std::nullopt;
  for (const char* name : {"hostfile", "hosts"}) {
    if (typed(o, name)) return Error{o.source(name).where + " is empty: no host to start", 2};
  }
  for (const char* name : {"include", "exclude"}) {
    if (typed(o, name)) {
      return Error{o.source(name).where + " filters the hosts of --hostfile or --hosts, and there are none (this "
                   "machine's GPUs are chosen with --gpu_ids)", 2};
    }
  }
  return std::nullopt;
}

std::string shell_quote(const std::string& s) { return "'" + text::replace_all(s, "'", "'\\''") + "'"; }

const std::vector<std::string>& host_setting_names() {
  static const std::vector<std::string> names{"PET_NNODES",       "PET_NODE_RANK",  "PET_MASTER_ADDR",
                                              "PET_MASTER_PORT",  "PET_RDZV_BACKEND", "PET_NODE_NAME",
                                              "PET_NPROC_PER_NODE", "PET_GPU_IDS",  "DTLAUNCH_RDZV_TOKEN"};
  return names;
}

std::string node_hello(const std::vector<std::string>& addresses) {
  std::string line = std::string(kHelloWord) + DTL_VERSION;
  for (const auto& a : addresses) line += " " + a;
  return line;
}

std::optional<Hello> parse_hello(std::string_view line) {
  if (!line.starts_with(kHelloWord)) return std::nullopt;
  std::istringstream words{std::string(line.substr(kHelloWord.size()))};
  Hello h;
  words >> h.version;
  for (std::string a; words >> a;) h.addresses.push_back(a);
  return h;
}

std::string meeting_address(const std::string& first_host, const std::vector<std::string>& reported) {
  const std::string host = first_host.substr(first_host.rfind('@') + 1);  // ssh's user@host is a login
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (!ec || reported.empty()) return host;
  return reported.front();
}

std::string encode_variables(const Variables& vars) {
  std::string out;
  for (const auto& [name, value] : vars) out += name + "=" + value + '\0';
  return out + '\0';
}

std::optional<Variables> read_variables(int fd) {
  std::string data;
  char c;
  Variables vars;
  while (data.size() < kMaxVariablesBytes) {
    ssize_t n = posix::retry_eintr([&] { return ::read(fd, &c, 1); });
    if (n <= 0) return std::nullopt;
    if (c != '\0') {
      data += c;
      continue;
    }
    if (data.empty()) return vars;
    const auto eq = data.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    vars.emplace_back(data.substr(0, eq), data.substr(eq + 1));
    data.clear();
  }
  return std::nullopt;
}

std::variant<FanoutPlan, Error> plan_fanout(const LaunchOptions& o, const FanoutInputs& in) {
  if (auto e = refuse_fanout_conflicts(o)) return *e;
  auto listed = job_hosts(o, in);
  if (auto* e = std::get_if<Error>(&listed)) return *e;
  const auto& hosts = std::get<std::vector<config::Host>>(listed);

  // ssh's command line, as a shell would split --ssh_command (no command substitution).
  wordexp_t words;
  if (wordexp(o.fanout.ssh_command.c_str(), &words, WRDE_NOCMD) != 0) {
    return Error{o.named("ssh_command", o.fanout.ssh_command) + ": cannot split it as a shell would", 2};
  }
  std::vector<std::string> ssh(words.we_wordv, words.we_wordv + words.we_wordc);
  wordfree(&words);
  if (ssh.empty()) return Error{o.named("ssh_command", o.fanout.ssh_command) + ": expected a program", 2};
  auto ssh_path = in.find_program(ssh[0]);
  if (!ssh_path) return Error{o.named("ssh_command", o.fanout.ssh_command) + ": " + printable(ssh[0], 80) + " is not on PATH", 2};
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
    if (auto* e = std::get_if<Error>(&vars)) return *e;
    for (auto& v : std::get<Variables>(vars)) common.push_back(std::move(v));
  }
  for (const auto& item : o.fanout.exports) {
    const auto eq = item.find('=');
    if (eq != std::string::npos) {
      common.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    } else if (auto value = lookup(in.environment, item)) {
      common.emplace_back(item, *value);
    } else {
      return Error{o.source("export").where + ": " + item + " is not set here", 2};
    }
  }

  std::string remote = "cd " + shell_quote(in.cwd) + " && exec " + shell_quote(o.fanout.remote_dtlaunch) + " fanout-node";
  for (const auto& a : in.args) remote += " " + shell_quote(a);

  const bool master_given = o.source("master_addr").kind != Source::Kind::default_;
  // Without it, the first host's answer may name a better address (Fanout::go).
  const std::string master = master_given ? o.master_addr : meeting_address(hosts.front().name, {});
  const auto count = count_per_host(o);
  FanoutPlan plan;
  plan.ssh_path = *ssh_path;
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
    if (!typed(o, "nproc_per_node")) {  // a typed count reaches the host as typed
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

}  // namespace dtl::launcher

extern char** environ;

namespace dtl::launcher {

std::vector<std::string> env_file_paths(const LaunchOptions& o, const config::EnvLookup& env, const std::string& cwd) {
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

namespace {

/// One host's ssh: its pipes, its output as whole lines with the host in front, and how it ended.
struct Node {
  explicit Node(asio::io_context& io, const NodeStart& s)
      : start(s), in(io), out(io), err(io), out_lines(s.host + ": "), err_lines(s.host + ": ") {}
  const NodeStart& start;
  pid_t pid = -1;
  asio::posix::stream_descriptor in, out, err;
  LinePrefixer out_lines, err_lines;
  std::array<char, 16384> out_buf{}, err_buf{};
  std::string before_hello;     ///< stdout until the hello line
  bool answered = false;        ///< the hello came, with this version
  std::vector<std::string> addresses;  ///< the host's, from its hello
  std::string last_error_line;  ///< ssh's or the shell's last word on stderr, for the preflight
  int open_streams = 2;
  std::optional<int> status;    ///< waitpid's
  std::string variables;        ///< the wire's step 2, kept alive while it is written
};

class Fanout {
 public:
  Fanout(const FanoutPlan& plan, Console& console) : plan_(plan), console_(console), signals_(io_), timer_(io_) {}

  int run() {
    signals_.add(SIGCHLD);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signals_.add(sig);
    wait_signal();
    for (const auto& s : plan_.nodes) nodes_.push_back(std::make_unique<Node>(io_, s));
    for (auto& n : nodes_) start(*n);
    timer_.expires_after(kPreflightTimeout);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || preflight_done_) return;
      for (auto& n : nodes_) {
        if (!n->answered) return fail_preflight(*n, "no answer in " + std::to_string(kPreflightTimeout.count()) + " s", 2);
      }
    });
    io_.run();
    console_.forget(io_);
    if (error_) {
      console_.write(2, error_line(*error_));
      return error_->exit_code;
    }
    return exit_code();
  }

 private:
  void start(Node& n) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
      throw std::system_error(errno, std::generic_category(), "pipe");
    }
    SpawnSpec spec{plan_.ssh_path, n.start.argv, plan_.environment, in[0], out[1], err[1]};
    n.pid = spawn_worker(spec);
    for (int fd : {in[0], out[1], err[1]}) ::close(fd);
    n.in.assign(in[1]);
    n.out.assign(out[0]);
    n.err.assign(err[0]);
    read(n, n.out, n.out_buf, 1);
    read(n, n.err, n.err_buf, 2);
  }

  void read(Node& n, asio::posix::stream_descriptor& pipe, std::array<char, 16384>& buf, int fd) {
    pipe.async_read_some(asio::buffer(buf), [this, &n, &pipe, &buf, fd](const boost::system::error_code& ec, size_t got) {
      std::string_view chunk(buf.data(), got);
      std::string after_hello;  // only until the hello: the output after it is not copied
      if (fd == 1 && !n.answered) chunk = after_hello = hello(n, chunk);
      std::string lines;
      (fd == 1 ? n.out_lines : n.err_lines).feed(chunk, lines);
      if (fd == 2 && !lines.empty()) remember_error(n, lines);
      if (ec) (fd == 1 ? n.out_lines : n.err_lines).finish(lines);
      // Before every host answered, a host's complaints wait for the preflight's verdict.
      if (!lines.empty() && (preflight_done_ || fd == 1)) console_.write(fd, lines);
      if (ec) {
        --n.open_streams;
        return maybe_finish();
      }
      if (console_.backed_up()) {
        console_.when_drained(io_, [this, &n, &pipe, &buf, fd] { read(n, pipe, buf, fd); });
        return;
      }
      read(n, pipe, buf, fd);
    });
  }

  /// Takes the hello line off the front of a node's stdout; returns what follows it.
  std::string hello(Node& n, std::string_view chunk) {
    n.before_hello.append(chunk);
    const auto eol = n.before_hello.find('\n');
    if (eol == std::string::npos) {
      if (n.before_hello.size() > 4096) n.before_hello.erase(0, n.before_hello.size() - 4096);
      return {};
    }
    const std::string line = n.before_hello.substr(0, eol);
    std::string rest = n.before_hello.substr(eol + 1);
    n.before_hello.clear();
    auto said = parse_hello(line);
    if (!said || said->version != DTL_VERSION) {
      fail_preflight(n, said ? "runs " + printable(said->version, 40) + ", not this dtlaunch " DTL_VERSION
                             : "said " + printable(line, 120) + " instead of hello",
                     2);
      return rest;
    }
    n.addresses = std::move(said->addresses);
    n.answered = true;
    if (std::all_of(nodes_.begin(), nodes_.end(), [](const auto& m) { return m->answered; })) go();
    return rest;
  }

  void remember_error(Node& n, const std::string& lines) {
    auto end = lines.find_last_not_of('\n');
    auto begin = lines.rfind('\n', end);
    begin = begin == std::string::npos ? 0 : begin + 1;
    n.last_error_line = lines.substr(begin + n.start.host.size() + 2, end + 1 - begin - n.start.host.size() - 2);
    while (!n.last_error_line.empty() && n.last_error_line.back() == '\r') n.last_error_line.pop_back();
  }

  /// Every host answered: each gets its variables (the token among them), and the job starts.
  void go() {
    // Stopped before the last answer (Ctrl-C, a failed host): nothing starts, and the kill timer stays.
    if (stopping_) return;
    preflight_done_ = true;
    timer_.cancel();
    std::optional<std::string> master;
    if (plan_.master_from_first_host) {
      const auto& first = *nodes_.front();
      master = meeting_address(first.start.host, first.addresses);
      spdlog::info("the hosts meet at {} ({}; --master_addr chooses another)", *master,
                   *master == meeting_address(first.start.host, {}) ? "the first host"
                                                                     : "the first address host " + first.start.host + " has");
    }
    for (auto& n : nodes_) {
      auto vars = n->start.variables;
      for (auto& [name, value] : vars) {
        if (master && name == "PET_MASTER_ADDR") value = *master;
      }
      n->variables = encode_variables(vars);
      asio::async_write(n->in, asio::buffer(n->variables), [](const boost::system::error_code&, size_t) {});
    }
  }

  void fail_preflight(Node& n, const std::string& why, int code) {
    // Already stopping: a host that fails now is a consequence (of Ctrl-C, of the first failure).
    if (stopping_ || preflight_done_) return;
    error_ = Error{"host " + n.start.host + ": " + why + " (preflight; nothing was started)", code};
    stop();
  }

  /// Closing the agents' stdin stops them (their workers first); ssh is killed if they take too long.
  void stop() {
    if (stopping_) return;
    stopping_ = true;
    for (auto& n : nodes_) {
      boost::system::error_code ignored;
      n->in.close(ignored);
      // A host that has not answered runs nothing yet, and ssh may wait on it for long: no grace period.
      if (!preflight_done_ && !n->answered && !n->status) ::kill(n->pid, SIGTERM);
    }
    arm_kill(std::chrono::milliseconds(static_cast<long>((plan_.stop_timeout_s + 10) * 1000)), SIGTERM);
  }

  void arm_kill(std::chrono::milliseconds after, int sig) {
    timer_.expires_after(after);
    timer_.async_wait([this, sig](const boost::system::error_code& ec) {
      if (ec) return;
      for (auto& n : nodes_) {
        if (!n->status) ::kill(n->pid, sig);
      }
      if (sig == SIGTERM) arm_kill(std::chrono::seconds(5), SIGKILL);
    });
  }

  void wait_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGCHLD) {
        reap();
      } else if (stopping_) {  // a second Ctrl-C: no more waiting for the hosts
        for (auto& n : nodes_) {
          if (!n->status) ::kill(n->pid, SIGTERM);
        }
      } else {
        console_.write(2, "dtlaunch: stopping " + std::to_string(nodes_.size()) + (nodes_.size() == 1 ? " host (" : " hosts (") +
                                  strsignal(sig) + ")\n");
        signal_ = sig;
        stop();
      }
      if (!finished_) wait_signal();
    });
  }

  void reap() {
    for (auto& n : nodes_) {
      int status = 0;
      if (n->status || waitpid(n->pid, &status, WNOHANG) != n->pid) continue;
      n->status = status;
      // A host gone before the preflight ended: the job cannot start.
      if (!preflight_done_ && !n->answered) {
        const std::string said = n->last_error_line.empty() ? "ssh ended with " + describe(status) : printable(n->last_error_line, 300);
        fail_preflight(*n, said, 2);
      } else if (code(status) != 0 && !stopping_) {
        // One host's agent gone with a failure: the static job cannot go on without it.
        first_failure_ = code(status);
        console_.write(2, "dtlaunch: host " + n->start.host + "'s agent ended with " + describe(status) +
                              "; stopping the other hosts\n");
        stop();
      }
    }
    maybe_finish();
  }

  void maybe_finish() {
    for (auto& n : nodes_) {
      if (!n->status || n->open_streams > 0) return;
    }
    finished_ = true;
    signals_.cancel();
    timer_.cancel();
  }

  static std::string describe(int status) {
    if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    return "exit code " + std::to_string(WEXITSTATUS(status));
  }

  static int code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

  /// A signal here: 128 + it. Else the code of the first host whose agent ended with a failure
  /// before anything was stopped: every agent exits with the root cause's code when the job fails,
  /// and a host whose agent died (ssh's 255) or never joined ends first. Else the first host's.
  int exit_code() const {
    if (signal_) return 128 + signal_;
    if (first_failure_) return first_failure_;
    for (const auto& n : nodes_) {
      if (code(*n->status) != 0) return code(*n->status);
    }
    return 0;
  }

  const FanoutPlan& plan_;
  Console& console_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer timer_;
  std::vector<std::unique_ptr<Node>> nodes_;
  bool preflight_done_ = false;
  bool stopping_ = false;
  bool finished_ = false;  ///< every ssh ended and its output was read
  int signal_ = 0;
  int first_failure_ = 0;
  std::optional<Error> error_;
};

}  // namespace

int run_fanout(const FanoutPlan& plan, Console& console) {
  // Three pipes a host: under the usual soft limit of 1024 about 300 hosts were the most. Each ssh
  // gets back the limit this process had (spawn.cc).
  posix::raise_fd_limit();
  return Fanout(plan, console).run();
}

}  // namespace dtl::launcher

#include "config/hostfile.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// A host name as ssh and the rendezvous take it: no spaces, no shell or option tricks.
bool valid_host(const std::string& h) {
  if (h.empty() || h.size() > 253 || h[0] == '-') return false;
  return std::all_of(h.begin(), h.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
           c == '_' || c == ':' || c == '[' || c == ']' || c == '@';
  });
}

std::optional<int> count(const std::string& text) {
  auto n = text::to_long(text);
  if (!n || *n < 1 || *n > 4096) return std::nullopt;
  return static_cast<int>(*n);
}

/// Adds `h`; a second entry for one host is an error (`where` names the entry).
Status add(std::vector<Host>& hosts, Host h, const std::string& where) {
  for (const auto& other : hosts) {
    if (other.name == h.name) return fail(where + ": host " + printable(h.name) + " is listed twice");
  }
  hosts.push_back(std::move(h));
  return {};
}

}  // namespace

Result<std::vector<Host>> parse_hostfile(const std::string& text, const std::string& path) {
  std::vector<Host> hosts;
  int line = 0;
  for (auto content : text::split(text, '\n')) {
    ++line;
    if (auto hash = content.find('#'); hash != std::string::npos) content.resize(hash);
    for (char& c : content) c = c == '\t' || c == '\r' ? ' ' : c;
    std::vector<std::string> words;
    for (const auto& w : text::split(content, ' ')) {
      if (!w.empty()) words.push_back(w);
    }
    if (words.empty()) continue;
    const std::string where = path + ":" + std::to_string(line);
    if (!valid_host(words[0])) return fail(where + ": expected a host name, got " + printable(words[0], 80));
    Host h{words[0], std::nullopt, {}};
    if (words.size() > 2 || (words.size() == 2 && words[1].rfind("slots=", 0) != 0)) {
      return fail(where + ": expected 'host slots=N' or 'host', got " + printable(text::trim(content), 120));
    }
    if (words.size() == 2) {
      h.slots = count(words[1].substr(6));
      if (!h.slots) return fail(where + ": expected slots=N with N in 1..4096, got " + printable(words[1], 80));
    }
    if (auto added = add(hosts, std::move(h), where); !added) return tl::unexpected(added.error());
  }
  if (hosts.empty()) return fail(path + ": no hosts (expected lines of 'host slots=N')");
  return hosts;
}

Result<std::vector<Host>> parse_host_list(const std::string& list, const std::string& from) {
  std::vector<Host> hosts;
  for (const auto& item : text::split(list, ',')) {
    // A count follows the last ':'. An IPv6 address takes a count in brackets ([::1]:4); bare (::1),
    // all of it is the address.
    const bool bracketed = item.starts_with('[');
    if (bracketed && item.find(']') == std::string::npos) {
      return fail(from + ": expected ] after the IPv6 address in " + printable(item, 80));
    }
    const bool bare_ipv6 = !bracketed && std::count(item.begin(), item.end(), ':') > 1;
    const auto colon = item.rfind(':');
    const bool counted = colon != std::string::npos && !bare_ipv6 && item.find(']', colon) == std::string::npos;
    Host h{counted ? item.substr(0, colon) : item, std::nullopt, {}};
    if (bracketed) {
      if (h.name.back() != ']') return fail(from + ": expected host[:slots],..., got " + printable(item, 80));
      h.name = h.name.substr(1, h.name.size() - 2);
    }
    if (!valid_host(h.name)) return fail(from + ": expected host[:slots],..., got " + printable(item, 80));
    if (counted && !(h.slots = count(item.substr(colon + 1)))) {
      return fail(from + ": expected a slot count in 1..4096 after " + printable(h.name, 80) + ":");
    }
    if (auto added = add(hosts, std::move(h), from); !added) return tl::unexpected(added.error());
  }
  return hosts;
}

Result<std::vector<Host>> filter_hosts(std::vector<Host> hosts, const std::string& include,
                                       const std::string& include_from, const std::string& exclude,
                                       const std::string& exclude_from) {
  if (include.empty() && exclude.empty()) return hosts;
  if (!include.empty() && !exclude.empty()) {
    return fail(include_from + " and " + exclude_from + " cannot be combined (as in deepspeed)");
  }
  const bool including = !include.empty();
  const std::string& from = including ? include_from : exclude_from;
  // Every host named, with the slots named for it (empty: the whole host).
  std::map<std::string, std::set<int>> named;
  for (const auto& spec : text::split(including ? include : exclude, '@')) {
    const auto colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const Host& h) { return h.name == name; });
    if (it == hosts.end()) return fail(from + ": host " + printable(name, 80) + " is not in the host list");
    auto& slots = named[name];
    if (colon == std::string::npos) continue;
    for (const auto& s : text::split(spec.substr(colon + 1), ',')) {
      auto slot = text::to_long(s);
      if (!slot || *slot < 0) return fail(from + ": expected slot numbers after " + printable(name, 80) + ":");
      if (!it->slots) {
        return fail(from + ": host " + printable(name, 80) + " has no slots=N in the host list, so its slots cannot be named");
      }
      if (*slot >= *it->slots) {
        return fail(from + ": host " + printable(name, 80) + " has no slot " + std::to_string(*slot) + " (it has " +
                    std::to_string(*it->slots) + ")");
      }
      slots.insert(static_cast<int>(*slot));
    }
  }
  std::vector<Host> kept;
  for (auto& h : hosts) {
    auto it = named.find(h.name);
    std::vector<int> all;
    for (int s = 0; s < h.slots.value_or(0); ++s) all.push_back(s);
    std::vector<int> chosen;
    if (including) {
      if (it == named.end()) continue;
      chosen = it->second.empty() ? all : std::vector<int>(it->second.begin(), it->second.end());
    } else {
      if (it != named.end() && it->second.empty()) continue;
      for (int s : all) {
        if (it == named.end() || !it->second.count(s)) chosen.push_back(s);
      }
      if (h.slots && chosen.empty()) continue;
    }
    if (chosen == all) chosen.clear();
    h.chosen = std::move(chosen);
    kept.push_back(std::move(h));
  }
  if (kept.empty()) return fail(from + ": no host is left");
  return kept;
}

Status refuse_host_settings_without_hosts(const LaunchOptions& o) {
  if (o.fanout.agent || o.fanout.wanted()) return {};
  for (Setting name : {Setting::hostfile, Setting::hosts}) {
    if (o.typed(name)) return fail(o.source(name).where + " is empty: no host to start");
  }
  for (Setting name : {Setting::include, Setting::exclude}) {
    if (o.typed(name)) {
      return fail(o.source(name).where + " filters the hosts of --hostfile or --hosts, and there are none (this "
                  "machine's GPUs are chosen with --gpu_ids)");
    }
  }
  return {};
}

}  // namespace dtl::config

#include "watch/flight_recorder.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "base/printable.h"
#include "base/text.h"

namespace dtl::watch {

namespace {

constexpr const char* kHook = R"py(

def _dtlaunch_flight_recorder():
    # dtlaunch asks this rank for torch's flight recorder through a FIFO of its own: a thread blocked
    # on it answers even while the main thread waits in a collective. Out of the environment, so
    # that the rank's own Python children do not wait on it too.
    fifo = os.environ.pop("DTLAUNCH_FR_TRIGGER", None)
    if not os.environ.get("DTLAUNCH_STACKS_SIGNAL"):
        # Only this hook needed dtlaunch's folder first on PYTHONPATH: the rank and its children see
        # the PYTHONPATH torchrun would have given (faulthandler's hook, where it is used, keeps it
        # for the rank's Python children).
        here = os.path.dirname(os.path.abspath(__file__))
        parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if parts[0] and os.path.abspath(parts[0]) == here:
            if len(parts) > 1:
                os.environ["PYTHONPATH"] = os.pathsep.join(parts[1:])
            else:
                del os.environ["PYTHONPATH"]
    if not fifo:
        return
    import threading

    def write(path, data):
        partial = os.path.join(os.path.dirname(path), f".dtlaunch-partial-{os.getpid()}")
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)

    def record():
        # never an import from here: the main thread may be importing torch now
        dist = sys.modules.get("torch.distributed")
        c10d = sys.modules.get("torch._C._distributed_c10d")
        if dist is None or c10d is None:
            raise RuntimeError("torch.distributed is not imported")
        if not hasattr(c10d, "_dump_fr_trace"):
            raise RuntimeError(f"torch {sys.modules['torch'].__version__} has no flight recorder")
        if not dist.is_initialized():
            raise RuntimeError("no process group yet")
        import pickle
        dumps = [lambda: c10d._dump_fr_trace(includeStackTraces=False)]
        if "nccl" in str(dist.get_backend()) and hasattr(c10d, "_dump_nccl_trace"):
            dumps.insert(0, lambda: c10d._dump_nccl_trace(includeStackTraces=False))
        for dump in dumps:
            raw = dump()
            if pickle.loads(raw).get("entries"):
                break
        return raw

    def times(raw):
        import json
        import pickle
        entries = pickle.loads(raw).get("entries") or []
        return json.dumps([[e["process_group"][0], e["collective_seq_id"], e["time_created_ns"], e["profiling_name"]]
                           for e in entries if not e.get("is_p2p")][-256:]).encode()

    def serve():
        while True:
            try:
                with open(fifo, "rb") as f:  # blocks until dtlaunch opens it to write
                    request = f.read(65536).decode(errors="replace").split("\n")
            except OSError:
                return
            if len(request) < 4:
                continue
            kind, out, status, request_id = request[:4]
            try:
                raw = record()
                write(out, times(raw) if kind == "times" else raw)
                answer = f"{request_id}\tok\t{sys.executable}\n"
            except Exception as e:  # the rank goes on without a record, and dtlaunch says why
                why = " ".join(str(e).split())
                answer = f"{request_id}\tno\t{why}\n"
            try:
                write(status, answer.encode())
            except OSError:
                pass

    threading.Thread(target=serve, name="dtlaunch-flight-recorder", daemon=True).start()


try:
    _dtlaunch_flight_recorder()
except Exception as e:  # a worker runs without it rather than not at all
    print(f"dtlaunch: no flight recorder's record for this worker: {e}", file=sys.stderr)
)py";

constexpr const char* kAnalyzer =
    R"py(# Written by dtlaunch: every rank's flight recorder (torch's record of its collectives) read by
# torch's own analyzer, fr_trace, for dtlaunch's hang report (dtlaunch's docs: hangs.md).
#   verdict DIR PREFIX          the first collective where the ranks part, as one JSON object
#   export DIR PREFIX BUDGET    each record's last entries, JSON lines of at most BUDGET bytes in all
#   import FILE DIR PREFIX      such lines as records DIR/PREFIX<rank>, then their verdict
#   progress DIR PREFIX NOW_NS  each record's oldest collective not completed, and how long ago it was called
import json
import logging
import os
import pickle
import re
import sys

# What fr_trace reads of an entry: a node's part carries these only (no stacks).
FIELDS = ("record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
          "time_created_ns", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state", "retired",
          "is_p2p", "timeout_ms")


def records(folder, prefix):
    """{rank: path} of the records in `folder`."""
    found = {}
    for name in os.listdir(folder):
        m = re.fullmatch(re.escape(prefix) + r"(\d+)", name)
        if m:
            found[int(m.group(1))] = os.path.join(folder, name)
    return found


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


def save(path, dump):
    partial = os.path.join(os.path.dirname(path), f".partial-{os.getpid()}")
    with open(partial, "wb") as f:
        pickle.dump(dump, f)
    os.replace(partial, path)


def put_pg_config_right(folder, prefix):
    """torch 2.15's Gloo records name one group '' in pg_config, whatever their entries say, and
    fr_trace then fails (KeyError). Such a record gets one group per name its entries use: the default
    group's ranks are that '' group's (the world's), another group's the ranks whose entries name it.
    A record whose pg_config names its entries' groups is left as it is."""
    dumps = {rank: load(path) for rank, path in records(folder, prefix).items()}
    seen = {}
    for rank, d in dumps.items():
        for e in d["entries"]:
            seen.setdefault(tuple(e["process_group"]), set()).add(rank)
    for rank, d in dumps.items():
        config = d.get("pg_config") or {}
        if {e["process_group"][0] for e in d["entries"]} <= set(config):
            continue
        world = next((c["ranks"] for c in config.values() if c.get("ranks")), None)
        d["pg_config"] = {name: {"name": name, "desc": desc,
                                 "ranks": world if desc == "default_pg" and world else str(sorted(ranks))}
                          for (name, desc), ranks in seen.items()}
        save(os.path.join(folder, f"{prefix}{rank}"), d)


def entry_at(entries, pg, seq):
    for e in entries:
        if e["process_group"][0] == pg and not e["is_p2p"] and e["collective_seq_id"] == seq:
            return e
    return None


def describe(e):
    return {"seq": e["collective_seq_id"], "op": e["profiling_name"].split(":", 1)[-1],
            "sizes": str(e["input_sizes"]), "dtypes": ",".join(e["input_dtypes"] or []),
            "retired": bool(e.get("retired"))}


def analyze(folder, prefix, first):
    """fr_trace's database over the records, rank `first`'s compared with the others (fr_trace takes
    whichever file the folder lists first); and each rank's entries as loaded."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir
    args = JobConfig().parse_args([folder, "--prefix", prefix, "--allow-incomplete-ranks"])
    details, version = read_dir(args)
    keys = sorted(details, key=lambda k: (details[k]["rank"] != first, details[k]["rank"]))
    details = {k: details[k] for k in keys}
    entries = {d["rank"]: list(d["entries"]) for d in details.values()}
    return build_db(details, args, version), entries, version


def problems(db):
    """fr_trace's collectives where the ranks part: a mismatch, or ranks that never joined."""
    return [c for c in db.collectives if not c.pass_check or c.missing_ranks]


def majority_rank(c, entries, first):
    """fr_trace blames every rank that differs from the one it compares with: that is one of the most
    ranks that agree where the ranks part (the lowest rank's own on a tie). None when it is `first`."""
    groups = {}
    for r in sorted(entries):
        e = entry_at(entries[r], c.group_id, c.collective_seq_id)
        if e is not None:
            key = (e["profiling_name"], str(e["input_sizes"]), str(e["output_sizes"]), str(e["input_dtypes"]),
                   str(e["output_dtypes"]))
            groups.setdefault(key, []).append(r)
    own = next((g for g in groups.values() if first in g), [])
    best = max(groups.values(), key=len, default=[])
    return best[0] if len(best) > len(own) else None


def verdict(folder, prefix):
    logging.disable(logging.CRITICAL)  # fr_trace's own text: dtlaunch prints the verdict
    put_pg_config_right(folder, prefix)
    first = min(records(folder, prefix))
    db, entries, version = analyze(folder, prefix, first)
    bad = problems(db)
    if bad and bad[0].mismatch_collectives:
        other = majority_rank(bad[0], entries, first)
        if other is not None:
            first = other
            db, entries, version = analyze(folder, prefix, first)
            bad = problems(db)
    out = {"version": version, "ranks": sorted(entries), "collectives": len(db.collectives), "problems": len(bad),
           "compared_with": first}
    if not bad:
        last = {}
        for r, es in sorted(entries.items()):
            colls = [e for e in es if not e["is_p2p"]]
            if colls:
                last[str(r)] = dict(describe(colls[-1]), pg=colls[-1]["process_group"][0])
        out["last"] = last
        return out
    c = bad[0]
    entered, never = {}, {}
    for r in sorted(c.expected_ranks):
        if r not in entries:
            continue
        e = entry_at(entries[r], c.group_id, c.collective_seq_id)
        if e is not None:
            entered[str(r)] = describe(e)
        else:
            before = [x for x in entries[r] if not x["is_p2p"] and x["process_group"][0] == c.group_id]
            never[str(r)] = describe(before[-1]) if before else {"seq": -1}
    mismatches = sorted((c.mismatch_collectives or {}).items())
    kind = mismatches[0][1].type_of_mismatch if mismatches else None
    out.update({
        "pg": c.group_id, "pg_desc": c.pg_desc, "seq": c.collective_seq_id,
        "kind": kind.state.name if kind else "MISSING_RANKS", "detail": (kind.culprit or "") if kind else "",
        "expected": sorted(c.expected_ranks), "missing": sorted(c.missing_ranks or []),
        "culprits": [r for r, _ in mismatches], "entered": entered, "never_entered": never,
    })
    return out


def export(folder, prefix, budget):
    """One JSON line per record, its last entries without stacks: as many as fit in `budget` bytes."""
    dumps = []
    for rank, path in sorted(records(folder, prefix).items()):
        try:
            d = load(path)
        except Exception as e:  # the other ranks' records still go
            print(f"rank {rank}'s record {path}: {e}", file=sys.stderr)
            continue
        dumps.append({"rank": rank, "version": d["version"], "pg_config": d.get("pg_config") or {},
                      "pg_status": d.get("pg_status") or {},
                      "entries": [{k: e.get(k) for k in FIELDS} for e in d["entries"]]})
    for keep in (32, 16, 8, 4, 2, 1):
        text = "\n".join(json.dumps(dict(d, entries=d["entries"][-keep:]), separators=(",", ":")) for d in dumps)
        if len(text) <= budget:
            return text
    return ""


def import_parts(path, folder, prefix):
    os.makedirs(folder, exist_ok=True)
    with open(path) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                for e in d["entries"]:
                    e["process_group"] = tuple(e["process_group"])
                save(os.path.join(folder, f"{prefix}{int(d.pop('rank'))}"), d)


def progress(folder, prefix, now_ns):
    """Each rank's oldest collective waited on: in each process group the first after the last that
    completed (NCCL's state 'completed', or retired: Gloo's state stays 'scheduled'), with its age at
    `now_ns` by the same wall clock as its time_created_ns."""
    out = {}
    for rank, path in sorted(records(folder, prefix).items()):
        try:
            entries = load(path)["entries"]
        except Exception as e:  # the other ranks' records still count
            print(f"rank {rank}'s record {path}: {e}", file=sys.stderr)
            continue
        # a group's collectives complete in order: one not completed behind a later one that did (a
        # collective torch never retired) is no stall; the first after the group's last completed one is
        by_pg = {}
        for e in entries:
            if not e.get("is_p2p"):
                by_pg.setdefault(e["process_group"][0], []).append(e)
        waiting = []
        for pg, es in by_pg.items():
            done = [i for i, e in enumerate(es) if e.get("retired") or e.get("state") == "completed"]
            after = es[done[-1] + 1:] if done else es
            if after:
                waiting.append(after[0])
        if waiting:
            e = min(waiting, key=lambda e: e["time_created_ns"])
            gloo = e["profiling_name"].startswith("gloo:")  # whose state stays 'scheduled' while it runs
            out[str(rank)] = dict(describe(e), pg=e["process_group"][0], state="" if gloo else e.get("state") or "",
                                  age_s=max(0, now_ns - e["time_created_ns"]) / 1e9)
    return out


def main(argv):
    try:
        if argv[0] == "verdict":
            out = verdict(argv[1], argv[2])
        elif argv[0] == "import":
            import_parts(argv[1], argv[2], argv[3])
            out = verdict(argv[2], argv[3])
        elif argv[0] == "export":
            print(export(argv[1], argv[2], int(argv[3])))
            return
        elif argv[0] == "progress":
            out = progress(argv[1], argv[2], int(argv[3]))
        else:
            out = {"error": f"unknown command {argv[0]}"}
    except ImportError as e:
        out = {"error": f"{sys.executable} has no torch with the flight recorder's analyzer ({e})"}
    except Exception as e:
        out = {"error": f"torch's analyzer failed: {type(e).__name__}: {e}"}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
)py";

}  // namespace

std::string_view recorder_hook() { return kHook; }

std::string_view recorder_analyzer() { return kAnalyzer; }

RecorderFiles recorder_files(const std::filesystem::path& rank_dir) {
  return {(rank_dir / "flight_recorder.fifo").string(), (rank_dir / "flight_recorder.status").string(),
          (rank_dir / "flight_recorder_times.json").string()};
}

std::pair<EnvPairs, RecorderPaths> recorder_variables(const EnvLookup& given,
                                                      const std::filesystem::path& attempt_dir) {
  // torch reads each setting by its current name, then its older one: the first one set wins.
  const auto either = [&](const char* name, const char* older) { return given(name) ? given(name) : given(older); };
  RecorderPaths paths;
  const auto size = either("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE");
  if (size && text::to_long(text::trim(*size)) == 0L) return {{}, paths};
  paths.on = true;
  paths.folder = (attempt_dir / "fr_read").string();
  EnvPairs vars;
  if (!size) vars.emplace_back("TORCH_FR_BUFFER_SIZE", "2000");
  if (auto prefix = either("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")) {
    paths.dump_prefix = *prefix;
  } else {
    paths.dumps = (attempt_dir / "fr").string();
    paths.dump_prefix = paths.dumps + "/" + std::string(kRecordPrefix);
    vars.emplace_back("TORCH_FR_DUMP_TEMP_FILE", paths.dump_prefix);
  }
  if (auto pipe = given("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")) {
    paths.nccl_pipe = *pipe;
  } else {
    paths.nccl_pipe = (attempt_dir / "nccl_pipe_").string();
    vars.emplace_back("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", paths.nccl_pipe);
  }
  return {vars, paths};
}

namespace {

RecordedCollective recorded(const YAML::Node& n) {
  RecordedCollective c;
  if (!n || !n.IsMap()) return c;
  c.seq = n["seq"].as<long>(-1);
  c.op = n["op"].as<std::string>("");
  c.sizes = n["sizes"].as<std::string>("");
  c.dtypes = n["dtypes"].as<std::string>("");
  c.retired = n["retired"].as<bool>(false);
  return c;
}

std::vector<int> ints(const YAML::Node& n) {
  std::vector<int> out;
  if (n && n.IsSequence()) {
    for (const auto& i : n) out.push_back(i.as<int>());
  }
  return out;
}

std::map<int, RecordedCollective> by_rank(const YAML::Node& n) {
  std::map<int, RecordedCollective> out;
  if (n && n.IsMap()) {
    for (const auto& kv : n) out[kv.first.as<int>()] = recorded(kv.second);
  }
  return out;
}

/// "rank 3", "ranks 0-3,5".
std::string plural(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return (ranks.size() == 1 ? "rank " : "ranks ") + text::ranges(ranks);
}

/// A rank's collective as its record has it, made safe to echo: a record is the worker's text.
std::string collective_text(const RecordedCollective& c) {
  return fmt::format("{} #{}, sizes {}, {}{}", printable(c.op, 100), c.seq, printable(c.sizes, 300),
                     printable(c.dtypes, 100), c.retired ? ", finished" : "");
}

/// What a mismatch kind means, in the report's words.
std::string kind_text(const std::string& kind) {
  if (kind == "COLLECTIVE_TYPE_MISMATCH") return "not the same collective";
  if (kind == "SIZE_OR_SYNTAX_MISMATCH") return "not the same sizes";
  if (kind == "COLLECTIVE_DTYPE_MISMATCH") return "not the same dtypes";
  if (kind == "COLLECTIVE_STATE_MISMATCH") return "not in the same state";
  if (kind == "MISSING_RANKS") return "not every rank entered it";
  return printable(kind, 80);
}

std::string json_collective(const RecordedCollective& c) {
  return fmt::format(R"({{"seq": {}, "op": {}, "sizes": {}, "dtypes": {}, "retired": {}}})", c.seq,
                     text::json_string(c.op), text::json_string(c.sizes), text::json_string(c.dtypes),
                     c.retired ? "true" : "false");
}

std::string json_ints(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string json_map(const std::map<int, RecordedCollective>& m) {
  std::string out = "{";
  for (const auto& [rank, c] : m) {
    out += (out.size() > 1 ? ", " : "") + text::json_string(std::to_string(rank)) + ": " + json_collective(c);
  }
  return out + "}";
}

}  // namespace

CollectiveVerdict parse_verdict(const std::string& json) {
  CollectiveVerdict v;
  try {
    const YAML::Node root = YAML::Load(json);
    if (!root.IsMap()) {
      v.error = "the analyzer printed no verdict (" + std::to_string(json.size()) + " bytes)";
      return v;
    }
    if (root["error"]) {
      v.error = root["error"].as<std::string>("");
      return v;
    }
    if (!root["ranks"] || !root["ranks"].IsSequence()) {  // YAML reads more than JSON: a traceback is a map to it
      v.error = "the analyzer printed no verdict: " + text::trim(json.substr(0, json.find('\n'))).substr(0, 200);
      return v;
    }
    v.ranks = ints(root["ranks"]);
    v.collectives = root["collectives"].as<int>(0);
    v.problems = root["problems"].as<int>(0);
    v.compared_with = root["compared_with"].as<int>(-1);
    v.last = by_rank(root["last"]);
    if (!root["seq"]) return v;
    v.seq = root["seq"].as<long>(-1);
    v.pg = root["pg"].as<std::string>("");
    v.pg_desc = root["pg_desc"].as<std::string>("");
    v.kind = root["kind"].as<std::string>("");
    v.detail = root["detail"].as<std::string>("");
    v.expected = ints(root["expected"]);
    v.missing = ints(root["missing"]);
    v.culprits = ints(root["culprits"]);
    v.entered = by_rank(root["entered"]);
    v.never_entered = by_rank(root["never_entered"]);
  } catch (const YAML::Exception& e) {
    v = CollectiveVerdict{};
    v.error = std::string("the analyzer's verdict is not JSON: ") + e.what();
  }
  return v;
}

std::optional<int> verdict_suspect(const CollectiveVerdict& v) {
  // A state that differs says which ranks got further, not which one is wrong: those that did not
  // may be the ones waiting for the others.
  if (v.seq < 0 || v.kind == "COLLECTIVE_STATE_MISMATCH") return std::nullopt;
  if (!v.culprits.empty()) return *std::min_element(v.culprits.begin(), v.culprits.end());
  if (!v.missing.empty()) return *std::min_element(v.missing.begin(), v.missing.end());
  return std::nullopt;
}

std::string verdict_reason(const CollectiveVerdict& v, int rank) {
  if (verdict_suspect(v) != rank) return "";
  const std::string where = fmt::format("collective #{} of process group {}", v.seq, printable(v.pg_desc, 100));
  const auto call = [](const RecordedCollective& c) {
    return printable(c.op, 100) + " " + printable(c.sizes, 300) + " " + printable(c.dtypes, 100);
  };
  if (auto it = v.entered.find(rank); it != v.entered.end()) {
    const auto other = v.entered.find(v.compared_with);
    return fmt::format("calls {}{} at {} (flight recorder: {})", call(it->second),
                       other == v.entered.end()
                           ? std::string()
                           : " where rank " + std::to_string(v.compared_with) + " calls " + call(other->second),
                       where, kind_text(v.kind));
  }
  return "never entered " + where + " (flight recorder)";
}

std::string verdict_text(const CollectiveVerdict& v) {
  if (v.ranks.empty() && v.no_record.empty() && v.error.empty()) return "";
  std::string out = "dtlaunch: flight recorder";
  if (!v.folder.empty()) out += " (" + printable(v.folder, 300) + ")";
  if (!v.error.empty()) {
    out += ": no verdict: " + printable(v.error, 500) + "\n";
  } else if (v.seq < 0) {
    out += v.ranks.empty()
               ? ": no rank's record\n"
               : fmt::format(": the ranks part nowhere in {} collectives ({} read)\n", v.collectives, plural(v.ranks));
    for (const auto& [rank, c] : v.last) out += fmt::format("  rank {}: last {}\n", rank, collective_text(c));
  } else {
    out += fmt::format(": the ranks part at collective #{} of process group {}: {} ({}, torch's analyzer)\n", v.seq,
                       printable(v.pg_desc, 100), kind_text(v.kind), printable(v.kind, 100));
    for (int rank : v.expected) {
      if (auto it = v.entered.find(rank); it != v.entered.end()) {
        const bool culprit = std::find(v.culprits.begin(), v.culprits.end(), rank) != v.culprits.end();
        out += fmt::format("  rank {}: {}{}\n", rank, collective_text(it->second),
                           culprit ? "   <- not as rank " + std::to_string(v.compared_with) : "");
      } else if (auto never = v.never_entered.find(rank); never != v.never_entered.end()) {
        out += fmt::format(
            "  rank {}: never entered it; {}\n", rank,
            never->second.seq < 0 ? "no collective before it" : "its last: " + collective_text(never->second));
      }
    }
    if (!v.detail.empty()) out += "  " + printable(v.detail, 500) + "\n";
    if (v.problems > 1) {
      out += fmt::format("  ({} more collective{} where the ranks part after it)\n", v.problems - 1,
                         v.problems > 2 ? "s" : "");
    }
  }
  for (const auto& [rank, why] : v.no_record) {
    out += fmt::format("  rank {}: no record: {}\n", rank, printable(why, 300));
  }
  return out;
}

std::string verdict_json(const CollectiveVerdict& v) {
  std::string no_record = "{";
  for (const auto& [rank, why] : v.no_record) {
    no_record +=
        (no_record.size() > 1 ? ", " : "") + text::json_string(std::to_string(rank)) + ": " + text::json_string(why);
  }
  no_record += "}";
  return fmt::format(
      R"({{"error": {}, "folder": {}, "ranks": {}, "no_record": {}, "collectives": {}, "problems": {}, )"
      R"("compared_with": {}, "seq": {}, "pg": {}, "pg_desc": {}, "kind": {}, "detail": {}, "expected": {}, )"
      R"("missing": {}, "culprits": {}, "entered": {}, "never_entered": {}, "last": {}}})",
      text::json_string(v.error), text::json_string(v.folder), json_ints(v.ranks), no_record, v.collectives, v.problems,
      v.compared_with, v.seq, text::json_string(v.pg), text::json_string(v.pg_desc), text::json_string(v.kind),
      text::json_string(v.detail), json_ints(v.expected), json_ints(v.missing), json_ints(v.culprits),
      json_map(v.entered), json_map(v.never_entered), json_map(v.last));
}

std::vector<Arrival> parse_arrivals(const std::string& json) {
  std::vector<Arrival> out;
  try {
    const YAML::Node root = YAML::Load(json);
    if (!root.IsSequence()) return {};
    for (const auto& e : root) {
      if (!e.IsSequence() || e.size() < 3) return {};
      out.push_back({e[0].as<std::string>(), e[1].as<long>(), e[2].as<int64_t>()});
    }
  } catch (const YAML::Exception&) {
    return {};
  }
  return out;
}

std::optional<Stall> find_stall(const std::string& json, double timeout_s) {
  std::optional<Stall> oldest;
  try {
    const YAML::Node root = YAML::Load(json);
    if (!root.IsMap()) return std::nullopt;
    for (const auto& entry : root) {
      const auto rank = text::to_long(entry.first.as<std::string>());
      const auto& e = entry.second;
      if (!rank || !e.IsMap()) continue;
      Stall s{static_cast<int>(*rank), e["pg"].as<std::string>(""), recorded(e), e["state"].as<std::string>(""),
              e["age_s"].as<double>(0)};
      if (s.age_s >= timeout_s && (!oldest || s.age_s > oldest->age_s)) oldest = std::move(s);
    }
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
  return oldest;
}

std::string stall_cause(const Stall& s) {
  return fmt::format(
      "rank {}'s {} #{} of process group {} has not completed in {:.0f} s ({}), while every rank is busy", s.rank,
      printable(s.collective.op, 80), s.collective.seq, printable(s.pg, 80), s.age_s,
      s.state.empty() ? std::string("flight recorder") : "flight recorder: " + printable(s.state, 40));
}

std::optional<Straggler> find_straggler(const Arrivals& arrivals, const StragglerRule& rule) {
  if (arrivals.size() < 2) return std::nullopt;
  // Every collective's arrivals, by rank, where every rank recorded it.
  std::map<std::pair<std::string, long>, std::map<int, int64_t>> by_collective;
  for (const auto& [rank, list] : arrivals) {
    for (const auto& a : list) by_collective[{a.pg, a.seq}][rank] = a.ns;
  }
  std::vector<std::map<int, int64_t>> common;
  for (auto& [key, ranks] : by_collective) {
    if (ranks.size() == arrivals.size()) common.push_back(std::move(ranks));
  }
  // The last ones, by when the last rank came.
  const auto latest = [](const std::map<int, int64_t>& ranks) {
    return std::max_element(ranks.begin(), ranks.end(), [](auto& a, auto& b) { return a.second < b.second; });
  };
  std::sort(common.begin(), common.end(),
            [&](const auto& a, const auto& b) { return latest(a)->second < latest(b)->second; });
  if (common.size() > rule.last) common.erase(common.begin(), common.end() - static_cast<long>(rule.last));
  if (common.size() < rule.at_least) return std::nullopt;
  std::map<int, std::pair<int, double>> last_at;  // rank: how often last, and the sum of its lead over the next
  for (const auto& ranks : common) {
    const auto last = latest(ranks);
    int64_t next = std::numeric_limits<int64_t>::min();
    for (const auto& [rank, ns] : ranks) {
      if (rank != last->first) next = std::max(next, ns);
    }
    auto& [count, late_ns] = last_at[last->first];
    ++count;
    late_ns += static_cast<double>(last->second - next);
  }
  const auto most = std::max_element(last_at.begin(), last_at.end(),
                                     [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
  const int of = static_cast<int>(common.size());
  const auto [count, late_ns] = most->second;
  Straggler s{most->first, "", count, of, late_ns / count / 1e6};
  if (count < rule.share * of || s.mean_late_ms < rule.min_late_ms) return std::nullopt;
  return s;
}

std::string straggler_warning(const Straggler& s) {
  return fmt::format(
      "slow rank: rank {}{} arrives last at {} of the last {} collectives, {:.0f} ms after the next rank on average "
      "(the flight recorder's arrival times)",
      s.rank, s.host.empty() ? "" : " on " + s.host, s.last_at, s.of, s.mean_late_ms);
}

StragglerState::StragglerState(std::chrono::seconds quiet, StragglerRule rule) : quiet_(quiet), rule_(rule) {}

std::optional<std::string> StragglerState::on_sample(Clock::time_point now, const Arrivals& arrivals,
                                                     const std::string& host) {
  auto found = find_straggler(arrivals, rule_);
  if (found) found->host = host;
  latest_ = found;
  if (!found || (warned_at_ && now - *warned_at_ < quiet_)) return std::nullopt;
  warned_at_ = now;
  return straggler_warning(*found);
}

void StragglerState::reset() { latest_.reset(); }

}  // namespace dtl::watch

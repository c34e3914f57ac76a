// A hang's report: the text for the console, its JSON, and a node's part of a job's report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "watch/hang_state.h"

namespace dtl::watch {

/// One node's ranks, `doing` filled, for the job's report on the node hosting the rendezvous: the
/// report's JSON without a verdict, each rank naming `host` and carrying its flight recorder's
/// record, within `budget` bytes (the stacks cut to their main threads, then to fewer frames, then
/// left out; the records last).
std::string hang_part(const Hang& hang, const std::string& host, const std::string& how, size_t budget);
/// A node's part back; nullopt when it is not one.
std::optional<Hang> parse_hang_part(const std::string& json);
/// Every node's ranks as one hang, by rank: the shortest silence, the first cause.
Hang merge_parts(const std::vector<Hang>& parts);

/// "no rank printed for 4 s": the silence in whole seconds, as the report and the failure summary say it.
std::string silence(double quiet_s);

/// The failure a hang is with --on_hang=fail, for the failure summary: "hang: no rank printed for
/// 4 s (suspect: blocked)", or what signalled it.
std::string hang_failure(const Hang& hang, const HungRank* suspect);

/// The table and every rank's stack (ranks with the same stack as one block), as both reports
/// have them; `dtlaunch stacks` prints it under its own headline.
std::string stacks_text(const Hang& hang, const std::string& host, const std::string& how);

/// The report for the console: a headline, the table, every rank's stack (ranks with the same stack
/// as one block), the flight recorder's verdict (hang.collective) and the suspect. `how`: which
/// tool read the stacks. What the ranks' or other nodes'
/// text holds (names of threads, functions, files, hosts) is made printable (base/printable.h).
std::string hang_report(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                        const std::string& how, double timeout_s);
/// The same as one JSON object.
std::string hang_report_json(const Hang& hang, std::optional<size_t> suspect, const std::string& host,
                             const std::string& how, double timeout_s);

}  // namespace dtl::watch

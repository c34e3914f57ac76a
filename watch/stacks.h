// What a rank's stack says: the stack readers' output as frames, what a rank is doing by its frames,
// and which rank is the suspect.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "watch/hang_state.h"

namespace dtl::watch {

/// The frames of the thread that says what a rank does: its main thread, else its first.
std::vector<std::string> main_thread(const std::vector<std::string>& stack);

/// What a rank is doing by its frames (innermost first): "in a collective", "in the store",
/// "waiting for the GPU" (native frames only), "in a data loader", or "" when none of them.
std::string classify(const std::vector<std::string>& stack);

/// Fills each rank's `doing` (what its stack says, else its native stack's, else "stopped (T)",
/// "running" when busy, "blocked" when not; "... after its traceback" for a rank whose last output
/// was a traceback) and returns the suspect's index in hang.ranks (choose_suspect).
std::optional<size_t> find_suspect(Hang& hang);
/// The suspect over ranks whose `doing` is filled (other nodes' parts too): a rank alive after its
/// traceback; else one stopped; else one running outside any wait; else, where some rank is seen
/// waiting for the others, one whose stack places it outside any wait. Never a rank that waits in a
/// collective, the store or for the GPU, but where the stacks name none, the rank the flight
/// recorder's verdict picks (hang.collective); nullopt when no rank is known to be off.
std::optional<size_t> choose_suspect(const Hang& hang);
/// Whether the rank waits for the others: in a collective, in the store, or for the GPU.
bool waits_for_others(const HungRank& r);

/// The stack without the thread of dtlaunch's flight recorder hook (watch/flight_recorder.h), which
/// every hooked Python rank has and which says nothing of the rank.
std::vector<std::string> without_hook_thread(const std::vector<std::string>& stack);

/// py-spy's `dump --json` output as stacks: "thread NAME", then its frames, "name (file:line)",
/// innermost first, threads apart by an empty line. nullopt when it is not py-spy's JSON.
std::optional<std::vector<std::string>> parse_py_spy(const std::string& json);
/// faulthandler's dump (Python's own, from a signal: "Thread 0x... (most recent call first):", then
/// `  File "PATH", line N in FUNC`) the same way: the thread that took the signal, which dtlaunch
/// sends to the main thread, is "thread MainThread", the others "thread 1", "thread 2"... in order.
/// Empty when it holds no thread.
std::vector<std::string> parse_faulthandler(const std::string& text);
/// eu-stack's output the same way ("#0  0x... function" lines), threads named 1, 2, ... in order.
std::vector<std::string> parse_eu_stack(const std::vector<std::string>& lines);

}  // namespace dtl::watch

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

/// Fills each rank's `doing` (from its native stack where read, else its stack, else "running" when
/// busy, "blocked" when not) and returns the suspect's index in hang.ranks: the first rank that
/// waits neither in a collective, nor in the store, nor for the GPU, busy ones first; nullopt when
/// every rank waits.
std::optional<size_t> find_suspect(Hang& hang);
/// The same choice over ranks whose `doing` is filled already (other nodes' parts).
std::optional<size_t> choose_suspect(const Hang& hang);

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

// Slurm's hostlist syntax (`gpu[01-03,07],cpu5`), expanded as `scontrol show hostnames` does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtl::config {

/// The hosts of `expression`, in order (duplicates kept, as Slurm keeps them). Items are separated
/// by commas or blanks outside brackets; `[...]` holds numbers and `lo-hi` ranges separated by
/// commas, zero-padded to lo's width (`[08-10]`: 08 09 10); several groups multiply
/// (`r[1-2]n[1-2]`: r1n1 r1n2 r2n1 r2n2). As in Slurm, nothing may follow an item's last `]`.
/// At most 65536 hosts in all. With `enough`, the expansion stops at the first item that reaches
/// that many hosts (the items after it are not read). Throws std::invalid_argument with the reason
/// for a malformed expression or too many hosts.
std::vector<std::string> expand_hostlist(const std::string& expression, size_t enough = SIZE_MAX);

}  // namespace dtl::config

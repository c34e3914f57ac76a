#include "config/cluster_env.h"

#include <stdexcept>

#include "config/hostlist.h"
#include "base/text.h"
#include "base/printable.h"

namespace dtl::config {
namespace {

/// nnodes and node_rank from a launcher that starts one process per node, when it set both.
bool ranks_from(const EnvLookup& env, const char* size, const char* rank, ClusterDetection& d) {
  auto n = env(size);
  auto r = env(rank);
  if (!n || !r) return false;
  d.values[Setting::nnodes] = {*n, size, "", std::nullopt};
  d.values[Setting::node_rank] = {*r, rank, "", std::nullopt};
  return true;
}

/// Inside an srun step: the step's nodes (not the job's), its first host, the job's port and id.
bool slurm_step(const EnvLookup& env, ClusterDetection& d) {
  auto step = env("SLURM_STEP_ID");
  auto nodes = env("SLURM_STEP_NUM_NODES");
  auto nodelist = env("SLURM_STEP_NODELIST");
  if (!step || !nodes || !nodelist || !ranks_from(env, "SLURM_STEP_NUM_NODES", "SLURM_NODEID", d)) return false;
  d.scheduler = "Slurm";
  if (auto tasks = env("SLURM_STEP_NUM_TASKS"); tasks && text::trim(*tasks) != text::trim(*nodes)) {
    const std::string why = "srun started " + printable(*tasks) + " tasks on " + printable(*nodes) +
                            " nodes (SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES), and dtlaunch wants one per node, "
                            "as it starts the node's workers itself: use `srun --ntasks-per-node=1 --ntasks=" +
                            printable(text::trim(*nodes)) + " dtlaunch ...` (--ntasks too: srun takes the allocation's "
                            "task count over --ntasks-per-node)";
    d.values[Setting::nnodes].refusal = why;
    d.values[Setting::node_rank].refusal = why;
  }
  auto job = env("SLURM_JOB_ID");
  auto id = job ? text::to_number<unsigned long>(text::trim(*job)) : std::nullopt;
  // rdzv_id, not run_id: a --rdzv_id that the user gives wins over it, and so does --run_id.
  if (id) {
    d.values[Setting::rdzv_id] = {text::trim(*job) + "." + text::trim(*step), "SLURM_JOB_ID.SLURM_STEP_ID", "",
                                  std::nullopt};
  }
  // One node (`srun --pty bash`, `srun -N1`) keeps one node's defaults: the store on loopback, a free port.
  if (text::trim(*nodes) == "1") return true;
  Detected& addr = d.values[Setting::master_addr] = {"", "SLURM_STEP_NODELIST", "its first host", std::nullopt};
  try {
    auto hosts = expand_hostlist(*nodelist, 1);  // the first host is all it takes
    if (hosts.empty()) throw std::invalid_argument("no host");
    addr.text = hosts.front();
  } catch (const std::invalid_argument& e) {
    addr.refusal = "SLURM_STEP_NODELIST=" + printable(*nodelist) + ": " + e.what() + " (give --master_addr)";
  }
  if (id) {
    d.values[Setting::master_port] = {std::to_string(slurm_job_port(*id)), "SLURM_JOB_ID",
                                      "10000 + SLURM_JOB_ID % 10000", std::nullopt};
  } else if (job) {  // the nodes' port and job id come from it: never 29500 without a word
    const std::string why =
        "SLURM_JOB_ID=" + printable(*job) + " is not a job number (give --master_port and --rdzv_id)";
    d.values[Setting::master_port] = {"", "SLURM_JOB_ID", "", why};
    d.values[Setting::rdzv_id] = {"", "SLURM_JOB_ID", "", why};
  }
  return true;
}

}  // namespace

int slurm_job_port(unsigned long job_id) { return static_cast<int>(10000 + job_id % 10000); }

ClusterDetection detect_cluster(const EnvLookup& env) {
  ClusterDetection d;
  if (ranks_from(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", d)) {
    d.scheduler = "Open MPI";
  } else if (!slurm_step(env, d) && ranks_from(env, "PMI_SIZE", "PMI_RANK", d)) {
    d.scheduler = "PMI";
  }
  return d;
}

}  // namespace dtl::config

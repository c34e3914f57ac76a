// What a scheduler that started dtlaunch says about the job, from its variables: inside an `srun`
// step (Slurm), `mpirun` (Open MPI) or another PMI launcher (MPICH, Intel MPI). These values rank
// below the flags and variables a user sets and above the config file and the defaults.
//
// What Slurm 22.05 sets (recorded by e2e/test_slurm.py's cluster): an srun step has SLURM_STEP_ID,
// SLURM_STEP_NUM_NODES, SLURM_STEP_NODELIST, SLURM_STEP_NUM_TASKS, SLURM_STEP_TASKS_PER_NODE,
// SLURM_NODEID, SLURM_PROCID, SLURM_LOCALID and the job's SLURM_JOB_*; a salloc shell has only the
// job's (SLURM_JOB_ID, SLURM_JOB_NUM_NODES, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE...); an sbatch
// script has those plus SLURM_NODEID=0, SLURM_PROCID=0 and SLURM_LOCALID=0, but no SLURM_STEP_*.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "config/command_line.h"
#include "config/flags.h"

namespace dtl::config {

/// One setting's value as the scheduler gives it.
struct Detected {
  std::string text;
  std::string variable;  ///< what gave it, for --print_config and errors: "SLURM_STEP_NUM_NODES"
  std::string note;      ///< how the text came from it ("first host"), or ""
  /// Set when the value must not be used: why, as the one-line error to give if it is.
  std::optional<std::string> refusal;
};

struct ClusterDetection {
  std::string scheduler;  ///< "Slurm", "Open MPI", "PMI"; "" when nothing was detected
  std::map<Setting, Detected> values;
};

/// The port a Slurm job's nodes meet on, unless given: 10000 + job id % 10000 (10000..19999, below
/// Linux's ephemeral ports, so that the jobs sharing a node differ unless their ids are 10000 apart).
int slurm_job_port(unsigned long job_id);

/// Reads the scheduler's variables. Open MPI's (OMPI_COMM_WORLD_SIZE/_RANK) first, then a Slurm step's
/// (SLURM_STEP_*: set by srun, never in a plain salloc or sbatch shell), then PMI_SIZE/PMI_RANK.
ClusterDetection detect_cluster(const EnvLookup& env);

}  // namespace dtl::config

// Variables a cluster gives each pod that dtlaunch does not read, but that say the run needs
// settings it was not given. The Kubeflow training operator's PyTorchJob (before v1.7, or any
// job without PET_NNODES / PET_NODE_RANK) sets WORLD_SIZE and RANK per pod, counting pods where
// torchrun's counts processes: dtlaunch refuses to guess which is meant. docs/kubernetes.md.
#pragma once

#include "base/error.h"
#include "config/command_line.h"
#include "config/launch_options.h"

namespace dtl::config {

/// Fails (one line, exit 2) when `env` holds WORLD_SIZE, RANK, MASTER_ADDR and MASTER_PORT and
/// `o` lacks a setting they stand for (nnodes, and with the static rendezvous node_rank,
/// master_addr and master_port; not needed with --standalone or an explicit single node); or when
/// PET_STANDALONE is set but empty (the operator's `standalone: true`, on which torchrun fails).
Status check_pod_variables(const EnvLookup& env, const LaunchOptions& o);

}  // namespace dtl::config

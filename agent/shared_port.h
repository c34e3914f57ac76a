// The workers' c10d store on the rendezvous's port (torchrun 2.x's agent store, on one port): its
// clients are told from the rendezvous's by their first bytes, and each round starts it afresh.
// Whoever hosts the rendezvous (an agent, or `dtlaunch rdzv-server`) serves the store with it.
#pragma once

#include "rendezvous/server.h"
#include "store/server.h"

namespace dtl::agent {

/// Sets `server`'s hooks so that store clients go to `store`, and a completed round (a new worker
/// group) empties it. `store` must outlive the rendezvous server made from `server`.
void share_port_with_store(rendezvous::ServerOptions& server, store::Server& store);

}  // namespace dtl::agent

// `dtlaunch top` where the fan-out runs: the first host's figures (its agent gathers every host's
// through the rendezvous), relayed over one ssh that runs `dtlaunch top --stream` there, which
// prints a snapshot a second. The ssh starts at the first ask and ends 10 s after the last.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "node/spawn.h"

namespace dtl::fanout {

class TopRelay {
 public:
  using Reply = std::function<void(std::string)>;
  /// `start`: the ssh to run (its stdin, stdout and stderr are the relay's), or why there is none now.
  TopRelay(boost::asio::io_context& io, std::function<std::variant<node::SpawnSpec, std::string>()> start);
  ~TopRelay();
  TopRelay(const TopRelay&) = delete;
  TopRelay& operator=(const TopRelay&) = delete;

  /// Answers with the newest snapshot, or the next one (starting the ssh when it is not running).
  void ask(Reply reply);
  /// Collects the ssh once it exited (the fan-out's SIGCHLD).
  void reap();
  /// Ends the ssh and answers whoever waits.
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace dtl::fanout

// How a device's queue threads run: where (the CPUs the kernel maps each queue to, or anywhere)
// and how long each spins for its next request before it sleeps. Chosen per cache (`pcached add
// --queue-affinity`, `--queue-poll-us`), carried from the daemon's configuration to each queue.
#pragma once

#include <chrono>

#include "ublk/queue_affinity.h"
#include "ublk/queue_poll.h"

namespace pcached::ublk {

struct QueueThreadSettings {
  QueueAffinity affinity = QueueAffinity::Auto;
  std::chrono::microseconds poll = kDefaultQueuePoll;
};

}  // namespace pcached::ublk

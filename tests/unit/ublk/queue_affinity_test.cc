#include <catch2/catch.hpp>

#include "ublk/queue_affinity.h"

using pcached::ublk::QueueAffinity;
using pcached::ublk::queue_thread_cpus;
using Cpus = std::vector<int>;

TEST_CASE("auto serves a queue of one CPU from the other CPUs, and a wider queue from its own", "[ublk][affinity]") {
  const Cpus four{0, 1, 2, 3};
  // As many queues as CPUs: each thread stays off the CPU whose programs submit to its queue.
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {0}, {0, 1}) == Cpus{1});
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {1}, {0, 1}) == Cpus{0});
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {2}, four) == Cpus({0, 1, 3}));
  // Only where the daemon may run (a unit's CPUAffinity=, a cpuset).
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {0}, {0, 2, 3}) == Cpus({2, 3}));
  // No other CPU to go to: not bound rather than bound to a CPU the daemon may not use.
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {1}, {1}).empty());
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {0}, {}).empty());
  // A queue of several CPUs: bound to them, as the kernel maps them.
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {2, 3}, four) == Cpus({2, 3}));
  CHECK(queue_thread_cpus(QueueAffinity::Auto, {}, four).empty());
}

TEST_CASE("kernel binds to the queue's CPUs and none binds nowhere", "[ublk][affinity]") {
  CHECK(queue_thread_cpus(QueueAffinity::Kernel, {1}, {0, 1}) == Cpus{1});
  CHECK(queue_thread_cpus(QueueAffinity::Kernel, {0, 1}, {0, 1}) == Cpus({0, 1}));
  CHECK(queue_thread_cpus(QueueAffinity::None, {1}, {0, 1}).empty());
  CHECK(queue_thread_cpus(QueueAffinity::None, {0, 1}, {0, 1}).empty());
}

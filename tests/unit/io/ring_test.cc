#include "io/ring.h"

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <chrono>

namespace {

using namespace std::chrono_literals;
using pcached::io::CompletionHandler;
using pcached::io::Ring;

struct Counter final : CompletionHandler {
  int completions = 0;
  int last_result = 1;
  void on_completion(int result) override {
    ++completions;
    last_result = result;
  }
};

std::chrono::microseconds thread_cpu_time() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return std::chrono::seconds(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         std::chrono::microseconds(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// A timeout operation: completes with -ETIME after `after`.
void add_timeout(Ring& ring, CompletionHandler& handler, __kernel_timespec& ts, std::chrono::nanoseconds after) {
  ts.tv_sec = after.count() / 1'000'000'000;
  ts.tv_nsec = after.count() % 1'000'000'000;
  io_uring_prep_timeout(ring.prepare(&handler), &ts, 0, 0);
}

}  // namespace

TEST_CASE("a ring dispatches a completion that comes while it spins", "[io]") {
  auto ring = Ring::create(8, IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
  if (!ring.ok()) ring = Ring::create(8);  // kernels before 5.19: the spin sees completions only
  REQUIRE(ring.ok());
  ring.value()->set_poll(200ms);
  Counter counter;
  __kernel_timespec ts{};
  add_timeout(*ring.value(), counter, ts, 5ms);
  const auto start = std::chrono::steady_clock::now();
  CHECK(ring.value()->wait_and_dispatch(10s) == 1);
  CHECK(counter.completions == 1);
  CHECK(counter.last_result == -ETIME);
  // Dispatched when it came, not at the end of the spin.
  CHECK(std::chrono::steady_clock::now() - start < 150ms);
  CHECK(ring.value()->in_flight() == 0);
}

TEST_CASE("a ring spins for its poll time before it sleeps, and not at all without one", "[io]") {
  auto ring = Ring::create(8);
  REQUIRE(ring.ok());
  // Nothing in flight: the wait ends by its timeout, after the spin.
  auto cpu_before = thread_cpu_time();
  auto start = std::chrono::steady_clock::now();
  CHECK(ring.value()->wait_and_dispatch(50ms) == 0);
  const auto sleeping_wall = std::chrono::steady_clock::now() - start;
  const auto sleeping_cpu = thread_cpu_time() - cpu_before;
  CHECK(sleeping_wall >= 50ms);
  CHECK(sleeping_cpu < 25ms);  // asleep

  ring.value()->set_poll(200ms);
  cpu_before = thread_cpu_time();
  start = std::chrono::steady_clock::now();
  CHECK(ring.value()->wait_and_dispatch(50ms) == 0);
  const auto spinning_wall = std::chrono::steady_clock::now() - start;
  const auto spinning_cpu = thread_cpu_time() - cpu_before;
  CHECK(spinning_wall >= 250ms);  // the spin, then the wait
  // Spinning is CPU time: most of the 200 ms, less what a loaded machine (other tests, yielding to
  // them) takes away.
  CHECK(spinning_cpu >= 40ms);
  CHECK(spinning_cpu > sleeping_cpu + 20ms);
}

#include "io/ring.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

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

// How long this thread has been runnable: on a CPU, or waiting for one on the run queue
// (/proc/thread-self/schedstat). A spinning thread is runnable all the time however loaded the
// machine, where its CPU time is only the share the scheduler gives it: a thread that yields
// while two compilers keep both CPUs busy gets a few percent. A sleeping thread is not runnable.
std::chrono::nanoseconds thread_runnable_time() {
  std::ifstream schedstat("/proc/thread-self/schedstat");
  uint64_t on_cpu = 0, waiting = 0;
  schedstat >> on_cpu >> waiting;
  REQUIRE(schedstat);  // the kernel keeps scheduler statistics (CONFIG_SCHED_INFO)
  return std::chrono::nanoseconds(on_cpu + waiting);
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
  auto runnable_before = thread_runnable_time();
  auto start = std::chrono::steady_clock::now();
  CHECK(ring.value()->wait_and_dispatch(50ms) == 0);
  const auto sleeping_wall = std::chrono::steady_clock::now() - start;
  const auto sleeping_runnable = thread_runnable_time() - runnable_before;
  CHECK(sleeping_wall >= 50ms);
  CHECK(sleeping_runnable < 25ms);  // asleep

  ring.value()->set_poll(200ms);
  runnable_before = thread_runnable_time();
  start = std::chrono::steady_clock::now();
  CHECK(ring.value()->wait_and_dispatch(50ms) == 0);
  const auto spinning_wall = std::chrono::steady_clock::now() - start;
  const auto spinning_runnable = thread_runnable_time() - runnable_before;
  CHECK(spinning_wall >= 250ms);  // the spin, then the wait
  // Spinning, not asleep, for the poll time (sched_yield leaves the thread runnable). The running
  // slice is counted at the next scheduler tick, so a read can be a tick behind.
  CHECK(spinning_runnable >= 150ms);
}

TEST_CASE("a ring submits what was prepared before it dispatches the next completions", "[io]") {
  // As a ublk queue's loop has it: the last batch's COMMIT_AND_FETCH commands are prepared, and
  // the next requests are already there. The commands must reach the kernel before the next
  // requests' handlers run (copying a batch of writes takes a while), not after.
  auto ring = Ring::create(8);
  REQUIRE(ring.ok());
  Ring& r = *ring.value();
  struct SeesSubmitted final : CompletionHandler {
    Ring* ring = nullptr;
    int completions = 0;
    unsigned unsubmitted_seen = 0;
    void on_completion(int) override {
      ++completions;
      unsubmitted_seen += io_uring_sq_ready(ring->native());
    }
  } earlier;
  earlier.ring = &r;
  io_uring_prep_nop(r.prepare(&earlier));
  REQUIRE(r.submit() == 1);  // its completion is waiting in the ring now

  Counter prepared;
  io_uring_prep_nop(r.prepare(&prepared));
  // Both completions in one call: the NOP completes as it is submitted.
  CHECK(r.wait_and_dispatch(1s) == 2);
  CHECK(earlier.completions == 1);
  CHECK(earlier.unsubmitted_seen == 0);
  CHECK(prepared.completions == 1);
  CHECK(r.in_flight() == 0);
}

TEST_CASE("a ring with its fd and a fixed file registered serves I/O through both", "[io]") {
  auto created = Ring::create(8);
  REQUIRE(created.ok());
  Ring& ring = *created.value();
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const char message[] = "fixed";
  REQUIRE(::write(pipe_fds[1], message, sizeof message) == static_cast<ssize_t>(sizeof message));
  // The kernels this runs on (5.18 and later) have both.
  REQUIRE(ring.register_fd_for_this_thread());
  REQUIRE(ring.native()->enter_ring_fd != ring.native()->ring_fd);  // io_uring_enter takes the index now
  REQUIRE(ring.register_fixed_file(pipe_fds[0]).ok());

  Counter counter;
  char buffer[sizeof message] = {};
  io_uring_sqe* sqe = ring.prepare(&counter);
  io_uring_prep_read(sqe, 0, buffer, sizeof buffer, 0);  // fixed file 0: the pipe's read end
  sqe->flags |= IOSQE_FIXED_FILE;
  CHECK(ring.wait_and_dispatch(1s) == 1);
  CHECK(counter.last_result == static_cast<int>(sizeof message));
  CHECK(std::string(buffer) == message);

  ring.unregister_fd_for_this_thread();
  CHECK(ring.native()->enter_ring_fd == ring.native()->ring_fd);
  io_uring_prep_nop(ring.prepare(&counter));  // the ring still works through its own fd
  CHECK(ring.wait_and_dispatch(1s) == 1);
  CHECK(counter.completions == 2);
  // A second set of fixed files is refused (the kernel keeps one per ring): an error, not a crash.
  CHECK(ring.register_fixed_file(pipe_fds[1]).code() == EBUSY);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

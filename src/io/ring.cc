#include "io/ring.h"

#include <sched.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace pcached::io {

Result<std::unique_ptr<Ring>> Ring::create(unsigned entries, unsigned flags) {
  auto ring = std::unique_ptr<Ring>(new Ring());
  if (int rc = io_uring_queue_init(entries, &ring->ring_, flags); rc < 0) {
    return Status::error(-rc, std::string("cannot create an io_uring of ") + std::to_string(entries) +
                                  " entries: " + std::strerror(-rc));
  }
  ring->initialised_ = true;
  ring->sqe_bytes_ = (flags & IORING_SETUP_SQE128) ? 128 : 64;
  return ring;
}

Ring::~Ring() {
  if (initialised_) io_uring_queue_exit(&ring_);
}

bool Ring::register_fd_for_this_thread() { return io_uring_register_ring_fd(&ring_) == 1; }

void Ring::unregister_fd_for_this_thread() {
  if (ring_.enter_ring_fd != ring_.ring_fd) io_uring_unregister_ring_fd(&ring_);
}

Status Ring::register_fixed_file(int fd) {
  if (int rc = io_uring_register_files(&ring_, &fd, 1); rc < 0) {
    return Status::error(-rc, std::string("cannot register a fixed file with the io_uring: ") + std::strerror(-rc));
  }
  return Status();
}

io_uring_sqe* Ring::prepare(CompletionHandler* handler) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  // On SQE128 rings the slot is twice the struct type's size: clear it through a pointer the
  // compiler cannot tie to that type's bounds.
  std::byte* slot = reinterpret_cast<std::byte*>(sqe);
  asm("" : "+r"(slot));
  std::memset(slot, 0, sqe_bytes_);
  io_uring_sqe_set_data(sqe, handler);
  ++submitted_;
  return sqe;
}

std::byte* Ring::command_area(io_uring_sqe* sqe) {
  std::byte* slot = reinterpret_cast<std::byte*>(sqe);
  asm("" : "+r"(slot));
  return slot + offsetof(io_uring_sqe, cmd);
}

unsigned Ring::submit() {
  const int rc = io_uring_submit(&ring_);
  return rc > 0 ? static_cast<unsigned>(rc) : 0;
}

unsigned Ring::drain_completions() {
  unsigned count = 0;
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
    auto* handler = static_cast<CompletionHandler*>(io_uring_cqe_get_data(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    ++completed_;
    ++count;
    if (handler != nullptr) handler->on_completion(result);
  }
  return count;
}

unsigned Ring::wait_and_dispatch(std::chrono::nanoseconds timeout) {
  // What the handlers prepared since the last call (a queue's COMMIT_AND_FETCH commands, which
  // complete the application's requests) goes out before the next completions are dispatched,
  // not after: their handlers may take a while (a batch of writes copied to pmem). The same
  // system call runs the task work that has come in (the driver handing over the next requests).
  if (io_uring_sq_ready(&ring_) > 0) io_uring_submit_and_get_events(&ring_);
  unsigned count = drain_completions();
  if (count > 0) {
    submit();  // what the handlers just prepared
    return count;
  }
  if (poll_.count() > 0) {
    count = poll_and_dispatch();
    if (count > 0) return count;
  }
  __kernel_timespec ts{};
  ts.tv_sec = static_cast<long long>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long long>(timeout.count() % 1'000'000'000);
  io_uring_cqe* cqe = nullptr;
  // One system call submits what is pending and waits for the next completion.
  const int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR) return 0;
  count = drain_completions();
  if (count > 0) submit();
  return count;
}

unsigned Ring::poll_and_dispatch() {
  // Going to sleep and being woken costs two context switches and, on an idle CPU, the wake-up of
  // the CPU itself: at a high request rate, more than the time to the next request. (Nothing is
  // pending here: wait_and_dispatch() submitted it, and no handler has run since.)
  const auto deadline = std::chrono::steady_clock::now() + poll_;
  constexpr int kChecksPerClockRead = 16;
  do {
    for (int check = 0; check < kChecksPerClockRead; ++check) {
      // With IORING_SETUP_TASKRUN_FLAG, peeking enters the kernel only when it flagged task work.
      if (unsigned count = drain_completions(); count > 0) {
        submit();
        return count;
      }
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    // A thread sharing this CPU (the application whose request is next, often) runs first.
    ::sched_yield();
  } while (std::chrono::steady_clock::now() < deadline);
  return 0;
}

unsigned Ring::dispatch() {
  submit();
  return drain_completions();
}

}  // namespace pcached::io

// One io_uring, owned by one thread. Every submission carries the CompletionHandler that its
// completion is dispatched to; the ring owner's loop calls wait_and_dispatch() or dispatch().
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "pcached/status.h"

namespace pcached::io {

class CompletionHandler {
 public:
  // result: the CQE's res (bytes transferred, 0, or a negative errno).
  virtual void on_completion(int result) = 0;

 protected:
  ~CompletionHandler() = default;
};

class Ring {
 public:
  static Result<std::unique_ptr<Ring>> create(unsigned entries, unsigned flags = 0);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // A cleared SQE whose completion goes to handler (nullptr: completion ignored). Submits pending
  // SQEs to make room when the submission queue is full.
  io_uring_sqe* prepare(CompletionHandler* handler);
  // The passthrough-command area of an SQE (80 bytes on SQE128 rings, 16 otherwise).
  static std::byte* command_area(io_uring_sqe* sqe);
  bool big_sqes() const { return sqe_bytes_ == 128; }
  // Hands prepared SQEs to the kernel; returns how many.
  unsigned submit();
  // Submits what is prepared (before it dispatches anything), waits up to timeout for at least one
  // completion, dispatches every completion that is there. Returns the number dispatched. With a
  // poll time set, it first spins that long for a completion or for task work (the kernel handing
  // over a request) before it sleeps.
  unsigned wait_and_dispatch(std::chrono::nanoseconds timeout);
  // How long wait_and_dispatch() spins before it sleeps (0: never). The spin only sees task work
  // on rings set up with IORING_SETUP_TASKRUN_FLAG; otherwise it waits for completions alone.
  void set_poll(std::chrono::nanoseconds poll) { poll_ = poll; }
  // Registers the ring's own fd with the kernel, for the calling thread only: its io_uring_enter
  // calls then skip the fd lookup (and the reference taken and dropped), which a queue thread pays
  // once or twice per request. Only a ring that one thread uses for its whole life may do this: in
  // another thread liburing would pass an index that names nothing there. False where the kernel
  // cannot (before 5.18); the ring works as before.
  bool register_fd_for_this_thread();
  // Undoes it, in the same thread, before the thread ends (the ring's destructor may run elsewhere).
  void unregister_fd_for_this_thread();
  // Registers fd as the ring's fixed file 0, so that submissions naming it (IOSQE_FIXED_FILE,
  // index 0) skip the file lookup. Error where the kernel refuses; the fd is then named as is.
  Status register_fixed_file(int fd);
  // Dispatches what has completed, without waiting (submits first).
  unsigned dispatch();
  // Submissions whose completion has not been dispatched yet.
  uint64_t in_flight() const { return submitted_ - completed_; }

  io_uring* native() { return &ring_; }

 private:
  Ring() = default;
  unsigned drain_completions();
  // Spins up to poll_ for something to dispatch; returns how many were dispatched (0: none came).
  unsigned poll_and_dispatch();

  io_uring ring_{};
  bool initialised_ = false;
  size_t sqe_bytes_ = 64;
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  std::chrono::nanoseconds poll_{0};
};

}  // namespace pcached::io

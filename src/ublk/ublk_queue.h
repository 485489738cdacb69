// One ublk queue: its thread, its io_uring (SQE128) carrying both the ublk FETCH/COMMIT commands
// and the cache engine's backing-device I/O for this queue, its descriptor array and buffers.
#pragma once

#include <linux/ublk_cmd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/ring.h"
#include "pcached/cache.h"
#include "pcached/status.h"
#include "ublk/queue_poll.h"

namespace pcached::ublk {

struct QueueSettings {
  int char_fd = -1;  // /dev/ublkcN
  uint16_t queue = 0;
  uint16_t depth = 0;
  uint32_t max_io_bytes = 0;
  bool ioctl_encoded = true;
  std::vector<int> cpus;  // affinity; empty: any
  // How long the thread spins for the next request before it sleeps (io::Ring::set_poll).
  std::chrono::microseconds poll{0};
};


class UblkQueue {
 public:
  UblkQueue(cache::QueueTarget& target, const QueueSettings& settings);
  ~UblkQueue();

  // Starts the thread; returns once every tag's FETCH is submitted (or setting up failed).
  Status start();
  // Waits for the thread: it ends once the driver aborted every tag (STOP_DEV or recovery), or
  // once it is parked.
  void join();
  // Asks the thread to stop serving while the device stays (the daemon is exiting and leaves the
  // device to the next one, user recovery): the requests it is serving complete and are committed;
  // those the driver hands it from now on are held, never started, and go to the next server
  // (UBLK_F_USER_RECOVERY_REISSUE). The thread then releases its queue of the cache and ends
  // (join). Returns at once; the thread notices within a second.
  void request_park() { parking_.store(true, std::memory_order_relaxed); }
  // Waits until the thread has ended (parked, or every tag aborted) or `deadline` has passed;
  // whether it ended.
  bool wait_finished(std::chrono::steady_clock::time_point deadline);
  // Requests the driver handed the queue after it began to park (reissued to the next server);
  // read once finished.
  unsigned held_requests() const { return held_; }
  // The CPUs the thread is bound to (empty: any).
  const std::vector<int>& cpus() const { return settings_.cpus; }

 private:
  class Tag;
  friend class Tag;

  void run();
  void serve();
  Status set_up();
  void submit_command(Tag& tag, uint32_t opcode, int32_t result);

  cache::QueueTarget& target_;
  QueueSettings settings_;
  std::unique_ptr<io::Ring> ring_;
  bool char_fd_fixed_ = false;  // /dev/ublkcN is the ring's fixed file 0
  std::unique_ptr<cache::CacheQueue> engine_queue_;
  const ublksrv_io_desc* descriptors_ = nullptr;
  size_t descriptors_length_ = 0;
  std::byte* buffers_ = nullptr;
  size_t buffers_length_ = 0;
  std::vector<std::unique_ptr<Tag>> tags_;
  unsigned live_tags_ = 0;
  unsigned serving_ = 0;  // requests handed to the engine and not yet completed
  std::atomic<bool> parking_{false};
  std::mutex finished_mutex_;
  std::condition_variable finished_changed_;
  bool finished_ = false;  // under finished_mutex_
  unsigned held_ = 0;

  std::thread thread_;
  std::atomic<int> setup_state_{0};  // 0 pending, 1 ready, -errno failed
  Status setup_status_;
};

}  // namespace pcached::ublk

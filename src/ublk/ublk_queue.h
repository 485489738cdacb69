// One ublk queue: its thread, its io_uring (SQE128) carrying both the ublk FETCH/COMMIT commands
// and the cache engine's backing-device I/O for this queue, its descriptor array and buffers.
#pragma once

#include <linux/ublk_cmd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
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
  // Waits for the thread: it ends once the driver aborted every tag (STOP_DEV or recovery).
  void join();
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

  std::thread thread_;
  std::atomic<int> setup_state_{0};  // 0 pending, 1 ready, -errno failed
  Status setup_status_;
};

}  // namespace pcached::ublk

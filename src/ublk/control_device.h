// /dev/ublk-control: adding, starting, stopping, deleting and recovering ublk devices. Every
// command is an io_uring passthrough command on an SQE128 ring; commands are bounded by a timeout
// so a wedged driver turns into an error instead of a hung daemon.
#pragma once

#include <linux/ublk_cmd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "io/ring.h"
#include "pcached/status.h"

namespace pcached::ublk {

struct DeviceInfo {
  uint32_t id = 0;
  uint16_t queues = 0;
  uint16_t depth = 0;
  uint16_t state = 0;  // UBLK_S_DEV_*
  uint32_t max_io_bytes = 0;
  int32_t server_pid = 0;
  uint64_t flags = 0;
};

class ControlDevice {
 public:
  static Result<std::unique_ptr<ControlDevice>> open(const std::string& path = "/dev/ublk-control");

  // Feature bits the driver supports (GET_FEATURES, 6.5+); 0 when it cannot say.
  uint64_t features() const { return features_; }
  bool ioctl_encoded() const { return ioctl_encoded_; }

  // dev_id -1: any free id. Returns the device as the driver set it up (its id, negotiated flags).
  Result<DeviceInfo> add(int32_t dev_id, uint16_t queues, uint16_t depth, uint32_t max_io_bytes, uint64_t flags);
  Status set_params(uint32_t dev_id, const ublk_params& params);
  Result<DeviceInfo> info(uint32_t dev_id);
  Status start(uint32_t dev_id, int32_t pid);  // waits until every tag of every queue is fetched
  Status stop(uint32_t dev_id);
  // DEL_DEV: returns once the device's number is free, i.e. once the last opener of /dev/ublkbN
  // and of /dev/ublkcN has let go.
  Status remove(uint32_t dev_id);
  // DEL_DEV_ASYNC where the kernel has it: the device goes at once, its number once the last
  // opener lets go. Elsewhere DEL_DEV.
  Status remove_without_waiting(uint32_t dev_id);
  Status start_recovery(uint32_t dev_id);  // retried while the old server's state is being torn down
  Status end_recovery(uint32_t dev_id, int32_t pid);
  Result<std::vector<int>> queue_affinity(uint32_t dev_id, uint16_t queue);

 private:
  ControlDevice() = default;
  // Sends one command; returns cqe->res (>= 0) or the failure.
  Result<int> send(uint32_t command, ublksrv_ctrl_cmd cmd, std::chrono::seconds timeout = std::chrono::seconds(30));
  Result<int> command(uint32_t nr, const ublksrv_ctrl_cmd& cmd, const std::string& what);

  UniqueFd fd_;
  // One command at a time: the daemon stops and deletes a device (remove) while it adds another.
  std::mutex mutex_;
  std::unique_ptr<io::Ring> ring_;  // guarded by mutex_
  uint64_t features_ = 0;
  bool ioctl_encoded_ = false;
};

}  // namespace pcached::ublk

// A cached block device: /dev/ublkbN served by one UblkQueue per hardware queue. Created fresh
// (ADD_DEV, SET_PARAMS, START_DEV) or taken over from a server that died (user recovery).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "pcached/cache.h"
#include "pcached/status.h"
#include "ublk/control_device.h"
#include "ublk/queue_threads.h"
#include "ublk/ublk_queue.h"

namespace pcached::ublk {

struct DeviceSettings {
  int32_t dev_id = -1;  // -1: the driver picks
  uint16_t queues = 1;
  uint16_t depth = 128;
  uint32_t max_io_bytes = 1 << 20;
  QueueThreadSettings threads;
};

class UblkDevice {
 public:
  static Result<std::unique_ptr<UblkDevice>> create(ControlDevice& control, cache::QueueTarget& target,
                                                    const DeviceSettings& settings);
  // Takes over /dev/ublkbN from a server that died, without the device going away: its I/O was
  // held by the driver and is served (re-issued) by us.
  static Result<std::unique_ptr<UblkDevice>> recover(ControlDevice& control, cache::QueueTarget& target, uint32_t dev_id,
                                                     const QueueThreadSettings& threads);
  ~UblkDevice();

  uint32_t id() const { return info_.id; }
  std::string block_device() const { return "/dev/ublkb" + std::to_string(info_.id); }
  const DeviceInfo& info() const { return info_; }
  // The CPUs each queue's thread is bound to (empty: any).
  std::vector<std::vector<int>> queue_cpus() const;

  // STOP_DEV (in-flight I/O completes, the disk goes), the queues drain, DEL_DEV.
  Status remove();
  // Stops serving and leaves the device to the next server (user recovery): each queue
  // completes what it started and holds the rest (UblkQueue::request_park); no queue of the
  // cache is left when it returns. The device is then neither served nor removed by this object.
  // ETIMEDOUT if a queue is still serving a request after `timeout` (a backing device that does
  // not answer): the queues that are not parked go on serving until the process exits.
  Status park(std::chrono::milliseconds timeout);

 private:
  UblkDevice(ControlDevice& control, cache::QueueTarget& target, const QueueThreadSettings& threads)
      : control_(control), target_(target), threads_(threads) {}
  Status open_char_device();
  Status start_queues();

  ControlDevice& control_;
  cache::QueueTarget& target_;
  QueueThreadSettings threads_;
  DeviceInfo info_;
  UniqueFd char_fd_;
  std::vector<std::unique_ptr<UblkQueue>> queues_;
  bool removed_ = false;
};

}  // namespace pcached::ublk

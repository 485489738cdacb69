// A cached block device: /dev/ublkbN served by one UblkQueue per hardware queue. Created fresh
// (ADD_DEV, SET_PARAMS, START_DEV) or taken over from a server that died (user recovery).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "pcached/cache.h"
#include "pcached/status.h"
#include "ublk/control_device.h"
#include "ublk/ublk_queue.h"

namespace pcached::ublk {

// Where each queue's thread may run, from the CPUs the kernel maps to its queue
// (GET_QUEUE_AFFINITY).
enum class QueueBinding {
  // Bound to them when they are more than one CPU. A queue mapped to a single CPU (as many queues
  // as CPUs) is left to the scheduler: bound there, its thread would have to share that CPU with
  // every program submitting through the queue, two context switches per request while other
  // CPUs idle (measured in the VM on a device that does nothing: 6x fewer 4 KiB requests).
  Auto,
  Kernel,  // always bound to them, as ublksrv does
  None,    // never bound
};

struct DeviceSettings {
  int32_t dev_id = -1;  // -1: the driver picks
  uint16_t queues = 1;
  uint16_t depth = 128;
  uint32_t max_io_bytes = 1 << 20;
  QueueBinding binding = QueueBinding::Auto;
};

class UblkDevice {
 public:
  static Result<std::unique_ptr<UblkDevice>> create(ControlDevice& control, cache::QueueTarget& target,
                                                    const DeviceSettings& settings);
  // Takes over /dev/ublkbN from a server that died, without the device going away: its I/O was
  // held by the driver and is served (re-issued) by us.
  static Result<std::unique_ptr<UblkDevice>> recover(ControlDevice& control, cache::QueueTarget& target, uint32_t dev_id,
                                                     QueueBinding binding);
  ~UblkDevice();

  uint32_t id() const { return info_.id; }
  std::string block_device() const { return "/dev/ublkb" + std::to_string(info_.id); }
  const DeviceInfo& info() const { return info_; }
  // The CPUs each queue's thread is bound to (empty: any).
  std::vector<std::vector<int>> queue_cpus() const;

  // STOP_DEV (in-flight I/O completes, the disk goes), the queues drain, DEL_DEV.
  Status remove();

 private:
  UblkDevice(ControlDevice& control, cache::QueueTarget& target, QueueBinding binding)
      : control_(control), target_(target), binding_(binding) {}
  Status open_char_device();
  Status start_queues();

  ControlDevice& control_;
  cache::QueueTarget& target_;
  QueueBinding binding_;
  DeviceInfo info_;
  UniqueFd char_fd_;
  std::vector<std::unique_ptr<UblkQueue>> queues_;
  bool removed_ = false;
};

}  // namespace pcached::ublk

// Caches exported to nobody: each gets a stable device name, inprocN (N kept in the state file as
// a ublk device's number is), and I/O reaches it only through in-process queues
// (frontend::SyncQueue) that the daemon's owner opens. For tests, and for trying the control plane
// on a machine without the ublk driver; nothing here needs the kernel's help.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include "daemon/frontend.h"

namespace pcached::daemon {

class InProcessFrontend final : public Frontend {
 public:
  InProcessFrontend() = default;

  Result<std::unique_ptr<ExportedDevice>> create(cache::Cache& cache, const ExportSettings& settings) override;
  // Nothing outlives the process that served it: the device is made anew, under its old number.
  Result<std::unique_ptr<ExportedDevice>> restore(cache::Cache& cache, const ExportSettings& settings) override;

 private:
  class Device;

  // Device numbers in use. Shared with the devices, which give theirs back when they go, so that
  // neither has to outlive the other.
  struct Ids {
    std::mutex mutex;
    std::set<uint32_t> used;
  };
  std::shared_ptr<Ids> ids_ = std::make_shared<Ids>();
};

}  // namespace pcached::daemon

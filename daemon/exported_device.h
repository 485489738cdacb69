// One cache as the daemon exports it: the device its users do I/O on (/dev/ublkbN through ublk,
// inprocN in-process). Made by a Frontend (daemon/frontend.h); the cache it serves must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "frontend/sync_queue.h"
#include "pcached/status.h"

namespace pcached::daemon {

class ExportedDevice {
 public:
  // Stops serving, as remove() does (its failure is only logged), unless removed already.
  virtual ~ExportedDevice() = default;

  // The number the state file keeps, so that a restarted daemon exports the cache under the same
  // name again.
  virtual uint32_t id() const = 0;
  // What users and commands name the device by: /dev/ublkb3, inproc3.
  virtual std::string name() const = 0;
  // The device's own fields for `status`: the frontend, and what it was set up with.
  virtual nlohmann::json describe() const = 0;

  // EBUSY, naming the user, while something besides the cache uses the device: a filesystem
  // mounted on it, a program that has it open, an in-process queue.
  virtual Status check_unused() const = 0;
  // Stops serving: in-flight I/O completes and no queue of the cache remains afterwards, so the
  // cache may detach. A device still in use (check_unused) is refused and keeps serving.
  virtual Status remove() = 0;
  // Stops serving but leaves the device to the next daemon (the daemon is exiting): what is
  // under way completes, and no queue of the cache remains afterwards, so the cache may detach
  // (forced). Refused (EBUSY, ETIMEDOUT) when that cannot be had; the device then stays as after
  // a crash. Nothing may be called afterwards but the destructor, which leaves the device too.
  virtual Status park() = 0;

  // A queue on the device for the calling thread, and only for it: the in-process frontend's way
  // in for tests. A ublk device takes its I/O through the kernel and refuses (ENOTSUP). The queue
  // must be released before the device is removed or destroyed.
  virtual Result<std::shared_ptr<frontend::SyncQueue>> open_queue() = 0;

 protected:
  ExportedDevice() = default;
  ExportedDevice(const ExportedDevice&) = delete;
  ExportedDevice& operator=(const ExportedDevice&) = delete;
};

}  // namespace pcached::daemon

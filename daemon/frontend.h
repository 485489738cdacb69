// The seam between the daemon and what exports its caches: the daemon asks a Frontend for one
// ExportedDevice per cache and knows nothing of ublk. UblkFrontend (daemon/ublk_frontend.h) serves
// /dev/ublkbN; InProcessFrontend (daemon/in_process_frontend.h) exports nothing to the kernel, so
// that tests, and anyone trying the control plane, can run the daemon without the ublk driver.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "daemon/exported_device.h"
#include "pcached/cache.h"
#include "pcached/status.h"
#include "ublk/queue_threads.h"

namespace pcached::daemon {

enum class FrontendKind { Ublk, InProcess };

// Which CPUs a queue's thread runs on (ublk/queue_affinity.h); the in-process frontend has no
// queue threads of its own and ignores it.
using ublk::QueueAffinity;

// What a device is set up with, from the cache's entry in the state file.
struct ExportSettings {
  int device_id = -1;  // -1: the frontend picks a free id
  unsigned queues = 1;
  unsigned depth = 128;
  ublk::QueueThreadSettings queue_threads;
};

class Frontend {
 public:
  virtual ~Frontend() = default;

  // Exports the cache as a new device.
  virtual Result<std::unique_ptr<ExportedDevice>> create(cache::Cache& cache, const ExportSettings& settings) = 0;
  // After a daemon restart: the device a previous daemon exported as settings.device_id is served
  // again under that id; taken over where it still exists (its users see a pause, not an error),
  // made anew otherwise.
  virtual Result<std::unique_ptr<ExportedDevice>> restore(cache::Cache& cache, const ExportSettings& settings) = 0;

 protected:
  Frontend() = default;
  Frontend(const Frontend&) = delete;
  Frontend& operator=(const Frontend&) = delete;
};

// The frontend of that kind; ublk opens its control device (ublk_control) here, and fails
// without it.
Result<std::unique_ptr<Frontend>> open_frontend(FrontendKind kind, const std::string& ublk_control);

}  // namespace pcached::daemon

// pcachedd's core: the caches it runs (each a cache engine and the device a frontend exports it
// as: /dev/ublkbN, or inprocN in-process), the state file that brings them back after a restart,
// and the control commands.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/protocol.h"
#include "daemon/cache_config.h"
#include "daemon/exported_device.h"
#include "daemon/frontend.h"
#include "frontend/sync_queue.h"
#include "metrics/cache_collector.h"
#include "pcached/cache.h"

namespace pcached::daemon {

struct DaemonOptions {
  std::string state_dir = "/var/lib/pcached";
  FrontendKind frontend = FrontendKind::Ublk;
  std::string ublk_control = "/dev/ublk-control";  // the ublk frontend's only
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> start(const DaemonOptions& options);
  ~Daemon();

  // Handles one control request; never throws; may be called from several threads at once. A
  // flush or remove that asks for progress reports sends them through progress while it writes
  // back, without holding up the other commands (a second flush, remove or set of the same cache
  // is refused meanwhile).
  using Progress = std::function<void(const std::string& line)>;
  std::string handle(const std::string& request_text, const Progress& progress = {});
  // Each cache's statistics, for the metrics endpoint.
  std::vector<metrics::CacheSample> samples() const;
  // Removes every device, writing back dirty data (used with --remove-on-exit). Returns how many
  // caches are left: those whose device is in use or whose data could not be written back.
  size_t remove_all();
  // Makes the flushes and removes that are writing back now give up, and refuses new ones
  // (their clients get ECANCELED, the dirty data stays on pmem): the daemon is exiting and leaves
  // the caches to the next one.
  void interrupt_write_backs();
  // The daemon is exiting and leaves its caches to the next one: each device is parked (what is
  // under way completes, the rest waits in the driver) and its cache detached, forced, which keeps
  // the dirty data on pmem and checkpoints the clean data, so that the next daemon starts with it
  // cached. Returns how many caches are left as after a crash instead (their next attach starts
  // with the dirty data only). Nothing may be called afterwards.
  size_t leave_all();
  // An in-process queue on a cache's device (the in-process frontend's only way in; a ublk device
  // refuses). The queue must be released before the cache is removed or the daemon destroyed.
  Result<std::shared_ptr<frontend::SyncQueue>> open_queue(const std::string& name_or_device);
  // Makes a cache's backing device misbehave on purpose (tests and fault drills); valid while the
  // cache runs.
  Result<backing::FaultInjection*> backing_faults(const std::string& name_or_device);

 private:
  struct Managed {
    CacheConfig config;
    std::unique_ptr<cache::Cache> cache;
    std::unique_ptr<ExportedDevice> device;  // declared after the cache it serves, so it goes first
    // The write-back ("flush" or "remove") in progress, "" when none. It runs without the
    // daemon's mutex; while it does, nothing else may change or erase this entry.
    std::string busy;
    // While a remove stops the device and detaches the cache (without the mutex), the two are
    // out of the entry, in the remove's hands; what the device was called until then.
    std::string removing_device;
    // Meanwhile the cache the remove detaches (and owns): an exiting daemon interrupts its
    // write-back too, rather than wait for all of it.
    cache::Cache* detaching = nullptr;
  };

  explicit Daemon(const DaemonOptions& options) : options_(options) {}
  Status restore(const CacheConfig& config);
  Result<nlohmann::json> add(const nlohmann::json& args);
  Result<nlohmann::json> remove(const nlohmann::json& args, const Progress& progress = {});
  Result<nlohmann::json> list() const;
  Result<nlohmann::json> status(const nlohmann::json& args) const;
  Result<nlohmann::json> set(const nlohmann::json& args);
  Result<nlohmann::json> flush(const nlohmann::json& args, const Progress& progress);
  Result<Managed*> find(const std::string& name_or_device) const;
  // As find, and refused unless the cache is open (it may have failed to come back).
  Result<Managed*> find_running(const std::string& name_or_device) const;
  // EBUSY, with the reason, while the cache is busy with a write-back.
  static Status refuse_if_busy(const Managed& managed);
  // Writes back everything dirty with `lock` (on mutex_) released meanwhile and held again on
  // return, the cache marked busy with `operation` until then.
  Status write_back(Managed& managed, const std::string& operation, std::unique_lock<std::mutex>& lock,
                    const nlohmann::json& args, const Progress& progress);
  Status open_cache(Managed& managed, bool format, bool force) const;
  Status save() const;
  nlohmann::json describe(const Managed& managed, bool detailed) const;

  DaemonOptions options_;
  std::unique_ptr<Frontend> frontend_;  // declared before the caches: it outlives their devices
  mutable std::mutex mutex_;  // guards caches_ and every entry's fields
  std::map<std::string, std::unique_ptr<Managed>> caches_;
};

}  // namespace pcached::daemon

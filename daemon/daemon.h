// pcachedd's core: the caches it runs (each a cache engine and its /dev/ublkbN), the state file
// that brings them back after a restart, and the control commands.
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
#include "metrics/cache_collector.h"
#include "pcached/cache.h"
#include "ublk/control_device.h"
#include "ublk/ublk_device.h"

namespace pcached::daemon {

struct DaemonOptions {
  std::string state_dir = "/var/lib/pcached";
  std::string ublk_control = "/dev/ublk-control";
};

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> start(const DaemonOptions& options);
  ~Daemon();

  // Handles one control request; never throws. A flush or remove that asks for progress reports
  // sends them through progress while it writes back.
  using Progress = std::function<void(const std::string& line)>;
  std::string handle(const std::string& request_text, const Progress& progress = {});
  // Each cache's statistics, for the metrics endpoint.
  std::vector<metrics::CacheSample> samples() const;
  // Removes every device, writing back dirty data (used with --remove-on-exit).
  void remove_all();

 private:
  struct Managed {
    CacheConfig config;
    std::unique_ptr<cache::Cache> cache;
    std::unique_ptr<ublk::UblkDevice> device;
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
  Status open_cache(Managed& managed, bool format, bool force) const;
  Status save() const;
  nlohmann::json describe(const Managed& managed, bool detailed) const;

  DaemonOptions options_;
  std::unique_ptr<ublk::ControlDevice> control_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Managed>> caches_;
};

}  // namespace pcached::daemon

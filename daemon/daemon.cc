#include "daemon/daemon.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace pcached::daemon {

namespace {

std::string state_path(const DaemonOptions& options) { return options.state_dir + "/state.json"; }

unsigned default_queues() { return std::clamp(std::thread::hardware_concurrency(), 1u, 4u); }

ExportSettings export_settings(const CacheConfig& config) {
  return {config.device_id, config.queues, config.depth,
          {config.queue_affinity, std::chrono::microseconds(config.queue_poll_us)}};
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonOptions& options) {
  auto daemon = std::unique_ptr<Daemon>(new Daemon(options));
  if (::mkdir(options.state_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error(errno, "cannot create state directory " + options.state_dir + ": " + std::strerror(errno));
  }
  auto frontend = open_frontend(options.frontend, options.ublk_control);
  if (!frontend.ok()) return frontend.status();
  daemon->frontend_ = std::move(frontend.value());
  auto configs = load_state(state_path(options));
  if (!configs.ok()) return configs.status();
  for (const CacheConfig& config : configs.value()) {
    if (Status status = daemon->restore(config); !status.ok()) {
      // One cache that cannot come back must not keep the others down; it stays in the state
      // file so that nothing is forgotten, and status shows it as failed.
      spdlog::error("cache {}: not restored: {}", config.name, status.message());
      auto managed = std::make_unique<Managed>();
      managed->config = config;
      daemon->caches_.emplace(config.name, std::move(managed));
    }
  }
  return daemon;
}

Daemon::~Daemon() = default;

Status Daemon::open_cache(Managed& managed, bool format, bool force) const {
  const CacheConfig& config = managed.config;
  cache::CacheOptions options;
  options.region_path = config.region;
  options.backing_path = config.backing;
  options.format = format;
  options.force = force;
  options.allow_volatile_region = config.allow_volatile_region;
  options.allow_volatile_writeback = config.allow_volatile_writeback;
  options.segment_size = config.segment_size;
  options.tunables = config.tunables;
  auto spec = pmem::parse_policy_spec(config.copy_policy);
  if (!spec.ok()) return spec.status();
  options.copy_policy.spec = spec.value();
  options.copy_policy.saved_table_path = options_.state_dir + "/calibration-" + config.name + ".json";
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) return cache.status();
  managed.cache = std::move(cache.value());
  return Status();
}

Status Daemon::restore(const CacheConfig& config) {
  auto managed = std::make_unique<Managed>();
  managed->config = config;
  if (Status status = open_cache(*managed, false, false); !status.ok()) return status;
  auto device = frontend_->restore(*managed->cache, export_settings(config));
  if (!device.ok()) return device.status();
  managed->device = std::move(device.value());
  managed->config.device_id = static_cast<int>(managed->device->id());
  spdlog::info("cache {}: {} on {} over {}", config.name, managed->device->name(), config.region, config.backing);
  caches_.emplace(config.name, std::move(managed));
  return Status();
}

Status Daemon::save() const {
  std::vector<CacheConfig> configs;
  for (const auto& [name, managed] : caches_) configs.push_back(managed->config);
  return save_state(state_path(options_), configs);
}

namespace {

// The engine's write-back progress as progress lines, for a client that asked for them.
cache::Cache::FlushProgress reporter(const nlohmann::json& args, const cache::Cache& cache,
                                     const Daemon::Progress& send) {
  auto wanted = control::bool_arg(args, "progress", false);
  if (!send || !wanted.ok() || !wanted.value()) return {};
  const uint64_t written_before = cache.stats().writeback_bytes;
  const auto started = std::chrono::steady_clock::now();
  return [&cache, send, written_before, started](uint64_t dirty_bytes) {
    send(control::encode_progress(
        {{"dirty_bytes", dirty_bytes},
         {"written_back_bytes", cache.stats().writeback_bytes - written_before},
         {"elapsed_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()}}));
  };
}

}  // namespace

std::string Daemon::handle(const std::string& request_text, const Progress& progress) {
  auto request = control::parse_request(request_text);
  if (!request.ok()) return control::encode_failure(request.status());
  // Each command takes the mutex itself: a flush or remove lets go of it while it writes back.
  Result<nlohmann::json> result = Status::error(EINVAL, "");
  const std::string& command = request->command;
  if (command == "add") {
    result = add(request->args);
  } else if (command == "remove") {
    result = remove(request->args, progress);
  } else if (command == "list") {
    result = list();
  } else if (command == "status") {
    result = status(request->args);
  } else if (command == "set") {
    result = set(request->args);
  } else if (command == "flush") {
    result = flush(request->args, progress);
  } else {
    result = Status::error(EINVAL, "unknown command '" + command + "' (known: add, remove, list, status, set, flush)");
  }
  return result.ok() ? control::encode_success(result.value()) : control::encode_failure(result.status());
}

Result<nlohmann::json> Daemon::add(const nlohmann::json& args) {
  auto region = control::string_arg(args, "cache", true);
  if (!region.ok()) return region.status();
  auto backing = control::string_arg(args, "backing", true);
  if (!backing.ok()) return backing.status();
  std::lock_guard lock(mutex_);
  std::string default_name;
  for (unsigned i = 0;; ++i) {
    default_name = "cache" + std::to_string(i);
    if (!caches_.contains(default_name)) break;
  }
  nlohmann::json config_doc = args;
  config_doc["name"] = args.contains("name") ? args["name"] : nlohmann::json(default_name);
  config_doc["region"] = region.value();
  if (!args.contains("queues")) config_doc["queues"] = default_queues();
  config_doc.erase("cache");
  auto config = config_from_json(config_doc);
  if (!config.ok()) return config.status();
  auto format = control::bool_arg(args, "format", false);
  auto force = control::bool_arg(args, "force", false);
  if (!format.ok()) return format.status();
  if (!force.ok()) return force.status();
  if (caches_.contains(config->name)) return Status::error(EEXIST, "a cache named '" + config->name + "' exists");
  for (const auto& [name, managed] : caches_) {
    if (managed->config.region == config->region || managed->config.backing == config->backing) {
      return Status::error(EBUSY, "cache '" + name + "' already uses " +
                                      (managed->config.region == config->region ? config->region : config->backing));
    }
  }

  auto managed = std::make_unique<Managed>();
  managed->config = config.value();
  if (Status status = open_cache(*managed, format.value(), force.value()); !status.ok()) return status;
  auto device = frontend_->create(*managed->cache, export_settings(managed->config));
  if (!device.ok()) {
    managed->cache->abandon();
    return device.status();
  }
  managed->device = std::move(device.value());
  managed->config.device_id = static_cast<int>(managed->device->id());
  const std::string name = managed->config.name;
  caches_.emplace(name, std::move(managed));
  if (Status status = save(); !status.ok()) spdlog::error("{}", status.message());
  return describe(*caches_.at(name), false);
}

Result<Daemon::Managed*> Daemon::find(const std::string& name_or_device) const {
  for (const auto& [name, managed] : caches_) {
    const std::string device = managed->device ? managed->device->name() : managed->removing_device;
    if (name == name_or_device || (!device.empty() && device == name_or_device)) {
      return managed.get();
    }
  }
  return Status::error(ENOENT, "no cache named '" + name_or_device + "'");
}

Result<Daemon::Managed*> Daemon::find_running(const std::string& name_or_device) const {
  auto found = find(name_or_device);
  if (found.ok() && !found.value()->cache) {
    if (Status busy = refuse_if_busy(*found.value()); !busy.ok()) return busy;  // being removed
    return Status::error(EIO, "cache '" + found.value()->config.name + "' is not running");
  }
  return found;
}

Status Daemon::refuse_if_busy(const Managed& managed) {
  if (managed.busy.empty()) return Status();
  return Status::error(EBUSY, "cache '" + managed.config.name + "' is busy: a " + managed.busy +
                                  " is writing its dirty data back; try again when it is done");
}

Status Daemon::write_back(Managed& managed, const std::string& operation, std::unique_lock<std::mutex>& lock,
                          const nlohmann::json& args, const Progress& progress) {
  // Marked busy, the entry stays put (remove refuses it) and nobody else writes it back or
  // changes its settings; status, list, metrics and the other caches are served meanwhile.
  managed.busy = operation;
  lock.unlock();
  Status status = managed.cache->flush_all(reporter(args, *managed.cache, progress));
  lock.lock();
  managed.busy.clear();
  return status;
}

Result<nlohmann::json> Daemon::remove(const nlohmann::json& args, const Progress& progress) {
  auto target = control::string_arg(args, "name", true);
  if (!target.ok()) return target.status();
  auto no_flush = control::bool_arg(args, "no_flush", false);
  if (!no_flush.ok()) return no_flush.status();
  std::unique_lock lock(mutex_);
  auto found = find(target.value());
  if (!found.ok()) return found.status();
  Managed& managed = *found.value();
  if (Status busy = refuse_if_busy(managed); !busy.ok()) return busy;
  const std::string name = managed.config.name;
  const std::string device = managed.device ? managed.device->name() : "";
  // Refused before anything is written back; remove() checks again once it is.
  if (managed.device) {
    if (Status busy = managed.device->check_unused(); !busy.ok()) {
      return busy.with_context("cache " + name + " not removed; " + device + " keeps running");
    }
  }
  if (managed.cache && !no_flush.value()) {
    // Written back while the device still runs: if the backing device cannot take the data (it
    // failed or went away), the remove is refused and the device keeps serving from the cache.
    // detach() below writes back what arrives meanwhile.
    if (Status status = write_back(managed, "remove", lock, args, progress); !status.ok()) {
      if (status.code() == ECANCELED) {
        return status.with_context("cache " + name + " not removed: the daemon is exiting; " + device + " stays");
      }
      return status.with_context("cache " + name + " not removed: its dirty data could not be written back; " +
                                 device + " keeps running (fix the backing device, or remove with --no-flush " +
                                 "to leave the dirty data on pmem)");
    }
  }
  // Stopping the device waits for its I/O, and detaching writes back what reached the cache since:
  // done without the mutex as well, the device and the cache out of the entry, so that status,
  // list and metrics neither wait for them nor touch them meanwhile (the entry shows "removing").
  managed.busy = "remove";
  managed.removing_device = device;
  std::unique_ptr<cache::Cache> cache = std::move(managed.cache);
  std::unique_ptr<ExportedDevice> exported = std::move(managed.device);  // destroyed before the cache
  managed.detaching = cache.get();
  auto give_back = [&] {  // with the lock held
    managed.device = std::move(exported);
    managed.cache = std::move(cache);
    managed.busy.clear();
    managed.removing_device.clear();
    managed.detaching = nullptr;
  };
  lock.unlock();
  if (exported) {
    if (Status status = exported->remove(); !status.ok()) {
      lock.lock();
      give_back();
      return status;
    }
    exported.reset();
  }
  cache::CacheStats before{};
  if (cache) {
    before = cache->stats();
    // Invariant 8: every dirty sector goes to the backing device first, unless told otherwise.
    if (Status status = cache->detach(no_flush.value(), reporter(args, *cache, progress)); !status.ok()) {
      lock.lock();
      give_back();
      if (status.code() == ECANCELED) {
        // The state file still names the cache: the next daemon attaches it and exports it again.
        return status.with_context("cache " + name + " not removed: the daemon is exiting; " + device +
                                   " is gone, the dirty data stays on pmem and the next start brings it back");
      }
      return status.with_context("cache " + name + " no longer exported as " + device + " but still holds dirty data");
    }
  }
  lock.lock();
  caches_.erase(name);
  if (Status status = save(); !status.ok()) spdlog::error("{}", status.message());
  return nlohmann::json{{"name", name}, {"device", device}, {"written_back", !no_flush.value()},
                        {"dirty_bytes_left", no_flush.value() ? before.dirty_bytes : 0}};
}

nlohmann::json Daemon::describe(const Managed& managed, bool detailed) const {
  nlohmann::json doc = {{"name", managed.config.name},
                        {"device", managed.device ? managed.device->name() : managed.removing_device},
                        {"region", managed.config.region},
                        {"backing", managed.config.backing},
                        {"state", managed.device ? "running" : managed.busy == "remove" ? "removing" : "failed"}};
  // A flush or remove writing back right now.
  if (!managed.busy.empty()) doc["operation"] = managed.busy;
  if (!managed.cache) return doc;
  const cache::CacheStats s = managed.cache->stats();
  const cache::Tunables tunables = managed.cache->tunables();
  doc["mode"] = std::string(cache::to_string(tunables.mode));
  doc["persistence_domain"] = s.persistence_domain;
  doc["volatile_writeback"] = s.volatile_writeback;
  doc["capacity_bytes"] = s.capacity_bytes;
  doc["device_bytes"] = s.device_bytes;
  doc["cached_bytes"] = s.cached_bytes;
  doc["dirty_bytes"] = s.dirty_bytes;
  if (!detailed) return doc;
  if (managed.device) doc["frontend"] = managed.device->describe();
  doc["queues"] = managed.config.queues;
  doc["depth"] = managed.config.depth;
  doc["queue_affinity"] = to_string(managed.config.queue_affinity);
  doc["queue_poll_us"] = managed.config.queue_poll_us;
  doc["logical_block_size"] = s.logical_block_size;
  doc["segments"] = {{"total", s.segments_total}, {"size_bytes", s.segment_bytes}, {"free", s.segments_free}, {"data", s.segments_data},
                     {"journal", s.segments_journal}, {"bad", s.segments_bad}};
  doc["badblocks"] = {{"ranges", s.bad_ranges}, {"bytes", s.bad_bytes}};
  doc["lost"] = {{"ranges", s.lost_ranges}, {"bytes", s.lost_bytes}};
  doc["reads"] = {{"total", s.reads}, {"hits", s.read_hits}, {"partial_hits", s.read_partial_hits},
                  {"misses", s.read_misses}, {"bytes", s.read_bytes}};
  doc["writes"] = {{"total", s.writes}, {"bytes", s.write_bytes}, {"discards", s.discards},
                   {"write_zeroes", s.write_zeroes}, {"flushes", s.flushes},
                   {"waited_for_segment", s.writer_waits}};
  doc["writeback"] = {{"bytes", s.writeback_bytes}, {"batches", s.writeback_batches}, {"errors", s.writeback_errors},
                      {"lost_bytes", s.writeback_lost_bytes},
                      {"stalled", s.writeback_stalled}, {"eager", s.writeback_eager}};
  doc["gc"] = {{"runs", s.gc_runs},
               {"segments_reclaimed", s.segments_reclaimed},
               {"moved_bytes", s.gc_moved_bytes},
               {"moved_dirty_bytes", s.gc_moved_dirty_bytes},
               {"evicted_bytes", s.gc_evicted_bytes},
               {"commit_waits", s.gc_commit_waits},
               {"threshold_percent", tunables.gc_threshold}};
  doc["fills"] = {{"total", s.fills}, {"bytes", s.fill_bytes}, {"deferred", s.promotions_deferred}};
  doc["bypass"] = {{"reads", s.bypassed_reads}, {"writes", s.bypassed_writes}, {"bytes", s.bypassed_bytes}};
  doc["direct_writes"] = {{"total", s.direct_writes}, {"errors", s.direct_write_errors},
                          {"backing_flushes", s.backing_flushes}};
  doc["errors"] = {{"backing_read", s.backing_read_errors}, {"backing_write", s.direct_write_errors},
                   {"media", s.media_errors}, {"data_crc", s.data_crc_errors}};
  doc["settings"] = settings_json(tunables);
  doc["copy_policy"] = managed.cache->copy_policy_description();
  doc["recovery"] = {{"seconds", s.recovery_seconds}, {"keys", s.recovered_keys}, {"clean_bytes", s.restored_clean_bytes}};
  doc["index_bytes"] = s.index_bytes;
  doc["live_map_bytes"] = s.live_map_bytes;
  doc["extents"] = s.extents;
  return doc;
}

Result<nlohmann::json> Daemon::list() const {
  std::lock_guard lock(mutex_);
  nlohmann::json caches = nlohmann::json::array();
  for (const auto& [name, managed] : caches_) caches.push_back(describe(*managed, false));
  return nlohmann::json{{"caches", caches}};
}

Result<nlohmann::json> Daemon::status(const nlohmann::json& args) const {
  auto target = control::string_arg(args, "name", true);
  if (!target.ok()) return target.status();
  std::lock_guard lock(mutex_);
  auto found = find(target.value());
  if (!found.ok()) return found.status();
  return describe(*found.value(), true);
}

std::vector<metrics::CacheSample> Daemon::samples() const {
  std::lock_guard lock(mutex_);
  std::vector<metrics::CacheSample> out;
  for (const auto& [name, managed] : caches_) {
    if (!managed->cache) continue;
    out.push_back({name, managed->device ? managed->device->name() : "", managed->cache->stats()});
  }
  return out;
}

Result<nlohmann::json> Daemon::set(const nlohmann::json& args) {
  auto target = control::string_arg(args, "name", true);
  auto key = control::string_arg(args, "key", true);
  auto value = control::string_arg(args, "value", true);
  for (const Status* status : {&target.status(), &key.status(), &value.status()}) {
    if (!status->ok()) return *status;
  }
  std::lock_guard lock(mutex_);
  auto found = find_running(target.value());
  if (!found.ok()) return found.status();
  Managed& managed = *found.value();
  if (Status busy = refuse_if_busy(managed); !busy.ok()) return busy;
  // Remembered, so that a restart keeps the setting.
  const Status changed = managed.cache->set(key.value(), value.value());
  // Remembered, so that a restart keeps it (a mode switch that could not write everything back
  // has still switched).
  managed.config.tunables = managed.cache->tunables();
  if (key.value() == "copy_policy" && changed.ok()) managed.config.copy_policy = value.value();
  if (Status status = save(); !status.ok()) spdlog::error("{}", status.message());
  if (!changed.ok()) return changed;
  return nlohmann::json{{"name", managed.config.name}, {"key", key.value()}, {"value", value.value()}};
}

Result<nlohmann::json> Daemon::flush(const nlohmann::json& args, const Progress& progress) {
  auto target = control::string_arg(args, "name", true);
  if (!target.ok()) return target.status();
  std::unique_lock lock(mutex_);
  auto found = find_running(target.value());
  if (!found.ok()) return found.status();
  Managed& managed = *found.value();
  if (Status busy = refuse_if_busy(managed); !busy.ok()) return busy;
  const uint64_t before = managed.cache->stats().writeback_bytes;
  if (Status status = write_back(managed, "flush", lock, args, progress); !status.ok()) return status;
  const cache::CacheStats after = managed.cache->stats();
  return nlohmann::json{{"name", managed.config.name}, {"written_back_bytes", after.writeback_bytes - before},
                        {"dirty_bytes", after.dirty_bytes}};
}

Result<std::shared_ptr<frontend::SyncQueue>> Daemon::open_queue(const std::string& name_or_device) {
  std::lock_guard lock(mutex_);
  auto found = find_running(name_or_device);
  if (!found.ok()) return found.status();
  Managed& managed = *found.value();
  // A cache whose write-back on remove failed is open but exported no more.
  if (!managed.device) return Status::error(EIO, "cache '" + managed.config.name + "' is not exported");
  return managed.device->open_queue();
}

Result<backing::FaultInjection*> Daemon::backing_faults(const std::string& name_or_device) {
  std::lock_guard lock(mutex_);
  auto found = find_running(name_or_device);
  if (!found.ok()) return found.status();
  Managed& managed = *found.value();
  return &managed.cache->backing_faults();
}

void Daemon::interrupt_write_backs() {
  std::lock_guard lock(mutex_);
  for (const auto& [name, managed] : caches_) {
    if (managed->cache) managed->cache->interrupt_waits();
    if (managed->detaching != nullptr) managed->detaching->interrupt_waits();  // (owned by its remove)
  }
}

size_t Daemon::leave_all() {
  std::lock_guard lock(mutex_);
  size_t left = 0;
  for (const auto& [name, managed] : caches_) {
    if (!managed->cache || !managed->busy.empty()) {
      ++left;  // failed, or a remove still holds it
      continue;
    }
    if (managed->device) {
      if (Status status = managed->device->park(); !status.ok()) {
        spdlog::warn("cache {}: {}; left as after a crash", name, status.message());
        ++left;
        continue;
      }
    }
    if (Status status = managed->cache->detach(/*force=*/true); !status.ok()) {
      spdlog::warn("cache {}: {}", name, status.message());
      ++left;
    }
  }
  return left;
}

size_t Daemon::remove_all() {
  std::vector<std::string> names;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, managed] : caches_) names.push_back(name);
  }
  size_t left = 0;
  for (const std::string& name : names) {
    auto result = remove(nlohmann::json{{"name", name}});
    if (!result.ok()) {
      spdlog::error("cache {}: {}", name, result.status().message());
      ++left;
    }
  }
  return left;
}

}  // namespace pcached::daemon

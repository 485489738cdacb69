// What the daemon remembers of each cache, in its state file, so that a restarted daemon brings
// every cache and its /dev/ublkbN back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/frontend.h"
#include "pcached/status.h"
#include "pcached/tunables.h"

namespace pcached::daemon {

struct CacheConfig {
  std::string name;
  std::string region;
  std::string backing;
  unsigned queues = 1;
  unsigned depth = 128;
  QueueAffinity queue_affinity = QueueAffinity::Auto;  // "queue_affinity": "auto", "kernel" or "none"
  uint64_t queue_poll_us = ublk::kDefaultQueuePoll.count();  // "queue_poll_us": 0 to 10000
  int device_id = -1;  // the ublk device, once created
  bool allow_volatile_region = false;
  bool allow_volatile_writeback = false;
  uint64_t segment_size = 0;  // when formatting; 0: chosen from the region's size
  std::string copy_policy = "auto";
  cache::Tunables tunables;  // the state file's "settings": {name: text}
};

nlohmann::json to_json(const CacheConfig& config);
nlohmann::json settings_json(const cache::Tunables& tunables);
// Tunables come from "settings" (an object of name: text), or, as an add request gives them and
// older state files kept gc_threshold and read_miss_fill, from top-level keys of the same names.
Result<CacheConfig> config_from_json(const nlohmann::json& doc);

// The state file: {"version": 1, "caches": [...]}, replaced atomically (write, fsync, rename).
Result<std::vector<CacheConfig>> load_state(const std::string& path);
// The state file's text, as load_state reads it; `path` only names it in messages.
Result<std::vector<CacheConfig>> parse_state(std::string_view text, const std::string& path);
Status save_state(const std::string& path, const std::vector<CacheConfig>& caches);

// Cache names: 1-64 of [A-Za-z0-9_.-], not starting with '.' or '-'.
Status check_cache_name(const std::string& name);

}  // namespace pcached::daemon

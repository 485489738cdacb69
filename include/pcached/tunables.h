// The cache's policies that an operator sets at add time and changes at run time
// (`pcached set <cache> <key> <value>`): one table of names, parsers and printers, so the CLI,
// the daemon's state file, status and the engine all agree on what a setting is called and means.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pcached/status.h"

namespace pcached::cache {

enum class CacheMode : uint8_t {
  Writeback,     // writes land on pmem and are acknowledged there; written back later
  Writethrough,  // writes go to the backing device and pmem; acknowledged after both
  Writearound,   // writes go to the backing device and invalidate the cache; reads are cached
};

std::string_view to_string(CacheMode mode);
Result<CacheMode> parse_cache_mode(std::string_view text);

enum class GcPolicy : uint8_t {
  CostBenefit,  // least live data and longest unused first
  Fifo,         // oldest sealed first (dm-pcache's order)
};

std::string_view to_string(GcPolicy policy);

struct Tunables {
  CacheMode mode = CacheMode::Writeback;
  // GC reclaims clean segments while more than this share of segments is in use (0-90).
  unsigned gc_threshold = 90;
  // Which clean segments GC reclaims first.
  GcPolicy gc_policy = GcPolicy::CostBenefit;
  // Read misses are copied into the cache ...
  bool read_miss_fill = true;
  // ... once the same 4 KiB block has missed this many times (1: at the first miss).
  unsigned promote_after = 1;
  // A sequential stream longer than this bypasses the cache (writes go around it, reads are
  // not filled) unless its data is already cached. 0 turns detection off.
  uint64_t sequential_cutoff = 4ull << 20;
  // Checksum cached data when it is written or filled, and verify it on every read hit.
  bool data_crc = false;
  // Writeback runs eagerly (no rate limit) from the moment dirty data reaches writeback_high
  // percent of the capacity until it falls to writeback_low percent, and whenever the device is
  // idle, a flush waits or the cache is full; when GC needs room, as far as the segments it
  // reclaims need; otherwise at most writeback_rate bytes per second (0: no limit). The default
  // trickle lets the cache absorb writes below the high watermark, as dm-writecache, bcache and
  // Open CAS do: data overwritten while dirty never reaches the device.
  unsigned writeback_low = 10;
  unsigned writeback_high = 40;
  uint64_t writeback_rate = 1ull << 20;
  // Foreground I/O must have been quiet this long for idle writeback (0: never idle).
  unsigned writeback_idle_ms = 1000;

  bool operator==(const Tunables&) const = default;
};

// The names apply_setting accepts, in the order settings() lists them.
const std::vector<std::string_view>& tunable_names();

// Sets one tunable from its text form; refuses an unknown key or a bad value with a message
// naming both and what is allowed. The result is checked as a whole (low <= high).
Status apply_setting(Tunables& tunables, std::string_view key, std::string_view value);

// Checks every value's range and the watermarks' order (for tunables built in code).
Status validate(const Tunables& tunables);

// Every tunable as (name, text) in the form apply_setting reads back.
std::vector<std::pair<std::string, std::string>> settings(const Tunables& tunables);

}  // namespace pcached::cache

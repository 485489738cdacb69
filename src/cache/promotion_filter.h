// "Promote after N misses": a read miss is copied into the cache only once its 4 KiB block has
// missed N times, so data read once (a scan that slipped under the sequential cutoff) does not
// displace data read again and again. Counts live in a fixed table of small counters indexed by
// a hash of the block (collisions only make promotion a little eager); no locks, no allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pcached::cache {

class PromotionFilter {
 public:
  // Counts a miss of the block holding `sector`; true when it should be promoted now.
  bool record_miss(uint64_t sector, unsigned promote_after);

 private:
  static constexpr unsigned kBits = 16;
  std::array<std::atomic<uint8_t>, size_t{1} << kBits> counts_{};
};

}  // namespace pcached::cache

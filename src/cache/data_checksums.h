// Checksums of cached data (the data_crc tunable, like dm-pcache's data_crc): one CRC32C per run
// of data as it was written into a segment, kept in DRAM by location and in the journal as a
// checksum key after each data key, so that replay brings them back. A read hit verifies the run
// it reads from; a mismatch is an error and a counted event, never silently wrong data.
#pragma once

#include <absl/container/btree_map.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>

#include "pcached/pmem_region.h"

namespace pcached::cache {

class DataChecksums {
 public:
  DataChecksums(uint64_t data_start, uint64_t segment_size);

  void add(uint64_t location, uint32_t sectors, uint32_t crc);
  // Forgets every run in [begin, end): GC reclaimed that range.
  void forget(uint64_t begin, uint64_t end);

  enum class Verdict { Unchecked, Good, Bad };
  // Checks the run holding [location, location+bytes): `copied` holds those bytes as just read;
  // when the run is longer, the rest is read from the region to complete its checksum.
  Verdict verify(const pmem::Region& region, uint64_t location, const std::byte* copied, uint64_t bytes) const;

  uint64_t runs() const;

 private:
  struct Run {
    uint32_t sectors;
    uint32_t crc;
  };
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mutex;
    absl::btree_map<uint64_t, Run> runs;  // by location
  };
  Shard& shard_for(uint64_t location) { return shards_[((location - data_start_) >> shift_) % kShards]; }
  const Shard& shard_for(uint64_t location) const { return shards_[((location - data_start_) >> shift_) % kShards]; }

  uint64_t data_start_;
  unsigned shift_;
  std::array<Shard, kShards> shards_;
};

}  // namespace pcached::cache

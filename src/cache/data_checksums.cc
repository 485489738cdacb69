#include "cache/data_checksums.h"

#include <bit>
#include <cstring>
#include <vector>

#include "format/crc32c.h"
#include "format/layout.h"

namespace pcached::cache {

DataChecksums::DataChecksums(uint64_t data_start, uint64_t segment_size)
    : data_start_(data_start), shift_(static_cast<unsigned>(std::countr_zero(segment_size))) {}

void DataChecksums::add(uint64_t location, uint32_t sectors, uint32_t crc) {
  Shard& shard = shard_for(location);
  std::lock_guard lock(shard.mutex);
  shard.runs.insert_or_assign(location, Run{sectors, crc});
}

void DataChecksums::forget(uint64_t begin, uint64_t end) {
  // A reclaimed range is one segment: one shard.
  Shard& shard = shard_for(begin);
  std::lock_guard lock(shard.mutex);
  shard.runs.erase(shard.runs.lower_bound(begin), shard.runs.lower_bound(end));
}

DataChecksums::Verdict DataChecksums::verify(const pmem::Region& region, uint64_t location, const std::byte* copied,
                                             uint64_t bytes) const {
  const Shard& shard = shard_for(location);
  uint64_t start = 0;
  Run run{};
  {
    std::lock_guard lock(shard.mutex);
    auto it = shard.runs.upper_bound(location);
    if (it == shard.runs.begin()) return Verdict::Unchecked;
    --it;
    start = it->first;
    run = it->second;
  }
  const uint64_t run_bytes = uint64_t{run.sectors} * format::kSectorSize;
  if (location + bytes > start + run_bytes) return Verdict::Unchecked;  // not inside one run
  uint32_t crc = 0;
  if (start == location && run_bytes == bytes) {
    crc = format::crc32c(0, copied, bytes);
  } else {
    // A piece of a longer run (a later write replaced the rest): the whole run is still in the
    // segment until GC reclaims it.
    std::vector<std::byte> whole(run_bytes);
    if (!region.read(start, whole.data(), run_bytes).ok()) return Verdict::Bad;
    if (std::memcmp(whole.data() + (location - start), copied, bytes) != 0) return Verdict::Bad;
    crc = format::crc32c(0, whole.data(), run_bytes);
  }
  return crc == run.crc ? Verdict::Good : Verdict::Bad;
}

uint64_t DataChecksums::runs() const {
  uint64_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard lock(shard.mutex);
    total += shard.runs.size();
  }
  return total;
}

}  // namespace pcached::cache

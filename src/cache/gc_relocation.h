// Where GC moves the clean data still live in the segments it reclaims, rather than dropping it
// from the cache: a data segment of the writeback worker's own. Without it a working set that fits
// in the cache still loses a share of itself to every GC run, and its reads go to the backing
// device (in the test VM, after 4 KiB random writes over 128 MiB in a 352 MiB cache, ~5,000 reads
// of it missed; with the move, 1,000-3,000).
//
// The moved data is clean (GC reclaims clean segments only) and, like a read-miss fill, gets no
// key: the journal never names the new place, so after a crash the cache simply no longer holds
// it, and the backing device does. Only the index points there.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "cache/extent_index.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class Engine;

class GcRelocation {
 public:
  GcRelocation(Engine& engine, pmem::PmemWriter& writer);

  // Whether a reclaimed segment holding `live_sectors` of live data is worth moving: moving it
  // must free most of a segment, or a cache full of live data would copy it around for nothing
  // and the data that should leave (eviction) never would.
  bool worth_moving(uint64_t live_sectors) const;

  // Copies the data of `extent` (clean, in a segment being reclaimed; the caller holds its
  // index shard's lock exclusively) to the worker's segment and returns the new location; nullopt
  // when it is to be evicted instead: no segment to spare, a media error, a checksum mismatch.
  std::optional<uint64_t> move(const Extent& extent, bool data_crc);

  // Seals the partly filled segment when writers are short of segments (or waiting), it is over
  // half full and most of what was moved into it has since been overwritten: it becomes GC's to
  // reclaim like any other, its unused tail with it. (A segment still mostly live stays open: data
  // moved into it keeps the working set cached when the cache is busiest. So does one with room
  // left, which is what the next moves need.)
  void seal_when_short();

  // Called once a GC run has released its victims. If a move of that run found no segment to go
  // to (writers were short of segments, as they are whenever they outrun writeback), takes one of
  // those just released, so that the next run moves rather than evicts. Without it, a writer that
  // keeps waiting for room would have every GC run evict.
  void open_if_starved();

  // Bytes moved so far (any thread).
  uint64_t moved_bytes() const { return moved_bytes_.load(std::memory_order_relaxed); }

 private:
  // Room for `sectors` in the open segment, opening a new one (sealing the full one) if needed,
  // as long as writers are not short of segments.
  std::optional<uint64_t> place(uint32_t sectors);

  // Opens a new segment for moves, sealing the one open before (its unused tail goes with it);
  // nullopt if none is free.
  std::optional<uint32_t> open_segment();

  Engine& engine_;
  pmem::PmemWriter& writer_;
  std::unique_ptr<std::byte[]> bounce_;  // one extent at most (a stripe)
  uint32_t open_segment_ = UINT32_MAX;
  uint64_t open_offset_ = 0;  // bytes from the segment start
  bool starved_ = false;      // a move found no room since the last open_if_starved()
  std::atomic<uint64_t> moved_bytes_{0};
};

}  // namespace pcached::cache

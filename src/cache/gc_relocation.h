// Where GC moves the data still live in the segments it reclaims, rather than dropping it from the
// cache: a data segment of the writeback worker's own. Without it a working set that fits in the
// cache still loses a share of itself to every GC run, and its reads go to the backing device (in
// the test VM, after 4 KiB random writes over 128 MiB in a 352 MiB cache, ~5,000 reads of it
// missed; with the move, 1,000-3,000).
//
// Clean data, like a read-miss fill, moves without a key: the journal never names the new place,
// so after a crash the cache simply no longer holds it, and the backing device does.
//
// Dirty data moves too, so that GC need not wait for writeback to reach the oldest segments (the
// clean horizon follows the journal's order, not the segments' live share): under a Relocated key
// of GC's own journal that carries the number of the key it moves, durable before its segment is
// released; a Retired key then tells replay to skip the keys still naming that segment. Dirty data
// that cannot move (no room, unreadable) stays, and so does its segment. The keys it moved from
// still drive writeback, which reads the data wherever the index says it is.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "cache/extent_index.h"
#include "cache/journal.h"
#include "format/key_set.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class Engine;

class GcRelocation {
 public:
  GcRelocation(Engine& engine, pmem::PmemWriter& writer);
  ~GcRelocation();

  // Whether a reclaimed segment holding `live_sectors` of live data is worth moving: moving it
  // must free most of a segment, or a cache full of live data would copy it around for nothing
  // and the data that should leave (eviction) never would.
  bool worth_moving(uint64_t live_sectors) const;

  // The most live sectors of dirty victims one GC run may take: what their keys need, at worst,
  // fits in one journal segment.
  uint64_t dirty_sectors_per_run() const;
  // Makes room in GC's journal (starting it if need be, without waiting for a segment) for the
  // keys that moving `live_sectors` of dirty data in `segments` victims takes at worst; false if
  // there is none, and then no dirty victim may be taken.
  bool reserve_journal(uint64_t live_sectors, size_t segments);

  // Copies the data of the extent at `sector` (in a segment being reclaimed; the caller holds its
  // index shard's lock exclusively) to the worker's segment. Clean data that cannot go (no segment
  // to spare, a media error, a checksum mismatch) is evicted; dirty data stays (Keep), and its
  // move is recorded for commit().
  ExtentIndex::Relocation move(uint64_t sector, const Extent& extent, bool data_crc);

  // Records that `segment` (of `generation`, newest key `max_dirty_seq`) is released with keys
  // above the clean horizon naming it, all of its live data moved.
  void retire(uint32_t segment, uint32_t generation, uint64_t max_dirty_seq);
  // Makes the recorded moves and retirements durable in GC's journal: before the victims are
  // released (invariant 5). reserve_journal() made room for them, but a memory failure reported
  // since, where the journal goes on, takes that room: GC then moves to another journal. False if
  // it cannot start one (no slot or segment free): the records stay, for the next call, and the
  // run's victims may not be released until one succeeds. Records writeback has passed since (the
  // clean horizon) are dropped: once all are, there is nothing to commit.
  bool commit();
  // Whether records wait for commit().
  bool uncommitted() const { return !pending_.empty(); }

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

  // Bytes moved so far, clean and dirty (any thread).
  uint64_t moved_bytes() const { return moved_bytes_.load(std::memory_order_relaxed); }
  uint64_t moved_dirty_bytes() const { return moved_dirty_bytes_.load(std::memory_order_relaxed); }
  // Runs whose commit() had to wait (any thread).
  uint64_t commit_waits() const { return commit_waits_count_.load(std::memory_order_relaxed); }

 private:
  // Room for `sectors` in the open segment, opening a new one (sealing the full one) if needed,
  // as long as writers are not short of segments.
  std::optional<uint64_t> place(uint32_t sectors);

  // Opens a new segment for moves, sealing the one open before (its unused tail goes with it);
  // nullopt if none is free.
  std::optional<uint32_t> open_segment();
  void seal_open_segment();
  // GC's journal is done with: marked inactive, for writeback and reclaim to finish.
  void leave_journal();
  // Starts GC's journal in a free slot, named in the control area; false if no slot or segment is
  // free now (it does not wait: GC is what frees them).
  bool start_journal();
  // Room for `bytes` of key sets in GC's journal, leaving it for another where it cannot go on.
  bool journal_room(size_t bytes);

  Engine& engine_;
  pmem::PmemWriter& writer_;
  uint32_t open_segment_ = UINT32_MAX;
  uint64_t open_offset_ = 0;     // bytes from the segment start
  uint64_t open_max_dirty_ = 0;  // newest key whose data moved into the open segment
  bool starved_ = false;         // a move found no room since the last open_if_starved()

  // GC's journal, started at the first dirty move.
  std::unique_ptr<JournalWriter> journal_;
  uint32_t journal_slot_ = UINT32_MAX;
  // Moves and retirements not yet committed: each a key, and for a move with data_crc the
  // checksum key that follows it.
  struct Record {
    format::Key key;
    std::optional<format::Key> checksum;
  };
  std::vector<Record> pending_;
  bool commit_waits_ = false;  // the last commit() could not be made (logged once)

  std::atomic<uint64_t> moved_bytes_{0};
  std::atomic<uint64_t> moved_dirty_bytes_{0};
  std::atomic<uint64_t> commit_waits_count_{0};
};

}  // namespace pcached::cache

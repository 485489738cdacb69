// The cache engine's shared state: what the queues (queue.cc), the writeback worker
// (writeback.cc) and recovery (recovery.cc) work on. Internal to src/cache.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <span>
#include <vector>

#include "backing/backing_device.h"
#include "cache/clean_checkpoint.h"
#include "cache/control_store.h"
#include "cache/data_checksums.h"
#include "cache/live_sectors.h"
#include "cache/extent_index.h"
#include "cache/journal.h"
#include "cache/promotion_filter.h"
#include "cache/sector_ranges.h"
#include "cache/segment_activity.h"
#include "cache/segment_contents.h"
#include "cache/segment_table.h"
#include "cache/tunables_store.h"
#include "pcached/persistence_domain.h"
#include "format/segment_header.h"
#include "format/superblock.h"
#include "pcached/cache.h"
#include "pcached/copy_policy.h"
#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

class Writeback;

// Counters of one queue: written only by its thread (relaxed stores, no contention), read by
// stats().
struct LatencyHistogram {
  std::array<std::atomic<uint64_t>, kLatencyBuckets + 1> counts{};
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> sum_ns{0};
  void record(std::chrono::nanoseconds elapsed);
  // The bucket a span falls in (kLatencyBuckets: slower than the last bound).
  static size_t bucket_of(std::chrono::nanoseconds elapsed);
  void add_to(LatencySnapshot& snapshot) const;
};

struct QueueCounters {
  std::atomic<uint64_t> reads{0}, read_hits{0}, read_partial_hits{0}, read_misses{0}, read_bytes{0};
  std::atomic<uint64_t> writes{0}, write_bytes{0}, discards{0}, write_zeroes{0}, flushes{0};
  std::atomic<uint64_t> fills{0}, fill_bytes{0}, backing_read_errors{0}, media_errors{0};
  std::atomic<uint64_t> promotions_deferred{0}, bypassed_reads{0}, bypassed_writes{0}, bypassed_bytes{0};
  std::atomic<uint64_t> direct_writes{0}, direct_write_errors{0}, backing_flushes{0}, data_crc_errors{0};
  std::array<LatencyHistogram, kOpCount> latency;
  const pmem::CopyCounters* copies = nullptr;  // the queue's writer

  static void bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  void add_to(CacheStats& stats) const;
};

class Engine final : public Cache {
 public:
  static Result<std::unique_ptr<Engine>> open(const CacheOptions& options);
  ~Engine() override;

  Result<std::unique_ptr<CacheQueue>> create_queue(io::Ring& ring) override;
  Status flush_all(const FlushProgress& progress = {}) override;
  Status detach(bool force, const FlushProgress& progress = {}) override;
  void abandon() override;
  void interrupt_waits() override;
  CacheStats stats() const override;
  uint64_t device_sectors() const override { return backing_->size() >> format::kSectorShift; }
  uint32_t logical_block_size() const override { return backing_->logical_block_size(); }
  std::string copy_policy_description() const override;
  backing::FaultInjection& backing_faults() override { return backing_->faults(); }
  Status set(const std::string& key, const std::string& value) override;
  Tunables tunables() const override { return tunables_.get(); }

  // The lowest sequence number any key not yet written back has, or can still get: everything
  // below it is clean once the backing device has been flushed.
  uint64_t compute_horizon();
  // The first key at or after position that `slot`'s writeback has not passed (0: none). Where
  // the journal cannot be read up to the limit, the clean horizon as it is: nothing may pass keys
  // unseen.
  uint64_t first_pending_seq(uint32_t slot, const JournalPosition& from, const JournalPosition& limit) const;

  // A journal slot no journal uses, marked in use; EBUSY when all are.
  Result<uint32_t> claim_journal_slot();
  // Names the started journal of `slot` in the control area (durable when it returns): before
  // its first key set is written (ordering rule 4).
  void name_journal(pmem::PmemWriter& writer, uint32_t slot);

  // Requests the queues have received so far (writeback's idleness test).
  uint64_t foreground_requests() const;
  void register_queue(QueueCounters* counters);
  void unregister_queue(QueueCounters* counters);
  // Whether [offset, offset+bytes) of the segment holds a known bad block (reported at open or
  // since, or a read that faulted); by default, anywhere in it.
  bool segment_has_bad_block(uint32_t segment, uint64_t offset = 0, uint64_t bytes = UINT64_MAX) const {
    return region_->overlaps_bad_range(superblock_.segment_offset(segment) + offset,
                                       std::min(bytes, superblock_.segment_size - offset));
  }
  // Gives an emptied segment back to the allocator, or retires it if it has a bad block.
  // (Its contents list goes first: the segment's next user notes its own.)
  void release_segment(uint32_t segment) {
    contents_.forget(segment);
    live_.untrace(segment);
    segments_->release(segment, segment_has_bad_block(segment));
    if (options_.segment_released) options_.segment_released(segment);
  }
  pmem::PmemWriter make_writer() const { return pmem::PmemWriter(*region_, *policy_, options_.persist_observer); }

  const CacheOptions options_;
  std::unique_ptr<pmem::Region> region_;
  std::unique_ptr<backing::BackingDevice> backing_;
  std::unique_ptr<pmem::CopyPolicy> policy_;
  format::Superblock superblock_;
  std::unique_ptr<ControlStore> control_;
  std::unique_ptr<SegmentTable> segments_;
  SegmentActivity activity_;  // live data and heat per segment, for GC's choice
  LiveSectors live_;          // which sectors hold live data, for writeback's and GC's scans
  SegmentContents contents_;  // which sectors each segment holds data for, for GC's index lookups
  DataChecksums checksums_;   // data_crc
  ExtentIndex index_;
  // Discards journaled but not yet passed down by writeback, tagged with their sequence numbers:
  // a write sent straight to the device under one could be erased when the discard follows.
  // Each has its tombstone in the index until then.
  SectorRanges pending_discards_;
  std::array<JournalState, format::kMaxJournals> journals_;
  // See CacheOptions::commit_shared_fence_classes; measured again when the copy policy changes.
  std::atomic<uint32_t> shared_fence_classes_{0};
  std::atomic<uint64_t> next_seq_{1};
  std::atomic<uint64_t> clean_horizon_{1};  // as persisted in the control area
  // The first sequence number of this attach: written-through keys below it come from before a
  // restart, and are written back like any other (the device may have lost them).
  uint64_t run_first_seq_ = 1;
  TunablesStore tunables_;
  pmem::PersistenceDomain domain_ = pmem::PersistenceDomain::Unknown;
  bool allow_volatile_writeback_ = false;  // the option, or the superblock's record of it
  PromotionFilter promotion_;
  // Data reached the backing device in the foreground since the last flush forwarded to it.
  std::atomic<bool> backing_unflushed_{false};
  std::unique_ptr<Writeback> writeback_;
  double recovery_seconds_ = 0;
  uint64_t recovered_keys_ = 0;
  uint64_t restored_clean_bytes_ = 0;  // from the clean checkpoint, at this attach

 private:
  Engine(const CacheOptions& options, std::unique_ptr<pmem::Region> region,
         std::unique_ptr<backing::BackingDevice> backing, std::unique_ptr<pmem::CopyPolicy> policy,
         const format::Superblock& superblock);
  // What the region holds, decided by reading only: the superblock to attach (and a copy of it to
  // rewrite, if one is damaged or stale), or no superblock when it is to be formatted.
  struct RegionVerdict {
    std::optional<format::Superblock> superblock;
    int repair_copy = -1;
  };
  static Result<RegionVerdict> examine_region(const CacheOptions& options, const pmem::Region& region,
                                              const backing::BackingDevice& backing);
  // clean: the clean checkpoint read at open, if there was a usable one.
  Status recover(const std::optional<CleanCheckpoint>& clean);
  // Puts the checkpoint's clean data back in the index, wherever its segment still holds it
  // (holds_data_of: a whole data segment of the generation the extent names; and no bad block),
  // and notes the segments it is in.
  void restore_clean_data(const CleanCheckpoint& clean,
                          const std::function<bool(uint32_t segment, uint32_t generation)>& holds_data_of,
                          std::map<uint32_t, uint64_t>& data_segments);
  // The clean data the index holds, as the checkpoint names it: data written back (keys below
  // `horizon`, durably on the backing device) and copies read in (fills). At most kMaxCheckpointExtents: those in the hottest
  // segments first when there are more.
  std::vector<format::CheckpointExtent> clean_extents(uint64_t horizon) const;
  // Detaching, with no queue and nothing in the background left: writes the clean checkpoint,
  // then applies `change` to the control area, the update it belongs to. `horizon`: the clean
  // horizon as that update leaves it.
  void checkpoint_and_update(uint64_t horizon, const std::function<void(format::ControlArea&)>& change);
  // Makes the sectors the control area lists as lost fail their reads again (after replay: only
  // where no newer key wrote them).
  void restore_lost_ranges(std::span<const format::LostRange> lost);
  void stop_background();

  std::mutex settings_mutex_;  // one set() at a time
  mutable std::mutex queues_mutex_;
  std::vector<QueueCounters*> queues_;
  CacheStats retired_;  // counters of queues that are gone
  bool closed_ = false;
};

}  // namespace pcached::cache

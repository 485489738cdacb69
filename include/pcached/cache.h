// The cache engine: a pmem region and a backing device make a cached block device. It runs
// without ublk: a frontend (the ublk server, or the in-process frontend of tests and benchmarks)
// creates one CacheQueue per queue thread and submits requests on it.
//
// Guarantees (docs/design.md, invariants 1-8): a write is acknowledged only when its data and key
// are persistent on pmem; after any crash recovery rebuilds every acknowledged write; reads never
// return data older than the latest acknowledged write; data is clean only once it is on the
// backing device and the backing device was flushed.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pcached/copy_policy.h"
#include "pcached/status.h"
#include "pcached/tunables.h"
#include "pcached/units.h"

namespace pcached::io {
class Ring;
}

namespace pcached::pmem {
class PersistObserver;
}

namespace pcached::backing {
struct FaultInjection;
}

namespace pcached::cache {

struct CacheOptions {
  std::string region_path;
  std::string backing_path;
  // Format a blank region, or one holding something other than pcached. A region that holds a
  // pcached cache is formatted only with force as well.
  bool format = false;
  // Attach although the superblock records another backing device (same size), or format over an
  // existing cache.
  bool force = false;
  bool allow_volatile_region = false;  // a page-granularity (non-DAX) region, for tests and demos
  // Writeback although the region's persistence domain may not survive power loss (recorded in
  // the superblock: later attaches keep it).
  bool allow_volatile_writeback = false;
  uint64_t segment_size = 0;           // used when formatting; 0: chosen from the region's size
  Tunables tunables;                   // mode, GC, promotion, sequential cutoff, writeback
  pmem::CopyPolicySettings copy_policy;  // scratch area is filled in by the engine
  // Tests: observe every pmem store, flush and fence (the persistence simulator).
  pmem::PersistObserver* persist_observer = nullptr;
  // Bit i set: commits whose data is in pmem size class i share one fence with their key set
  // (which then carries a digest of the data); the others fence the data first. Unset: measured
  // on the region at open (src/cache/commit_protocol.h). Tests set it to take one protocol.
  std::optional<uint32_t> commit_shared_fence_classes;
  // Tests: called on the engine's thread that gives a segment back to the allocator, right after
  // it did (from then on, the segment's next user may overwrite it at any moment).
  std::function<void(uint32_t segment)> segment_released;
  // Tests: called on the writeback thread when a GC run has moved dirty data or retired segments,
  // right before it makes that durable in its journal.
  std::function<void()> gc_moved;
  // Tests: offsets of the region to treat as bad blocks reported at open (offset, length).
  std::vector<std::pair<uint64_t, uint64_t>> injected_bad_ranges;
  std::chrono::milliseconds writeback_interval{5};
  // Tests: the writeback rate limit's bucket never refills, so that with a rate set only what a
  // flush, the watermarks, GC or a full cache ask for is written back. (A rate of 1 byte/s alone
  // still lets one key set through a second after open: on a slow run, before the test looked.)
  bool freeze_writeback_rate = false;
};

enum class Op { Read, Write, Flush, Discard, WriteZeroes };

struct Request {
  Op op = Op::Read;
  uint64_t sector = 0;   // 512-byte units
  uint32_t sectors = 0;  // 0 for Flush
  std::byte* buffer = nullptr;  // Read: filled; Write: read; aligned to the logical block size
  bool fua = false;
};

class RequestCompletion {
 public:
  // result: bytes transferred (Read/Write), 0 (others), or a negative errno.
  virtual void complete(int result) = 0;

 protected:
  ~RequestCompletion() = default;
};

// Request latency by operation, exponential buckets from 1 µs to about 1 s (upper bounds
// kLatencyBucketBase * 2^i seconds), plus everything slower.
inline constexpr size_t kLatencyBuckets = 21;
inline constexpr double kLatencyBucketBase = 1e-6;
inline constexpr size_t kOpCount = 5;  // indexed by Op

struct LatencySnapshot {
  std::array<uint64_t, kLatencyBuckets + 1> counts{};  // per bucket, not cumulative; last: slower
  uint64_t count = 0;
  double sum_seconds = 0;
};

struct CacheStats {
  Tunables tunables;                     // the settings in force (mode, GC, writeback, ...)
  std::string persistence_domain;        // of the region: cpu_cache, memory_controller, none, unknown, volatile/test
  bool volatile_writeback = false;       // writeback allowed on a domain that may lose it (the override)
  uint64_t capacity_bytes = 0;  // the data area of the region
  uint64_t segment_bytes = 0;
  uint64_t device_bytes = 0;    // the backing device: the size of the cached block device
  uint32_t logical_block_size = 512;
  uint64_t cached_bytes = 0;
  uint64_t dirty_bytes = 0;
  uint64_t extents = 0;
  uint64_t index_bytes = 0;  // DRAM held by the extent index
  // DRAM held by the live-sector map: a bit per 512-byte sector of the region's data area, fixed
  // at attach (1/4096 of the data area).
  uint64_t live_map_bytes = 0;
  // bad: retired for a media error (never allocated again).
  uint32_t segments_total = 0, segments_free = 0, segments_data = 0, segments_journal = 0, segments_bad = 0;
  // Known bad blocks of the region: reported by the platform at open, or found by a read since.
  uint64_t bad_ranges = 0, bad_bytes = 0;
  // Dirty bytes writeback could not write back: their only copy hit a media error (this run).
  uint64_t writeback_lost_bytes = 0;
  // What of such data is still lost, from this run or earlier ones (the control area's list):
  // reads of it fail with EIO until it is written again.
  uint64_t lost_ranges = 0, lost_bytes = 0;
  uint64_t clean_horizon = 0, next_seq = 0;

  uint64_t reads = 0, read_hits = 0, read_partial_hits = 0, read_misses = 0, read_bytes = 0;
  uint64_t writes = 0, write_bytes = 0, discards = 0, write_zeroes = 0, flushes = 0;
  uint64_t fills = 0, fill_bytes = 0;
  uint64_t promotions_deferred = 0;  // misses not filled yet (promote_after)
  // Requests of a sequential stream past the cutoff that bypassed the cache, and their bytes.
  uint64_t bypassed_reads = 0, bypassed_writes = 0, bypassed_bytes = 0;
  // Writes that went to the backing device in the foreground (writethrough, writearound and
  // bypass), their failures, and flushes forwarded to the device because of them.
  uint64_t direct_writes = 0, direct_write_errors = 0, backing_flushes = 0;
  uint64_t writeback_bytes = 0, writeback_batches = 0, writeback_errors = 0;
  // Keys writeback passed without an index lookup: their sectors' bits showed all of their data
  // replaced, trimmed or discarded since.
  uint64_t writeback_dead_keys_skipped = 0;
  uint64_t backing_read_errors = 0, media_errors = 0;
  uint64_t data_crc_errors = 0;  // read hits whose data did not match its checksum (data_crc)
  uint64_t gc_runs = 0, segments_reclaimed = 0, writer_waits = 0;
  // Live data in the segments GC reclaimed: moved elsewhere in the cache, or (clean) evicted.
  uint64_t gc_moved_bytes = 0, gc_evicted_bytes = 0;
  uint64_t gc_moved_dirty_bytes = 0;  // of gc_moved_bytes: dirty data, moved under a journaled key
  // GC runs that could not make their moves durable at once (a memory failure took their journal
  // room, and no journal could be started): their victims waited, and GC with them.
  uint64_t gc_commit_waits = 0;
  // GC runs that found live data its per-segment contents lists missed, and searched the whole
  // index for it (a bug if ever non-zero; the data is safe either way).
  uint64_t gc_index_searches = 0;
  double recovery_seconds = 0;
  uint64_t recovered_keys = 0;
  // Clean data the last detach's checkpoint put back in the cache at this attach.
  uint64_t restored_clean_bytes = 0;
  bool writeback_stalled = false;  // the last writeback attempt failed; retrying with backoff
  bool writeback_eager = false;    // dirty data passed writeback_high and has not fallen to writeback_low

  std::array<LatencySnapshot, kOpCount> latency{};
  // Copies into pmem by method (pmem::CopyMethod) and size class (pmem::size_class_bytes).
  std::array<std::array<uint64_t, pmem::kSizeClassCount>, pmem::kCopyMethodCount> copies{};
  std::array<std::array<uint64_t, pmem::kSizeClassCount>, pmem::kCopyMethodCount> copy_bytes{};
};

class Cache;

// The engine's side of one queue: owned by, and used only from, one queue thread. Backing-device
// I/O is submitted on the thread's ring; the thread's loop dispatches its completions.
class CacheQueue {
 public:
  virtual ~CacheQueue() = default;
  virtual void submit(const Request& request, RequestCompletion* completion) = 0;
  virtual unsigned index() const = 0;
  // Between these, writes are gathered: their data is copied as they come, then end_batch()
  // makes all of it durable with one key set for them all (one fence for both, or the data's
  // first: src/cache/commit_protocol.h) and completes them. A frontend brackets each batch of requests the kernel handed it at once.
  virtual void begin_batch() = 0;
  virtual void end_batch() = 0;
};

// What a frontend serves: a block device of this geometry, with one queue per frontend thread.
// The cache is one; a benchmark's null device (the frontend's own cost) is another.
class QueueTarget {
 public:
  virtual Result<std::unique_ptr<CacheQueue>> create_queue(io::Ring& ring) = 0;
  virtual uint64_t device_sectors() const = 0;
  virtual uint32_t logical_block_size() const = 0;

 protected:
  ~QueueTarget() = default;
};

class Cache : public QueueTarget {
 public:
  static Result<std::unique_ptr<Cache>> open(const CacheOptions& options);
  virtual ~Cache() = default;

  // Writes back every dirty sector and waits until the backing device holds it all (no queue may
  // submit meanwhile).
  // progress, when given, is called about four times a second with the dirty bytes left.
  using FlushProgress = std::function<void(uint64_t dirty_bytes)>;
  virtual Status flush_all(const FlushProgress& progress = {}) = 0;
  // Ends the cache's use of the region: with write-back, every dirty sector goes to the backing
  // device and the cache is marked clean; forced, dirty data stays on pmem for a later attach.
  // Queues must be destroyed first. Nothing may be called afterwards.
  virtual Status detach(bool force, const FlushProgress& progress = {}) = 0;
  // Stops background work without writing anything more (a crash, as far as the media can tell).
  virtual void abandon() = 0;
  // Makes every flush_all (and detach or mode switch writing back) that waits return at once with
  // ECANCELED, now and from then on (a call that began just before must not slip through);
  // background writeback itself goes on. For a daemon that is exiting and must not wait for a
  // write-back a client asked for.
  virtual void interrupt_waits() = 0;

  virtual CacheStats stats() const = 0;
  virtual std::string copy_policy_description() const = 0;
  // Runtime tuning: any tunable of pcached/tunables.h, or copy_policy (auto, nt, clflushopt, clwb,
  // threshold:<size>; auto recalibrates). Refused with the reason otherwise. Switching the mode
  // away from writeback returns once the data that was dirty has been written back.
  virtual Status set(const std::string& key, const std::string& value) = 0;
  virtual Tunables tunables() const = 0;
  // Makes the backing device fail on purpose: tests and fault drills.
  virtual backing::FaultInjection& backing_faults() = 0;
};

}  // namespace pcached::cache

// One queue of the engine: the write, read, discard and flush paths, run on the queue's thread.
#pragma once

#include <chrono>
#include <vector>

#include "cache/commit_protocol.h"
#include "cache/engine.h"
#include "cache/journal.h"
#include "cache/sequential_detector.h"
#include "cache/tunables_store.h"
#include "common/cycle_clock.h"
#include "io/ring.h"
#include "pcached/cache.h"
#include "pcached/pmem_writer.h"

namespace pcached::cache {

// When a request started and where its latency is recorded.
struct Timing {
  CycleClock::Ticks start;
  LatencyHistogram* histogram;
  void record() const { histogram->record(CycleClock::between(start, CycleClock::now())); }
};

// A request that completes later, when backing-device I/O is back. It owns itself: finish()
// records the latency, deletes the operation and completes the request, in that order (the
// completion may reuse whatever the request pointed at).
class PendingRequest {
 public:
  PendingRequest(RequestCompletion* completion, const Timing& timing) : completion_(completion), timing_(timing) {}
  virtual ~PendingRequest() = default;

 protected:
  void finish(int result) {
    timing_.record();
    RequestCompletion* completion = completion_;
    delete this;
    completion->complete(result);
  }

 private:
  RequestCompletion* completion_;
  Timing timing_;
};

class EngineQueue final : public CacheQueue {
 public:
  EngineQueue(Engine& engine, io::Ring& ring, uint32_t slot);
  ~EngineQueue() override;

  // Starts the queue's journal and records it in the control area.
  Status start();
  void submit(const Request& request, RequestCompletion* completion) override;
  unsigned index() const override { return slot_; }
  void begin_batch() override { batching_ = true; }
  void end_batch() override {
    commit_staged_writes();
    batching_ = false;
  }

 private:
  class ReadOperation;
  friend class ReadOperation;
  class DirectWrite;
  friend class DirectWrite;
  class ForwardedFlush;
  friend class ForwardedFlush;

  // Where a write goes: into the cache (acknowledged from pmem), through it (backing device, then
  // pmem as clean data), or around it (backing device; cached copies of the range dropped).
  // Bypass: around the cache because of the sequential cutoff (Around: because of the mode).
  enum class WriteRoute { Cache, Through, Around, Bypass };
  // A part of a read that must come from the backing device.
  struct GapRecord {
    uint64_t sector;
    uint32_t sectors;
    uint64_t change_count;  // the shard's, at lookup; UINT64_MAX: never fill
  };

  // A run of sectors placed in the queue's open data segment.
  struct Placement {
    uint32_t segment;
    uint32_t generation;
    uint32_t offset_sectors;
    uint32_t sectors;
  };

  int check_range(const Request& request) const;
  // True when the request continues a sequential stream longer than the cutoff (every read and
  // write passes here, so that streams are followed).
  bool past_sequential_cutoff(const Request& request, const Tunables& tunables);
  WriteRoute route_write(const Request& request, const Tunables& tunables);
  int write(const Request& request, format::KeyKind kind = format::KeyKind::Write);
  // Places a write's data in the open segment and adds its keys to keys_ (not numbered, and the
  // checksum keys without their CRC yet).
  int place_write(const Request& request, format::KeyKind kind);
  // Copies the data of keys_[first_key...] (placed by place_write) from the request, not drained,
  // and fills in their checksum keys.
  void copy_write(const Request& request, size_t first_key);
  // A write of a batch: placed and copied; its keys are numbered when the batch is committed.
  int stage_write(const Request& request);
  // Through or around: the backing device first (direct_write.cc).
  void write_direct(const Request& request, RequestCompletion* completion, const Timing& timing, WriteRoute route);
  // After the backing device has the data: the cache takes it (through) or forgets the range.
  int finish_direct_write(const Request& request, WriteRoute route);
  // Drops the clean cached data of a range (dirty data stays: it is newer than the device's).
  void forget_clean(const Request& request);
  void flush(RequestCompletion* completion, const Timing& timing);
  // Makes the staged writes durable and visible, then completes them.
  void commit_staged_writes();
  int write_zeroes(const Request& request);
  // sequential: the read is part of a stream past the cutoff (its misses are not filled).
  void read(const Request& request, RequestCompletion* completion, const Timing& timing, bool sequential);
  int discard(const Request& request);
  // Gives keys their sequence numbers, marking the journal as having a write in flight. -EIO
  // (nothing numbered) when the journal cannot go on and no other can be started now.
  int number(std::vector<format::Key>& keys);
  // Journals numbered keys (their data copied, not drained), makes data and keys durable, applies
  // them to the index and publishes them to writeback; empties keys.
  void commit(std::vector<format::Key>& keys);
  // A key for the whole request's range, without data (write-zeroes, discard); 0 or -EIO.
  int commit_range(const Request& request, format::KeyKind kind);

  // Room for up to `sectors` in the open data segment, opening a new one when it is full
  // (waiting for GC when `wait`). The new segment's header is written but not drained.
  bool place(uint32_t sectors, bool wait, Placement& placement);
  uint64_t location_of(const Placement& placement) const;
  uint64_t location_of(const format::Key& key) const;
  void fill(uint64_t sector, uint32_t sectors, const std::byte* data, uint64_t change_count);
  // Starts a journal in another slot for this queue when a memory failure was reported where its
  // own goes on (JournalWriter::can_continue): the old one is left to writeback, like the journal
  // of a queue that went away. Before numbering, so that the numbers' in-flight bound is the new
  // journal's. -EIO when no slot or segment is to be had now (the next write tries again).
  int replace_journal();

  Engine& engine_;
  io::Ring& ring_;
  uint32_t slot_;
  pmem::PmemWriter writer_;
  std::unique_ptr<JournalWriter> journal_;  // replaced when it cannot go on (replace_journal)
  QueueCounters counters_;
  TunablesView tunables_;
  SequentialDetector sequential_;
  std::vector<format::Key> keys_;  // staged, not yet journaled (empty outside a batch)
  // Bytes of data copied for keys_, and whether each key's data was hashed: commit() shares
  // one fence with the data only if it was and the total's size class is one that shares.
  uint64_t commit_data_bytes_ = 0;
  bool commit_hashed_ = true;
  SharedFenceClasses shared_fence_classes_ = 0;  // the engine's, as read when this commit began
  std::vector<GapRecord> gap_scratch_;
  struct StagedWrite {
    RequestCompletion* completion;
    Timing timing;
    int result;
  };
  bool batching_ = false;
  std::vector<StagedWrite> staged_;
  std::vector<StagedWrite> spare_staged_;  // (commit_staged_writes)
  bool started_ = false;
  uint32_t open_segment_ = UINT32_MAX;
  uint32_t open_generation_ = 0;
  uint64_t open_offset_ = 0;     // bytes from the segment start
  uint64_t open_max_dirty_ = 0;  // newest key with data in the open segment
  // Segments filled by the request in progress: sealed (made visible to GC) only once the
  // request's keys are in the index, or GC could reclaim data that no key protects yet.
  std::vector<std::pair<uint32_t, uint64_t>> filled_;
  void seal_filled();
};

}  // namespace pcached::cache

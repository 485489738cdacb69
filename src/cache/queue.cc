#include "cache/queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cstring>

#include "cache/writeback.h"
#include "format/crc32c.h"
#include "format/data_hash.h"
#include "format/layout.h"

namespace pcached::cache {

namespace {

using format::kSectorSize;

}  // namespace

// A read that needs the backing device: one backing read per gap, completed when all are back.
class EngineQueue::ReadOperation final : public PendingRequest {
 public:
  struct Gap final : io::CompletionHandler {
    ReadOperation* operation = nullptr;
    uint64_t sector = 0;
    uint32_t sectors = 0;
    uint64_t change_count = 0;
    void on_completion(int result) override { operation->gap_done(*this, result); }
  };

  ReadOperation(EngineQueue& queue, const Request& request, RequestCompletion* completion, const Timing& timing)
      : PendingRequest(completion, timing), queue_(queue), request_(request) {}

  std::vector<Gap>& gaps() { return gaps_; }

  void submit() {
    pending_ = gaps_.size();
    for (Gap& gap : gaps_) {
      gap.operation = this;
      queue_.engine_.backing_->read(queue_.ring_, destination(gap.sector), gap.sector * kSectorSize,
                                    gap.sectors * static_cast<uint32_t>(kSectorSize), &gap);
    }
  }

 private:
  std::byte* destination(uint64_t sector) const { return request_.buffer + (sector - request_.sector) * kSectorSize; }

  void gap_done(const Gap& gap, int result) {
    if (result != static_cast<int>(gap.sectors * kSectorSize)) failed_ = true;
    if (--pending_ > 0) return;
    if (failed_) {
      QueueCounters::bump(queue_.counters_.backing_read_errors);
      finish(-EIO);
      return;
    }
    for (const Gap& g : gaps_) queue_.fill(g.sector, g.sectors, destination(g.sector), g.change_count);
    finish(static_cast<int>(request_.sectors * kSectorSize));
  }

  EngineQueue& queue_;
  Request request_;
  std::vector<Gap> gaps_;
  size_t pending_ = 0;
  bool failed_ = false;
};

EngineQueue::EngineQueue(Engine& engine, io::Ring& ring, uint32_t slot)
    : engine_(engine),
      ring_(ring),
      slot_(slot),
      writer_(engine.make_writer()),
      journal_(std::make_unique<JournalWriter>(*engine.region_, engine.superblock_, *engine.segments_,
                                               engine.journals_[slot], slot)),
      tunables_(engine.tunables_) {}

Status EngineQueue::start() {
  if (Status status = journal_->start(writer_); !status.ok()) {
    std::lock_guard lock(engine_.journals_[slot_].mutex);
    engine_.journals_[slot_].in_use = false;
    return status;
  }
  // The journal must be findable before any key in it is acknowledged.
  engine_.name_journal(writer_, slot_);
  counters_.copies = &writer_.counters();
  engine_.register_queue(&counters_);
  started_ = true;
  return Status();
}

EngineQueue::~EngineQueue() {
  if (!started_) return;
  seal_filled();
  if (open_segment_ != UINT32_MAX) engine_.segments_->seal(open_segment_, open_max_dirty_);
  {
    std::lock_guard lock(engine_.journals_[slot_].mutex);
    engine_.journals_[slot_].active = false;
  }
  engine_.unregister_queue(&counters_);
  engine_.writeback_->kick();
}

int EngineQueue::check_range(const Request& request) const {
  const uint64_t block_sectors = engine_.logical_block_size() / kSectorSize;
  if (request.sectors == 0 || request.sector % block_sectors != 0 || request.sectors % block_sectors != 0) {
    return -EINVAL;
  }
  if (request.sector > engine_.device_sectors() || request.sectors > engine_.device_sectors() - request.sector) {
    return -EINVAL;
  }
  return 0;
}

void EngineQueue::submit(const Request& request, RequestCompletion* completion) {
  // Latency is the engine's share of the request: from here to its completion. Synchronous paths
  // record it here; the asynchronous ones (read misses, discards) when their I/O is back.
  const Timing timing{CycleClock::now(), &counters_.latency[static_cast<size_t>(request.op)]};
  auto finish = [&](int result) {
    timing.record();
    completion->complete(result);
  };
  if (request.op != Op::Flush) {
    if (int error = check_range(request); error != 0) {
      finish(error);
      return;
    }
  }
  const Tunables& tunables = tunables_.get();
  WriteRoute route = WriteRoute::Cache;
  if (request.op == Op::Write) {
    QueueCounters::bump(counters_.writes);
    QueueCounters::bump(counters_.write_bytes, uint64_t{request.sectors} * kSectorSize);
    route = route_write(request, tunables);
  }
  if (batching_ && request.op == Op::Write && route == WriteRoute::Cache) {
    const int error = stage_write(request);
    staged_.push_back({completion, timing, error != 0 ? error : static_cast<int>(request.sectors * kSectorSize)});
    return;
  }
  // Anything else sees the batch's writes done first, in the order the requests came.
  commit_staged_writes();
  switch (request.op) {
    case Op::Write:
      if (route != WriteRoute::Cache) {
        write_direct(request, completion, timing, route);
        return;
      }
      finish(write(request));
      return;
    case Op::WriteZeroes:
      finish(write_zeroes(request));
      return;
    case Op::Read:
      read(request, completion, timing, past_sequential_cutoff(request, tunables));
      return;
    case Op::Discard:
      finish(discard(request));
      return;
    case Op::Flush:
      flush(completion, timing);
      return;
  }
  finish(-EOPNOTSUPP);
}

bool EngineQueue::past_sequential_cutoff(const Request& request, const Tunables& tunables) {
  const uint64_t stream = sequential_.observe(request.op == Op::Write, request.sector, request.sectors);
  return tunables.sequential_cutoff != 0 && stream > tunables.sequential_cutoff;
}

EngineQueue::WriteRoute EngineQueue::route_write(const Request& request, const Tunables& tunables) {
  const bool sequential = past_sequential_cutoff(request, tunables);
  if (tunables.mode == CacheMode::Writeback && !sequential) return WriteRoute::Cache;
  const ExtentIndex::RangeState state = engine_.index_.probe(
      request.sector, request.sectors, engine_.clean_horizon_.load(std::memory_order_acquire));
  // A write over dirty data stays in the cache whatever the mode: written to the device now, it
  // could be overwritten there by the older dirty data that writeback is about to copy. The same
  // holds for data writeback has already collected, even if a discard or a newer write has
  // dropped it from the index since, and for a discard writeback has yet to pass down. And a
  // write over lost data: only a key newer than the loss makes its sectors readable after a
  // restart (the control area still lists them until writeback next moves the horizon).
  if (state.dirty || engine_.writeback_->in_flight(request.sector, request.sectors) ||
      engine_.pending_discards_.overlaps(request.sector, request.sectors)) {
    return WriteRoute::Cache;
  }
  if (sequential && !state.cached) {
    // A long stream of data the cache does not hold goes around it (hit-aware: data that is
    // cached keeps being served and updated in the cache).
    QueueCounters::bump(counters_.bypassed_writes);
    QueueCounters::bump(counters_.bypassed_bytes, uint64_t{request.sectors} * kSectorSize);
    return WriteRoute::Bypass;
  }
  switch (tunables.mode) {
    case CacheMode::Writeback:
      return WriteRoute::Cache;
    case CacheMode::Writethrough:
      return WriteRoute::Through;
    case CacheMode::Writearound:
      return WriteRoute::Around;
  }
  return WriteRoute::Cache;
}

void EngineQueue::forget_clean(const Request& request) {
  // Keys below the clean horizon are on the device; fills carry 0. Both go.
  const uint64_t horizon = engine_.clean_horizon_.load(std::memory_order_acquire);
  engine_.index_.remove(request.sector, request.sectors, horizon - 1);
}

int EngineQueue::finish_direct_write(const Request& request, WriteRoute route) {
  if (route == WriteRoute::Around || route == WriteRoute::Bypass) {
    forget_clean(request);
    return static_cast<int>(request.sectors * kSectorSize);
  }
  // Through: into the cache like any write, as data the device already holds. Writes of a batch
  // in progress are committed first, so segment sealing stays in order.
  commit_staged_writes();
  if (write(request, format::KeyKind::WrittenThrough) < 0) {
    // The device holds the data, the cache could not take it: what it held of the range goes.
    forget_clean(request);
  }
  return static_cast<int>(request.sectors * kSectorSize);
}

uint64_t EngineQueue::location_of(const Placement& placement) const {
  return engine_.superblock_.segment_offset(placement.segment) + uint64_t{placement.offset_sectors} * kSectorSize;
}

uint64_t EngineQueue::location_of(const format::Key& key) const {
  return engine_.superblock_.segment_offset(key.segment) + uint64_t{key.offset_sectors} * kSectorSize;
}

bool EngineQueue::place(uint32_t sectors, bool wait, Placement& placement) {
  const uint64_t segment_size = engine_.superblock_.segment_size;
  // The rest of the open segment is given up where a memory failure was reported in it: nothing
  // is ever written onto a known bad page (GC retires the segment once it has emptied it).
  if (open_segment_ != UINT32_MAX && open_offset_ < segment_size &&
      engine_.segment_has_bad_block(open_segment_, open_offset_, uint64_t{sectors} * kSectorSize)) {
    open_offset_ = segment_size;
  }
  if (open_segment_ == UINT32_MAX || open_offset_ >= segment_size) {
    const auto segment = engine_.segments_->allocate(SegmentUse::Data, wait);
    if (!segment) return false;
    if (open_segment_ != UINT32_MAX) filled_.emplace_back(open_segment_, open_max_dirty_);
    open_segment_ = *segment;
    open_max_dirty_ = 0;
    open_generation_ = engine_.segments_->info(*segment).generation;
    engine_.live_.trace(open_segment_, open_generation_);
    open_offset_ = format::kSegmentHeaderSize;
    engine_.activity_.touch(engine_.superblock_.segment_offset(open_segment_));
    // The new generation is durable before any key can name it: a key and its data share a fence,
    // and replay takes a key whose segment lacks its generation for damage. (One more fence per
    // segment; a write's data and key need none of their own.)
    write_segment_header(writer_, engine_.superblock_, open_segment_,
                         {format::SegmentType::Data, open_generation_, open_segment_, 0});
    writer_.drain();
  }
  const uint64_t room = (segment_size - open_offset_) / kSectorSize;
  placement = {open_segment_, open_generation_, static_cast<uint32_t>(open_offset_ / kSectorSize),
               static_cast<uint32_t>(std::min<uint64_t>(sectors, room))};
  open_offset_ += uint64_t{placement.sectors} * kSectorSize;
  return true;
}

int EngineQueue::replace_journal() {
  auto slot = engine_.claim_journal_slot();
  if (!slot.ok()) {
    spdlog::error("cache on {}: journal {} cannot go on and no other can start: {}", engine_.options_.region_path,
                  slot_, slot.status().message());
    return -EIO;
  }
  auto fresh = std::make_unique<JournalWriter>(*engine_.region_, engine_.superblock_, *engine_.segments_,
                                               engine_.journals_[*slot], *slot);
  if (Status status = fresh->start(writer_); !status.ok()) {
    std::lock_guard lock(engine_.journals_[*slot].mutex);
    engine_.journals_[*slot].in_use = false;
    return -EIO;
  }
  // Findable before any key in it is acknowledged; the old one stays named until writeback has
  // passed it (the records before the failure are still read from it).
  engine_.name_journal(writer_, *slot);
  spdlog::error("cache on {}: a memory failure was reported where journal {} goes on; the queue's keys go to journal {} "
                "from now on",
                engine_.options_.region_path, slot_, *slot);
  {
    std::lock_guard lock(engine_.journals_[slot_].mutex);
    engine_.journals_[slot_].active = false;
  }
  journal_ = std::move(fresh);
  slot_ = *slot;
  engine_.writeback_->kick();
  return 0;
}

int EngineQueue::number(std::vector<format::Key>& keys) {
  if (!journal_->can_continue()) {
    if (int error = replace_journal(); error != 0) return error;
  }
  // The horizon may never pass a number handed out but not yet published. compute_horizon()
  // reads next_seq_ (acquire) before the journals' inflight_seq: if it sees this fetch_add or a
  // later one, the release makes the store of a bound at or below this write's numbers visible
  // to it. Lock-free, as taking the journal's mutex here costs two more locked instructions on
  // every write.
  JournalState& state = engine_.journals_[slot_];
  state.inflight_seq.store(engine_.next_seq_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  const uint64_t first = engine_.next_seq_.fetch_add(keys.size(), std::memory_order_release);
  for (size_t i = 0; i < keys.size(); ++i) keys[i].seq = first + i;
  return 0;
}

void EngineQueue::commit(std::vector<format::Key>& keys) {
  // Where measured cheaper (commit_protocol.h), data and key set share one fence: the key set
  // carries the digest of its data, and replay checks it for the journal's last key set, the
  // only one a power cut can leave durable over torn data (that of a write never acknowledged).
  // Any further key set of a large batch is written after a fence (write_staged), by which the
  // data is durable too. Elsewhere the data is fenced first and its key set needs no digest.
  // Keys without data (discard, write-zeroes) have nothing to fence first.
  const bool shared = commit_data_bytes_ == 0 || (commit_hashed_ && shares_fence(shared_fence_classes_, commit_data_bytes_));
  const auto ordering = shared ? format::DataOrdering::SharedFence : format::DataOrdering::DataFirst;
  commit_data_bytes_ = 0;
  commit_hashed_ = true;
  // Encoded while the data's streaming stores drain.
  journal_->stage(writer_, keys, ordering);
  if (ordering == format::DataOrdering::DataFirst) writer_.drain();
  journal_->write_staged(writer_);
  // The data and keys are durable after this fence; only now may the writes be acknowledged.
  writer_.drain();
  for (const format::Key& key : keys) {
    if (key.kind == format::KeyKind::Discard) {
      engine_.index_.discard(key.sector, key.sectors, key.seq);
      // Before publication, so writeback cannot pass it down (and retire it) before it is here.
      engine_.pending_discards_.add(key.sector, key.sectors, key.seq);
    } else if (key.kind == format::KeyKind::Checksum) {
      engine_.checksums_.add(location_of(key), key.sectors, static_cast<uint32_t>(key.sector));
    } else if (key.kind == format::KeyKind::Zero) {
      engine_.index_.insert(key.sector, key.sectors, 0, key.seq, Extent::kZero);
    } else {
      engine_.index_.insert(key.sector, key.sectors, location_of(key), key.seq, 0);
      if (key.segment == open_segment_) {
        open_max_dirty_ = std::max(open_max_dirty_, key.seq);
      } else {
        for (auto& [segment, max_dirty] : filled_) {
          if (segment == key.segment) max_dirty = std::max(max_dirty, key.seq);
        }
      }
    }
  }
  // Published only after the index holds the keys: writeback looks keys up in the index.
  journal_->publish(keys.back().seq);
  seal_filled();
  // Journaled once: a key left here would be journaled again by the next commit, with a newer
  // sequence number, undoing whatever other queues wrote to its sectors in between.
  keys.clear();
}

void EngineQueue::seal_filled() {
  for (const auto& [segment, max_dirty] : filled_) engine_.segments_->seal(segment, max_dirty);
  filled_.clear();
}

int EngineQueue::place_write(const Request& request, format::KeyKind kind) {
  const size_t first_key = keys_.size();
  const bool with_checksums = tunables_.get().data_crc;
  uint64_t sector = request.sector;
  uint32_t remaining = request.sectors;
  while (remaining > 0) {
    Placement placement;
    if (!place(remaining, /*wait=*/true, placement)) {
      keys_.resize(first_key);  // the room taken stays unreferenced
      return -ESHUTDOWN;
    }
    format::Key key;
    key.sector = sector;
    key.sectors = placement.sectors;
    key.kind = kind;
    key.segment = placement.segment;
    key.offset_sectors = placement.offset_sectors;
    key.generation = placement.generation;
    keys_.push_back(key);
    if (with_checksums) {
      format::Key checksum = key;
      checksum.kind = format::KeyKind::Checksum;
      checksum.sector = 0;  // the data's CRC32C, once copy_write has read it
      keys_.push_back(checksum);
    }
    sector += placement.sectors;
    remaining -= placement.sectors;
  }
  if (engine_.segments_->free_count() < 2) engine_.writeback_->kick();
  return 0;
}

void EngineQueue::copy_write(const Request& request, size_t first_key) {
  if (commit_data_bytes_ == 0) shared_fence_classes_ = engine_.shared_fence_classes_.load(std::memory_order_relaxed);
  for (size_t i = first_key; i < keys_.size(); ++i) {
    if (keys_[i].kind == format::KeyKind::Checksum) continue;  // filled in with its data key's copy
    const std::byte* source = request.buffer + (keys_[i].sector - request.sector) * kSectorSize;
    const uint64_t bytes = uint64_t{keys_[i].sectors} * kSectorSize;
    writer_.copy_nodrain(location_of(keys_[i]), source, bytes);
    // Hashed after the copy is issued, while its streaming stores drain (where it costs next to
    // nothing); the key set carries the digest, which replay checks (see commit()). A commit
    // of a size that fences its data first needs no hashes.
    commit_data_bytes_ += bytes;
    if (commit_hashed_ && shares_fence(shared_fence_classes_, commit_data_bytes_)) {
      keys_[i].data_hash = format::data_hash(source, bytes);
    } else {
      commit_hashed_ = false;
    }
    if (i + 1 < keys_.size() && keys_[i + 1].kind == format::KeyKind::Checksum) {
      keys_[i + 1].sector = format::crc32c(0, source, bytes);
    }
  }
}

int EngineQueue::stage_write(const Request& request) {
  const size_t first_key = keys_.size();
  if (int error = place_write(request, format::KeyKind::Write); error != 0) return error;
  copy_write(request, first_key);
  return 0;
}

int EngineQueue::write(const Request& request, format::KeyKind kind) {
  assert(keys_.empty());  // batches are committed before any other request
  if (int error = place_write(request, kind); error != 0) return error;
  // Numbered before the copy: taking a number is a locked instruction, which would otherwise wait
  // for the data's streaming stores to drain; the key sets are then encoded while they do. (Not
  // before place_write: a writer waiting there for GC must not hold back the clean horizon.)
  if (int error = number(keys_); error != 0) {
    keys_.clear();  // the room taken stays unreferenced
    return error;
  }
  copy_write(request, 0);
  commit(keys_);
  return static_cast<int>(request.sectors * kSectorSize);
}

void EngineQueue::commit_staged_writes() {
  if (staged_.empty()) return;
  if (!keys_.empty()) {
    // One fence for all the batch's data and its keys.
    if (int error = number(keys_); error != 0) {
      keys_.clear();
      for (StagedWrite& write : staged_) {
        if (write.result > 0) write.result = error;
      }
    } else {
      commit(keys_);
    }
  }
  // The batch is taken out of staged_ before its completions run, as one may submit again. The
  // two vectors trade places, keeping their capacity: a batch allocates nothing.
  std::vector<StagedWrite> done = std::move(spare_staged_);
  done.clear();
  done.swap(staged_);
  for (const StagedWrite& write : done) {
    write.timing.record();
    write.completion->complete(write.result);
  }
  done.clear();
  spare_staged_ = std::move(done);
}

int EngineQueue::commit_range(const Request& request, format::KeyKind kind) {
  assert(keys_.empty());  // nothing staged: commit_staged_writes() ran before
  format::Key key;
  key.sector = request.sector;
  key.sectors = request.sectors;
  key.kind = kind;
  keys_.push_back(key);
  if (int error = number(keys_); error != 0) {
    keys_.clear();
    return error;
  }
  commit(keys_);
  return 0;
}

int EngineQueue::write_zeroes(const Request& request) {
  QueueCounters::bump(counters_.write_zeroes);
  return commit_range(request, format::KeyKind::Zero);
}

int EngineQueue::discard(const Request& request) {
  // The cache forgets the range now; writeback passes the discard down to the backing device in
  // journal order, where no newer key has written since (Writeback::collect).
  QueueCounters::bump(counters_.discards);
  return commit_range(request, format::KeyKind::Discard);
}

void EngineQueue::read(const Request& request, RequestCompletion* completion, const Timing& timing,
                       bool sequential) {
  // Gaps are gathered in a buffer the queue reuses; only a read that needs the backing device
  // allocates an operation (a full hit completes here, without allocating).
  std::vector<GapRecord>& gaps = gap_scratch_;
  gaps.clear();
  const uint64_t horizon = engine_.clean_horizon_.load(std::memory_order_acquire);
  const bool verify_crc = tunables_.get().data_crc;
  bool media_error = false;
  bool any_hit = false;
  engine_.index_.lookup(request.sector, request.sectors, [&](std::span<const Piece> pieces, uint64_t change_count) {
    for (const Piece& piece : pieces) {
      std::byte* destination = request.buffer + (piece.sector - request.sector) * kSectorSize;
      const uint64_t bytes = uint64_t{piece.sectors} * kSectorSize;
      if (piece.discarded()) {
        // Zeros rather than the device's content: writeback may be punching the hole there
        // now, and a hole that splits a page or block is zeroed in place, so a read racing with
        // it could return a sector half old data, half zeros.
        std::memset(destination, 0, bytes);
        continue;
      }
      if (piece.cached) {
        // Dirty data writeback lost to a media error, in this run or (restored from the control
        // area, without data) an earlier one: the backing device holds older data.
        if (piece.extent.flags & Extent::kLost) {
          media_error = true;
          continue;
        }
        if (piece.extent.flags & Extent::kZero) {
          std::memset(destination, 0, bytes);
          any_hit = true;
          continue;
        }
        // Copied under the shard lock: GC cannot evict and reuse the segment meanwhile.
        if (engine_.region_->read(piece.extent.location, destination, bytes).ok()) {
          if (!verify_crc || engine_.checksums_.verify(*engine_.region_, piece.extent.location, destination, bytes) !=
                                 DataChecksums::Verdict::Bad) {
            engine_.activity_.touch(piece.extent.location);
            any_hit = true;
            continue;
          }
          spdlog::error("cache on {}: sectors {}+{}: cached data does not match its checksum", engine_.options_.region_path,
                        piece.sector, piece.sectors);
          QueueCounters::bump(counters_.data_crc_errors);
        } else {
          QueueCounters::bump(counters_.media_errors);
        }
        // Clean data has an intact copy on the backing device; dirty data has no other copy.
        if (piece.extent.seq >= horizon) {
          media_error = true;
          continue;
        }
      }
      // Never refill over bad media: a cached piece that failed gets no fill.
      gaps.push_back({piece.sector, piece.sectors, piece.cached ? UINT64_MAX : change_count});
    }
  });
  QueueCounters::bump(counters_.reads);
  QueueCounters::bump(counters_.read_bytes, uint64_t{request.sectors} * kSectorSize);
  if (media_error) {
    timing.record();
    completion->complete(-EIO);
    return;
  }
  if (gaps.empty()) {
    QueueCounters::bump(counters_.read_hits);
    timing.record();
    completion->complete(static_cast<int>(request.sectors * kSectorSize));
    return;
  }
  QueueCounters::bump(any_hit ? counters_.read_partial_hits : counters_.read_misses);
  // Which gaps are copied into the cache once read: none of a long sequential stream; otherwise
  // those the promotion policy lets in.
  const Tunables& tunables = tunables_.get();
  if (sequential) {
    QueueCounters::bump(counters_.bypassed_reads);
    QueueCounters::bump(counters_.bypassed_bytes, uint64_t{request.sectors} * kSectorSize);
  }
  for (GapRecord& gap : gaps) {
    if (gap.change_count == UINT64_MAX) continue;
    if (!tunables.read_miss_fill || sequential) {
      gap.change_count = UINT64_MAX;
    } else if (!engine_.promotion_.record_miss(gap.sector, tunables.promote_after)) {
      gap.change_count = UINT64_MAX;
      QueueCounters::bump(counters_.promotions_deferred);
    }
  }
  auto* operation = new ReadOperation(*this, request, completion, timing);
  for (const GapRecord& record : gaps) {
    ReadOperation::Gap& gap = operation->gaps().emplace_back();
    gap.sector = record.sector;
    gap.sectors = record.sectors;
    gap.change_count = record.change_count;
  }
  operation->submit();
}

void EngineQueue::fill(uint64_t sector, uint32_t sectors, const std::byte* data, uint64_t change_count) {
  if (change_count == UINT64_MAX) return;
  Placement placement;
  if (!place(sectors, /*wait=*/false, placement)) return;
  // Segments holding staged (not yet committed) writes stay unsealed until their keys are in.
  if (placement.sectors < sectors) {
    if (staged_.empty()) seal_filled();
    return;  // the rest of the segment is left unused
  }
  writer_.copy_nodrain(location_of(placement), data, uint64_t{sectors} * kSectorSize);
  // The fence makes streaming stores visible to other cores before the index points at them.
  writer_.drain();
  if (tunables_.get().data_crc) {
    engine_.checksums_.add(location_of(placement), sectors, format::crc32c(0, data, uint64_t{sectors} * kSectorSize));
  }
  if (engine_.index_.insert_fill(sector, sectors, location_of(placement), change_count)) {
    QueueCounters::bump(counters_.fills);
    QueueCounters::bump(counters_.fill_bytes, uint64_t{sectors} * kSectorSize);
  }
  if (staged_.empty()) seal_filled();
}

}  // namespace pcached::cache

// Journals of keys. Each queue appends to a journal of its own (one of the control area's slots),
// so queues never share a lock on the write path. A journal is a chain of journal segments: key
// sets back to back after the segment header, and a link record at the end of a full segment
// that names the next one. Replay and writeback read journals with JournalReader.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "format/key_set.h"
#include "format/segment_header.h"
#include "format/superblock.h"
#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"
#include "pcached/status.h"

namespace pcached::cache {

class SegmentTable;

struct JournalPosition {
  uint32_t segment = 0;
  uint32_t generation = 0;
  uint32_t offset = 0;  // bytes from the start of the segment
  bool operator==(const JournalPosition&) const = default;
};

struct ChainSegment {
  uint32_t segment;
  uint32_t generation;
  uint64_t max_seq;  // newest key in it (0: none yet)
};

// What one journal slot shares between the queue that writes it and the writeback worker.
struct JournalState {
  std::mutex mutex;
  bool in_use = false;
  bool active = false;  // a queue (or GC) appends to it
  // GC's journal of moved dirty data (KeyKind::Relocated): writeback follows the keys the data
  // moved from, never these, so it neither writes back from this journal nor waits for it.
  bool relocation = false;
  JournalPosition published;     // key sets before it are persistent and in the index
  // A write holding this sequence number or a later one is under way (0: none). Stored before
  // the number is taken, cleared by publish(); EngineQueue::number() says why it needs no lock.
  std::atomic<uint64_t> inflight_seq{0};
  std::deque<ChainSegment> chain;  // head first

  // Owned by the writeback worker.
  JournalPosition cursor;  // next key set to write back
};

// Why a journal reader stopped: the clean end; a last key set torn by a crash (never
// acknowledged); or damage with valid records after it, or an unreadable one.
enum class JournalEnd { Clean, Torn, Damaged };

// A whole key set (or link) found by find_key_set: where it starts, and its header.
struct FoundKeySet {
  uint32_t offset;
  format::KeySetHeader header;
  std::vector<format::Key> keys;
};

// The first whole record of the journal segment `segment` (of `generation`) that starts at an
// offset in [from, end). Records that cannot be read are passed over: this is how a journal is
// followed past damage (JournalEnd::Damaged) to where it goes on.
std::optional<FoundKeySet> find_key_set(const pmem::Region& region, const format::Superblock& superblock,
                                        uint32_t segment, uint32_t generation, uint64_t from, uint64_t end);

class JournalReader {
 public:
  JournalReader(const pmem::Region& region, const format::Superblock& superblock, uint32_t slot,
                JournalPosition start);

  // Reads the next key set into keys (cleared first), following links. Returns false at the end
  // of the journal, or when `limit` (if given) is reached. Nothing at or past `limit` is read:
  // writeback reads a journal up to its published position while its queue appends after it.
  bool next(std::vector<format::Key>& keys, const JournalPosition* limit = nullptr);
  JournalPosition position() const { return position_; }
  // Segments walked so far, head first (including the current one).
  const std::vector<ChainSegment>& segments() const { return segments_; }
  JournalEnd end() const { return end_; }
  const std::string& damage() const { return damage_; }
  // After next() stopped at damage: goes on at `offset` of the same segment (where find_key_set
  // found a record).
  void resume_at(uint32_t offset);
  // The key set next() returned last: where it starts and its header.
  JournalPosition last_record() const { return last_record_; }
  const format::KeySetHeader& last_header() const { return last_header_; }

 private:
  bool follow_link(uint32_t segment, uint32_t generation);
  bool valid_record_follows();
  // Reads the segment from offset into the buffer, up to `end` at most: one key set's worth at
  // first, twice as much each time after. (Writeback opens readers on every batch to look at a
  // key set or two; a full read-ahead each time cost it more than the keys it read.) Where that
  // reaches a bad block, the rest of offset's page alone: the key set there may be whole.
  bool refill(uint32_t offset, uint64_t end);

  const pmem::Region& region_;
  const format::Superblock& superblock_;
  uint32_t slot_;
  JournalPosition position_;
  std::vector<ChainSegment> segments_;
  std::unique_ptr<std::byte[]> buffer_;  // (left uninitialised: only what was read is looked at)
  uint32_t read_size_;          // of the next refill
  uint32_t buffer_offset_ = 0;  // segment offset of buffer_[0]
  uint32_t buffer_length_ = 0;
  uint32_t buffer_segment_ = UINT32_MAX;
  JournalEnd end_ = JournalEnd::Clean;
  std::string damage_;
  JournalPosition last_record_;
  format::KeySetHeader last_header_;
};

// Appends key sets to one journal; owned by one queue thread.
class JournalWriter {
 public:
  JournalWriter(const pmem::Region& region, const format::Superblock& superblock, SegmentTable& segments,
                JournalState& state, uint32_t slot);

  // Starts the journal in a fresh segment (persisted before it returns). Fails only at shutdown,
  // or when no segment is free and `wait` is false.
  Status start(pmem::PmemWriter& writer, bool wait = true);
  // Makes sure the next `bytes` of key sets (as encoded_key_set_size() counts them) go into the
  // current segment or a fresh one taken now without waiting, so that staging them never waits
  // for a free segment: GC, which frees them, journals its moves. False if none is free.
  bool reserve(pmem::PmemWriter& writer, size_t bytes);
  // Encodes keys (numbered) as key sets in DRAM, placed where they will go in the journal, so that
  // the work is done while the data's streaming stores drain. Moving to a new journal segment on
  // the way writes its header and the link to it (not drained): the caller's drain before
  // write_staged() makes them durable with the data.
  void stage(pmem::PmemWriter& writer, std::span<const format::Key> keys, format::DataOrdering ordering);
  // Writes the staged key sets to the journal, each durable before the next is begun; the last
  // one not drained: the caller's drain makes it durable. (One key set, the usual case, costs no
  // fence here.)
  void write_staged(pmem::PmemWriter& writer);
  // Makes what was written visible to writeback; call after the drain and the index update.
  void publish(uint64_t last_seq);

  uint32_t slot() const { return slot_; }
  // Whether records can still follow: the link to a next segment goes where the next record would
  // have, so it must be on good media. False once a memory failure was reported under it (the
  // records before it may be gone too); the journal's queue then starts a new journal.
  bool can_continue() const;

 private:
  // Whether a key set of `bytes` and a link behind it go into the current segment here.
  bool fits(size_t bytes) const;
  // Moves to a new segment, linking it from the current one; waits for a free one unless
  // `wait` is false (then false if none is).
  bool advance(pmem::PmemWriter& writer, bool wait = true);

  const pmem::Region& region_;
  const format::Superblock& superblock_;
  SegmentTable& segments_;
  JournalState& state_;
  uint32_t slot_;
  JournalPosition position_;
  uint64_t segment_max_seq_ = 0;
  std::vector<std::byte> scratch_;  // a link record, encoded
  // Key sets encoded by stage(), and the header of and link to a journal segment begun among
  // them: records of staged_bytes_, in the order they must become durable.
  struct StagedRun {
    uint64_t region_offset;
    size_t begin;
    size_t size;
  };
  std::vector<std::byte> staged_bytes_;
  std::vector<StagedRun> staged_runs_;
};

// Writes segment `segment`'s header (not drained).
void write_segment_header(pmem::PmemWriter& writer, const format::Superblock& superblock, uint32_t segment,
                          const format::SegmentHeader& header);
Result<format::SegmentHeader> read_segment_header(const pmem::Region& region, const format::Superblock& superblock,
                                                  uint32_t segment);

}  // namespace pcached::cache

#include "cache/gc_relocation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/engine.h"
#include "format/crc32c.h"
#include "format/layout.h"

namespace pcached::cache {

namespace {

using format::kSectorSize;
using Action = ExtentIndex::Relocation::Action;

// A reclaimed segment's live data is moved when it fills at most this share of the segment, so
// each move frees at least half a segment. Above it, the cache holds more live data than it can
// keep without churning: the coldest segments' data leaves it.
constexpr uint64_t kMovablePercent = 50;
// Moving takes a free segment: while no writer waits for one, or else one GC has just released
// (open_if_starved). It may take the last, below the two GC keeps free for writers
// (kMinFreeSegments in writeback.cc): the same GC run gives back its victims whole, and each one
// it moves from is at most half live.
constexpr uint32_t kFreeSegmentsKept = 1;
// At worst every live sector of a dirty victim is an extent of its own, moved under a key and
// its checksum key; and each victim is retired by one more key.
constexpr uint64_t kKeysPerSector = 2;

// Journal bytes for `keys` keys, in full key sets and a last partial one.
size_t journal_bytes(uint64_t keys) {
  const uint64_t sets = (keys + format::kMaxKeysPerSet - 1) / format::kMaxKeysPerSet;
  return sets * format::encoded_key_set_size(format::kMaxKeysPerSet);
}

uint64_t keys_for(uint64_t live_sectors, size_t segments) { return live_sectors * kKeysPerSector + segments; }

}  // namespace

GcRelocation::GcRelocation(Engine& engine, pmem::PmemWriter& writer)
    : engine_(engine), writer_(writer) {}

GcRelocation::~GcRelocation() { leave_journal(); }

void GcRelocation::leave_journal() {
  if (journal_slot_ == UINT32_MAX) return;
  {
    std::lock_guard lock(engine_.journals_[journal_slot_].mutex);
    engine_.journals_[journal_slot_].active = false;
  }
  journal_.reset();
  journal_slot_ = UINT32_MAX;
}

bool GcRelocation::worth_moving(uint64_t live_sectors) const {
  const uint64_t capacity = (engine_.superblock_.segment_size - format::kSegmentHeaderSize) / kSectorSize;
  return live_sectors * 100 <= capacity * kMovablePercent;
}

uint64_t GcRelocation::dirty_sectors_per_run() const {
  // What one journal segment holds (less its header and the link that may end it), in keys.
  const uint64_t room = engine_.superblock_.segment_size - format::kSegmentHeaderSize - format::kKeySetHeaderSize;
  const uint64_t keys = room / format::encoded_key_set_size(format::kMaxKeysPerSet) * format::kMaxKeysPerSet;
  return keys / kKeysPerSector;
}

bool GcRelocation::start_journal() {
  auto slot = engine_.claim_journal_slot();
  if (!slot.ok()) return false;
  auto journal = std::make_unique<JournalWriter>(*engine_.region_, engine_.superblock_, *engine_.segments_,
                                                 engine_.journals_[*slot], *slot);
  if (!journal->start(writer_, /*wait=*/false).ok()) {
    std::lock_guard lock(engine_.journals_[*slot].mutex);
    engine_.journals_[*slot].in_use = false;
    return false;
  }
  {
    std::lock_guard lock(engine_.journals_[*slot].mutex);
    engine_.journals_[*slot].relocation = true;
  }
  // Findable before any key in it counts (ordering rule 4).
  engine_.name_journal(writer_, *slot);
  journal_ = std::move(journal);
  journal_slot_ = *slot;
  return true;
}

bool GcRelocation::journal_room(size_t bytes) {
  if (journal_ && !journal_->can_continue()) {
    // A memory failure was reported where GC's journal goes on, so it cannot even link to a new
    // segment: it is left (writeback passes journals of moves by, its segments go with the
    // horizon) and GC starts another.
    spdlog::error("cache on {}: a memory failure was reported where GC's journal {} goes on; GC starts another",
                  engine_.options_.region_path, journal_slot_);
    leave_journal();
  }
  if (!journal_ && !start_journal()) return false;
  return journal_->reserve(writer_, bytes);
}

bool GcRelocation::reserve_journal(uint64_t live_sectors, size_t segments) {
  return journal_room(journal_bytes(keys_for(live_sectors, segments)));
}

void GcRelocation::seal_open_segment() {
  engine_.segments_->seal(open_segment_, open_max_dirty_);
  open_segment_ = UINT32_MAX;
  open_max_dirty_ = 0;
}

void GcRelocation::seal_when_short() {
  SegmentTable& segments = *engine_.segments_;
  if (open_segment_ == UINT32_MAX || (segments.waiters() == 0 && segments.free_count() >= kFreeSegmentsKept)) return;
  const uint64_t segment_size = engine_.superblock_.segment_size;
  if (open_offset_ - format::kSegmentHeaderSize < (segment_size - format::kSegmentHeaderSize) / 2) return;
  if (!worth_moving(engine_.activity_.live_sectors(open_segment_))) return;
  seal_open_segment();
}

void GcRelocation::open_if_starved() {
  if (!starved_) return;
  starved_ = false;
  // Right after the victims were released, before the writers they woke take them all: one of
  // them, once, which the moves it takes pay back (each frees half a victim or more). The one
  // open so far had no room for the move that starved.
  open_segment();
}

std::optional<uint32_t> GcRelocation::open_segment() {
  SegmentTable& segments = *engine_.segments_;
  const auto segment = segments.allocate(SegmentUse::Data, /*wait=*/false);
  if (!segment) return std::nullopt;
  // The one before (its tail left unused when an extent did not fit) becomes GC's to reclaim.
  if (open_segment_ != UINT32_MAX) seal_open_segment();
  open_segment_ = *segment;
  open_offset_ = format::kSegmentHeaderSize;
  // A header with the new generation, durable before any key can name the segment (recovery
  // reads it).
  write_segment_header(writer_, engine_.superblock_, open_segment_,
                       {format::SegmentType::Data, segments.info(open_segment_).generation, open_segment_, 0});
  writer_.drain();
  return segment;
}

std::optional<uint64_t> GcRelocation::place(uint32_t sectors) {
  const uint64_t segment_size = engine_.superblock_.segment_size;
  SegmentTable& segments = *engine_.segments_;
  const uint64_t bytes = uint64_t{sectors} * kSectorSize;
  // Never onto a page a memory failure was reported in: the rest of the segment is given up.
  const bool fits = open_segment_ != UINT32_MAX && open_offset_ + bytes <= segment_size &&
                    !engine_.segment_has_bad_block(open_segment_, open_offset_, bytes);
  if (!fits) {
    if (segments.waiters() > 0 || segments.free_count() < kFreeSegmentsKept || !open_segment()) {
      starved_ = true;
      return std::nullopt;
    }
  }
  const uint64_t location = engine_.superblock_.segment_offset(open_segment_) + open_offset_;
  open_offset_ += bytes;
  return location;
}

ExtentIndex::Relocation GcRelocation::move(uint64_t sector, const Extent& extent, bool data_crc) {
  const bool dirty = extent.seq >= engine_.clean_horizon_.load();
  const ExtentIndex::Relocation failed{dirty ? Action::Keep : Action::Evict};
  const uint64_t bytes = uint64_t{extent.sectors} * kSectorSize;
  if (extent.sectors > ExtentIndex::kStripeSectors) return failed;
  if (dirty && !journal_) return failed;
  const std::optional<uint64_t> location = place(extent.sectors);
  if (!location) return failed;
  // Read straight into the new place. Clean data that cannot be read (a media error) or fails its
  // checksum is evicted, and its reads go to the backing device, which holds it; dirty data stays
  // for writeback to find and report. Either way the room taken is left unused: nothing names it.
  if (!writer_.copy_within_nodrain(*location, extent.location, bytes).ok()) return failed;
  const std::byte* moved = engine_.region_->base() + *location;
  if (data_crc &&
      engine_.checksums_.verify(*engine_.region_, extent.location, moved, bytes) == DataChecksums::Verdict::Bad) {
    return failed;
  }
  // Drained before the index points here: another core must not read the old contents of the
  // line (the flushes are not ordered with the unlock); and, for dirty data, before the key that
  // names it is written (its key set is of the data-first kind).
  writer_.drain();
  const uint32_t crc = data_crc ? format::crc32c(0, moved, bytes) : 0;
  if (data_crc) engine_.checksums_.add(*location, extent.sectors, crc);
  moved_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (dirty) {
    const format::Superblock& sb = engine_.superblock_;
    format::Key key;
    key.sector = sector;
    key.sectors = extent.sectors;
    key.kind = format::KeyKind::Relocated;
    key.seq = extent.seq;
    key.segment = open_segment_;
    key.offset_sectors = static_cast<uint32_t>((*location - sb.segment_offset(open_segment_)) / kSectorSize);
    key.generation = engine_.segments_->info(open_segment_).generation;
    Record record{key, std::nullopt};
    if (data_crc) {
      format::Key checksum = key;
      checksum.kind = format::KeyKind::Checksum;
      checksum.sector = crc;
      record.checksum = checksum;
    }
    pending_.push_back(record);
    open_max_dirty_ = std::max(open_max_dirty_, extent.seq);
    moved_dirty_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  return {Action::Move, *location};
}

void GcRelocation::retire(uint32_t segment, uint32_t generation, uint64_t max_dirty_seq) {
  format::Key key;
  key.sectors = 1;  // none of its own; the format wants a non-empty range
  key.kind = format::KeyKind::Retired;
  key.seq = max_dirty_seq;
  key.segment = segment;
  key.generation = generation;
  pending_.push_back({key, std::nullopt});
}

bool GcRelocation::commit() {
  // A record below the clean horizon is needed no more: the data it moved, or every key naming the
  // segment it retires, is on the backing device, as for a victim that was clean when GC took it.
  // So a run that could not commit waits at most until writeback has passed its records.
  const uint64_t horizon = engine_.clean_horizon_.load();
  std::erase_if(pending_, [&](const Record& record) { return record.key.seq < horizon; });
  if (pending_.empty()) {
    commit_waits_ = false;
    return true;
  }
  // In sequence order, each checksum right after the key of its data.
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Record& a, const Record& b) { return a.key.seq < b.key.seq; });
  std::vector<format::Key> keys;
  keys.reserve(pending_.size() * 2);
  for (const Record& record : pending_) {
    keys.push_back(record.key);
    if (record.checksum) keys.push_back(*record.checksum);
  }
  // What reserve_journal() made room for, unless a memory failure took it since: then the sets go
  // to another journal, never onto the failed page (nor through a wait for a segment, which only
  // GC would free).
  if (!journal_room(journal_bytes(keys.size()))) {
    if (!commit_waits_) {
      commit_waits_count_.fetch_add(1, std::memory_order_relaxed);
      spdlog::error("cache on {}: GC cannot make its moves durable (no journal slot or segment free): its victims "
                    "stay, and GC waits",
                    engine_.options_.region_path);
    }
    commit_waits_ = true;
    return false;
  }
  if (commit_waits_) spdlog::info("cache on {}: GC made its moves durable; it goes on", engine_.options_.region_path);
  commit_waits_ = false;
  pending_.clear();
  // The moved data is durable already (copy_persist): the keys follow it (data first), and are
  // durable before any victim is released.
  journal_->stage(writer_, keys, format::DataOrdering::DataFirst);
  journal_->write_staged(writer_);
  writer_.drain();
  journal_->publish(keys.back().seq);
  return true;
}

}  // namespace pcached::cache

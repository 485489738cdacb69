#include "cache/gc_relocation.h"

#include "cache/engine.h"
#include "format/crc32c.h"
#include "format/layout.h"

namespace pcached::cache {

namespace {

using format::kSectorSize;

// A reclaimed segment's live data is moved when it fills at most this share of the segment, so
// each move frees at least half a segment. Above it, the cache holds more live data than it can
// keep without churning: the coldest segments' data leaves it.
constexpr uint64_t kMovablePercent = 50;
// Moving takes a free segment: while no writer waits for one, or else one GC has just released
// (open_if_starved). It may take the last, below the two GC keeps free for writers
// (kMinFreeSegments in writeback.cc): the same GC run gives back its victims whole, and each one
// it moves from is at most half live.
constexpr uint32_t kFreeSegmentsKept = 1;

}  // namespace

GcRelocation::GcRelocation(Engine& engine, pmem::PmemWriter& writer)
    : engine_(engine),
      writer_(writer),
      bounce_(std::make_unique<std::byte[]>(ExtentIndex::kStripeSectors * kSectorSize)) {}

bool GcRelocation::worth_moving(uint64_t live_sectors) const {
  const uint64_t capacity = (engine_.superblock_.segment_size - format::kSegmentHeaderSize) / kSectorSize;
  return live_sectors * 100 <= capacity * kMovablePercent;
}

void GcRelocation::seal_when_short() {
  SegmentTable& segments = *engine_.segments_;
  if (open_segment_ == UINT32_MAX || (segments.waiters() == 0 && segments.free_count() >= kFreeSegmentsKept)) return;
  const uint64_t segment_size = engine_.superblock_.segment_size;
  if (open_offset_ - format::kSegmentHeaderSize < (segment_size - format::kSegmentHeaderSize) / 2) return;
  if (!worth_moving(engine_.activity_.live_sectors(open_segment_))) return;
  segments.seal(open_segment_, 0);
  open_segment_ = UINT32_MAX;
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
  const auto segment = segments.allocate(SegmentUse::Data, /*wait=*/false, /*clean_only=*/true);
  if (!segment) return std::nullopt;
  // The one before (its tail left unused when an extent did not fit) becomes GC's to reclaim.
  if (open_segment_ != UINT32_MAX) segments.seal(open_segment_, 0);
  open_segment_ = *segment;
  open_offset_ = format::kSegmentHeaderSize;
  // A header with the new generation, as every data segment has (recovery reads it), though no
  // key will ever name this segment.
  write_segment_header(writer_, engine_.superblock_, open_segment_,
                       {format::SegmentType::Data, segments.info(open_segment_).generation, open_segment_, 0});
  return segment;
}

std::optional<uint64_t> GcRelocation::place(uint32_t sectors) {
  const uint64_t segment_size = engine_.superblock_.segment_size;
  SegmentTable& segments = *engine_.segments_;
  if (open_segment_ == UINT32_MAX || open_offset_ + uint64_t{sectors} * kSectorSize > segment_size) {
    if (segments.waiters() > 0 || segments.free_count() < kFreeSegmentsKept || !open_segment()) {
      starved_ = true;
      return std::nullopt;
    }
  }
  const uint64_t location = engine_.superblock_.segment_offset(open_segment_) + open_offset_;
  open_offset_ += uint64_t{sectors} * kSectorSize;
  return location;
}

std::optional<uint64_t> GcRelocation::move(const Extent& extent, bool data_crc) {
  const uint64_t bytes = uint64_t{extent.sectors} * kSectorSize;
  if (extent.sectors > ExtentIndex::kStripeSectors) return std::nullopt;
  // Read first: data that cannot be read (a media error) or fails its checksum is evicted, and
  // its reads go to the backing device, which holds it.
  if (!engine_.region_->read(extent.location, bounce_.get(), bytes).ok()) return std::nullopt;
  if (data_crc && engine_.checksums_.verify(*engine_.region_, extent.location, bounce_.get(), bytes) ==
                      DataChecksums::Verdict::Bad) {
    return std::nullopt;
  }
  const std::optional<uint64_t> location = place(extent.sectors);
  if (!location) return std::nullopt;
  // Drained before the index points here: another core must not read the old contents of the
  // line (streaming stores are not ordered with the unlock). Durability does not matter.
  writer_.copy_persist(*location, bounce_.get(), bytes);
  if (data_crc) engine_.checksums_.add(*location, extent.sectors, format::crc32c(0, bounce_.get(), bytes));
  moved_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return location;
}

}  // namespace pcached::cache

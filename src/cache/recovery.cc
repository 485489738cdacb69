// Rebuilding the cache's DRAM state from the media: control area, segment headers, then every
// journal's keys at or above the clean horizon, applied in sequence order.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>

#include "cache/engine.h"
#include "format/control_area.h"
#include "format/data_hash.h"
#include "format/layout.h"

namespace pcached::cache {

namespace {

struct ReplayedJournal {
  uint32_t slot;
  std::vector<ChainSegment> chain;
  JournalPosition end;
  bool relocation = false;  // GC's journal of moved data
};

struct ControlRead {
  format::CurrentControl current;
  bool other_slot_current;  // the other slot holds the same state, whole
};

// Whether a HashedKeys set's data is provably not what its digest says: every data key points
// where its data can be (in_place) and the data reads back, and the digest differs. (A key that
// does not point into a segment of its generation is left for the checks that refuse the cache as
// damaged; data that cannot be read keeps its key, whose reads then fail rather than serve older
// data.)
bool data_torn(const pmem::Region& region, const format::Superblock& sb, std::span<const format::Key> keys,
               uint64_t digest, const std::function<bool(const format::Key&)>& in_place) {
  std::vector<uint64_t> hashes;
  std::vector<std::byte> data;
  for (const format::Key& key : keys) {
    if (!format::has_data(key.kind)) continue;
    const uint64_t bytes = uint64_t{key.sectors} * format::kSectorSize;
    if (!in_place(key)) return false;
    data.resize(bytes);
    if (!region.read(sb.segment_offset(key.segment) + uint64_t{key.offset_sectors} * format::kSectorSize, data.data(), bytes)
             .ok()) {
      return false;
    }
    hashes.push_back(format::data_hash(data.data(), bytes));
  }
  return format::data_digest(hashes) != digest;
}

Result<ControlRead> read_control(const pmem::Region& region, const format::Superblock& sb) {
  Result<format::ControlArea> slots[2] = {Status::error(EIO, "unread"), Status::error(EIO, "unread")};
  for (unsigned slot = 0; slot < 2; ++slot) {
    std::array<std::byte, format::kControlSlotBytes> bytes;
    Status status = region.read(format::kControlOffsets[slot], bytes.data(), bytes.size());
    slots[slot] = status.ok() ? format::decode_control_area(bytes, sb.salt()) : Result<format::ControlArea>(status);
  }
  for (unsigned slot = 0; slot < 2; ++slot) {
    if (!slots[slot].ok() && slots[slot ^ 1].ok()) {
      spdlog::warn("pmem region {}: control slot {} is unusable ({}); using slot {}", region.path(), slot,
                   slots[slot].status().message(), slot ^ 1);
    }
  }
  auto current = format::pick_current_control(slots[0], slots[1]);
  if (!current.ok()) return current.status();
  const Result<format::ControlArea>& other = slots[current->slot ^ 1];
  return ControlRead{current.value(), other.ok() && other.value() == current->control};
}

}  // namespace

Status Engine::recover(const std::optional<CleanCheckpoint>& clean) {
  const std::string where = "cache on " + options_.region_path;
  auto read = read_control(*region_, superblock_);
  if (!read.ok()) return read.status().with_context(where);
  const format::ControlArea control = read->current.control;
  control_ = std::make_unique<ControlStore>(superblock_, control);
  if (!read->other_slot_current) {
    // Ordering: before anything updates the control area (the clean-shutdown flag below, a
    // queue's journal, writeback). An update writes slot 0, then slot 1; a power cut in it tears
    // the slot it writes, which is safe only while the other slot is whole and current. After a
    // cut that tore (or left behind) one slot, the next update could otherwise tear the only good
    // one and leave no usable control area.
    pmem::PmemWriter writer = make_writer();
    control_->repair(writer, read->current.slot ^ 1);
  }
  clean_horizon_ = control.clean_horizon;
  uint64_t next_seq = control.next_seq;

  // Segment generations as on the media. A header that is damaged is only an error if live data
  // depends on it (checked below).
  std::vector<bool> header_damaged(superblock_.segment_count, false);
  std::vector<format::SegmentHeader> headers(superblock_.segment_count);
  for (uint32_t segment = 0; segment < superblock_.segment_count; ++segment) {
    auto header = read_segment_header(*region_, superblock_, segment);
    if (header.ok()) {
      headers[segment] = header.value();
    } else if (header.status().code() != ENODATA) {
      header_damaged[segment] = true;
    }
    segments_->at(segment).generation = headers[segment].generation;
  }
  auto in_range = [&](const format::Key& key) {
    return key.segment < superblock_.segment_count &&
           uint64_t{key.offset_sectors} * format::kSectorSize >= format::kSegmentHeaderSize &&
           (uint64_t{key.offset_sectors} + key.sectors) * format::kSectorSize <= superblock_.segment_size;
  };
  // Whether the segment's header is whole and names that type and generation.
  auto segment_is = [&](uint32_t segment, format::SegmentType type, uint32_t generation) {
    return segment < superblock_.segment_count && !header_damaged[segment] && headers[segment].type == type &&
           headers[segment].generation == generation;
  };
  // Whether a data key points into a data segment of its generation, where its data can be.
  auto in_place = [&](const format::Key& key) {
    return in_range(key) && segment_is(key.segment, format::SegmentType::Data, key.generation);
  };

  // Read every journal from its head. Keys below the clean horizon are already on the backing
  // device and are not needed.
  std::vector<format::Key> live;
  std::vector<ReplayedJournal> journals;
  std::vector<format::Key> batch;
  std::vector<JournalPosition> dropped_records;  // key sets whose data was torn (below)
  for (uint32_t slot = 0; slot < format::kMaxJournals; ++slot) {
    const format::JournalHead head = control.journals[slot];
    if (!head.in_use()) continue;
    if (!segment_is(head.segment, format::SegmentType::Journal, head.generation) ||
        headers[head.segment].journal_slot != slot) {
      return Status::error(EBADMSG, where + ": journal " + std::to_string(slot) + " starts in segment " +
                                        std::to_string(head.segment) + ", whose header does not belong to it");
    }
    JournalReader reader(*region_, superblock_, slot,
                         {head.segment, head.generation, static_cast<uint32_t>(format::kSegmentHeaderSize)});
    ReplayedJournal replayed{slot, {}, {}, false};
    size_t last_record_live = live.size();  // where the last key set's live keys begin
    std::vector<format::Key> last_record;
    for (;;) {
      while (reader.next(batch)) {
        last_record_live = live.size();
        for (const format::Key& key : batch) {
          if (key.kind == format::KeyKind::Relocated || key.kind == format::KeyKind::Retired) replayed.relocation = true;
          next_seq = std::max(next_seq, key.seq + 1);
          if (key.seq >= control.clean_horizon) live.push_back(key);
        }
        std::swap(batch, last_record);
      }
      if (reader.end() != JournalEnd::Damaged) break;
      // Records that cannot be read are passed over only where they cannot matter: a journal
      // numbers its key sets in order, so when the next whole one starts below the clean horizon,
      // every key in between was clean (writeback went past the damage, Writeback::pass_damage).
      const JournalPosition at = reader.position();
      const auto found = find_key_set(*region_, superblock_, at.segment, at.generation,
                                      uint64_t{at.offset} + format::kKeySetAlignment, superblock_.segment_size);
      // Not in GC's journal of moves: its sets carry the numbers of the keys they move, in no order.
      const auto is_move = [](const format::Key& key) {
        return key.kind == format::KeyKind::Relocated || key.kind == format::KeyKind::Retired;
      };
      if (!found || !format::holds_keys(found->header.kind) || found->header.first_seq > control.clean_horizon ||
          replayed.relocation || std::any_of(found->keys.begin(), found->keys.end(), is_move)) {
        return Status::error(EBADMSG,
                             where + ": " + reader.damage() + "; refusing to attach rather than lose the keys after it");
      }
      spdlog::warn("{}: journal {}: {}; every key there is clean (the journal goes on below the clean horizon, at "
                   "offset {}), so it is passed over",
                   where, slot, reader.damage(), found->offset);
      reader.resume_at(found->offset);
    }
    if (reader.end() == JournalEnd::Torn) {
      spdlog::warn("{}: {}: the last key set was torn by a crash (never acknowledged); the journal ends there", where,
                   reader.damage());
    }
    replayed.chain = reader.segments();
    replayed.end = reader.position();
    // The journal's last key set is the only one whose data may not have been durable when it was
    // (they share a fence); if that data is torn, the fence never completed and none of its writes
    // was acknowledged. Its keys go, and writeback stops before it. (A key set the horizon has
    // reached was acknowledged long ago, and its data may have been reclaimed since.)
    if (!last_record.empty() && reader.last_header().kind == format::KeySetKind::HashedKeys &&
        last_record.front().seq >= control.clean_horizon &&
        data_torn(*region_, superblock_, last_record, reader.last_header().data_digest, in_place)) {
      spdlog::warn("{}: journal {}: the data of the last key set (sequence numbers {}..{}) was torn by a crash before "
                   "its writes were acknowledged; they are dropped",
                   where, slot, last_record.front().seq, last_record.back().seq);
      live.resize(last_record_live);
      replayed.end = reader.last_record();
      dropped_records.push_back(replayed.end);
    }
    journals.push_back(std::move(replayed));
  }
  if (!dropped_records.empty()) {
    // Ordering: erased durably before anything can reuse a segment. Until a new key set takes its
    // place, a dropped one would be read again at the next attach, and once its segment holds a
    // newer generation, its data could no longer be checked: its keys would then read as damage
    // and the cache be refused. (A cut in the erasure leaves the magic whole, as before, or gone,
    // or the set torn: each ends the journal there.)
    pmem::PmemWriter writer = make_writer();
    for (const JournalPosition& record : dropped_records) {
      writer.fill_nodrain(superblock_.segment_offset(record.segment) + record.offset, 0, format::kKeySetAlignment);
    }
    writer.drain();
  }

  // A moved key shares its number with the key it moves (which is skipped when its segment was
  // reused, or names the same data when not): either order of the two is right.
  std::sort(live.begin(), live.end(), [](const format::Key& a, const format::Key& b) { return a.seq < b.seq; });
  // Segments GC released while keys above the horizon still named them, their live data moved
  // first (KeyKind::Retired): those keys are skipped, whatever the segment holds now.
  std::set<std::pair<uint32_t, uint32_t>> retired;  // (segment, generation)
  for (const format::Key& key : live) {
    if (key.kind == format::KeyKind::Retired) retired.emplace(key.segment, key.generation);
  }
  auto superseded = [&](const format::Key& key) {
    return (format::names_data(key.kind) || key.kind == format::KeyKind::Checksum) &&
           retired.contains({key.segment, key.generation});
  };
  std::map<uint32_t, uint64_t> data_segments;  // segment -> newest dirty key in it
  // The clean data first: every replayed key is newer (the checkpoint's extents are all clean).
  if (clean && clean->header.control_update_seq == control.update_seq) {
    restore_clean_data(
        *clean,
        [&](uint32_t segment, uint32_t generation) {
          return segment_is(segment, format::SegmentType::Data, generation);
        },
        data_segments);
  } else if (clean) {
    spdlog::info("{}: the clean checkpoint belongs to update {} of the control area, which is at update {} (the "
                 "detach that wrote it was cut short); it is ignored",
                 where, clean->header.control_update_seq, control.update_seq);
  }
  const uint64_t device_sectors = backing_->size() >> format::kSectorShift;
  for (const format::Key& key : live) {
    // Requests past the end of the device are refused before they get a key, so such a key is
    // damage; writeback could neither place its data nor ever get past it. (A checksum key's
    // sector field holds its CRC.)
    if (key.kind == format::KeyKind::Retired) continue;
    const bool names_sectors = key.kind != format::KeyKind::Checksum;
    if (names_sectors && (key.sector >= device_sectors || key.sectors > device_sectors - key.sector)) {
      return Status::error(EBADMSG, where + ": key " + std::to_string(key.seq) + " (sectors " +
                                        std::to_string(key.sector) + "+" + std::to_string(key.sectors) +
                                        ") lies beyond the end of the backing device (" +
                                        std::to_string(device_sectors) + " sectors); refusing to serve possibly wrong data");
    }
    if (key.kind == format::KeyKind::Discard) {
      if (key.seq >= clean_horizon_) {
        index_.discard(key.sector, key.sectors, key.seq);
        pending_discards_.add(key.sector, key.sectors, key.seq);
      } else {
        index_.remove(key.sector, key.sectors, key.seq);
      }
      continue;
    }
    if (key.kind == format::KeyKind::Zero) {
      index_.insert(key.sector, key.sectors, 0, key.seq, Extent::kZero);
      continue;
    }
    // (A checksum key names the place of its data key's data, and is skipped with it: the CRC is
    // not that of what the reused segment holds there now.)
    if (superseded(key)) continue;
    if (key.kind == format::KeyKind::Checksum) {
      // It follows its data key, which was checked just before; one that does not fit is ignored
      // (it could only make a read fail, never serve wrong data).
      const bool fits = key.segment < superblock_.segment_count &&
                        (uint64_t{key.offset_sectors} + key.sectors) * format::kSectorSize <= superblock_.segment_size;
      if (fits) {
        checksums_.add(superblock_.segment_offset(key.segment) + uint64_t{key.offset_sectors} * format::kSectorSize,
                       key.sectors, static_cast<uint32_t>(key.sector));
      }
      continue;
    }
    if (!in_place(key)) {
      // A segment's new generation is durable before any key names it, and GC retires a segment
      // that live keys still name before it reuses it: a durable key whose segment does not
      // carry its generation is damage, not a crash.
      const std::string why = !in_range(key)                 ? "points outside its segment"
                              : header_damaged[key.segment] ? "points into segment " + std::to_string(key.segment) +
                                                                   ", whose header is damaged"
                                                             : "points into segment " + std::to_string(key.segment) +
                                                                   ", which does not hold its data any more";
      return Status::error(EBADMSG, where + ": key " + std::to_string(key.seq) + " (sectors " +
                                        std::to_string(key.sector) + "+" + std::to_string(key.sectors) + ") " + why +
                                        "; refusing to serve possibly wrong data");
    }
    const uint64_t location = superblock_.segment_offset(key.segment) + uint64_t{key.offset_sectors} * format::kSectorSize;
    index_.insert(key.sector, key.sectors, location, key.seq, 0);
    uint64_t& newest = data_segments[key.segment];
    newest = std::max(newest, key.seq);
  }
  restore_lost_ranges(control.lost);

  // Segment uses: journal chains, segments with replayed data, the rest free.
  for (const ReplayedJournal& journal : journals) {
    for (const ChainSegment& chain : journal.chain) {
      if (segments_->at(chain.segment).use != SegmentUse::Free) {
        return Status::error(EBADMSG, where + ": segment " + std::to_string(chain.segment) + " is in two journals");
      }
      segments_->at(chain.segment).use = SegmentUse::Journal;
    }
  }
  for (const auto& [segment, newest] : data_segments) {
    SegmentInfo& info = segments_->at(segment);
    if (info.use == SegmentUse::Journal) {
      return Status::error(EBADMSG, where + ": segment " + std::to_string(segment) + " is both data and journal");
    }
    info.use = SegmentUse::Data;
    info.sealed = true;
    info.max_dirty_seq = newest;
  }
  {
    // Oldest data first for GC, ordered by the newest key in each segment.
    std::vector<std::pair<uint64_t, uint32_t>> order;
    for (const auto& [segment, newest] : data_segments) order.emplace_back(newest, segment);
    std::sort(order.begin(), order.end());
    uint64_t rank = 0;
    for (const auto& [newest, segment] : order) segments_->at(segment).sealed_order = ++rank;
  }
  segments_->rebuild_free_list([this](uint32_t segment) { return segment_has_bad_block(segment); });

  for (const ReplayedJournal& replayed : journals) {
    JournalState& state = journals_[replayed.slot];
    std::lock_guard lock(state.mutex);
    state.in_use = true;
    state.active = false;
    state.chain.assign(replayed.chain.begin(), replayed.chain.end());
    state.relocation = replayed.relocation;
    state.published = replayed.end;
    state.cursor = {replayed.chain.front().segment, replayed.chain.front().generation,
                    static_cast<uint32_t>(format::kSegmentHeaderSize)};
  }
  next_seq_ = std::max(next_seq, control.clean_horizon);
  run_first_seq_ = next_seq_.load();
  recovered_keys_ = live.size();

  if (control.flags & format::ControlArea::kCleanShutdown) {
    pmem::PmemWriter writer = make_writer();
    control_->update(writer, [](format::ControlArea& c) { c.flags &= ~format::ControlArea::kCleanShutdown; });
  }
  return Status();
}

void Engine::restore_clean_data(const CleanCheckpoint& clean,
                                const std::function<bool(uint32_t segment, uint32_t generation)>& holds_data_of,
                                std::map<uint32_t, uint64_t>& data_segments) {
  uint64_t kept = 0;
  size_t dropped = 0;
  for (const format::CheckpointExtent& extent : clean.extents) {
    // (The decoder checked that the extent lies within its segment's data and the device.)
    const uint64_t offset = uint64_t{extent.offset_sectors} * format::kSectorSize;
    const uint64_t bytes = uint64_t{extent.sectors} * format::kSectorSize;
    // A bad block anywhere in the segment keeps it out: a segment with one is retired once
    // nothing lives in it, which restoring clean data into it would put off for good.
    if (!holds_data_of(extent.segment, extent.generation) || segment_has_bad_block(extent.segment)) {
      ++dropped;  // read from the backing device again instead
      continue;
    }
    // As a fill: a clean copy, which every key wins over.
    index_.insert(extent.sector, extent.sectors, superblock_.segment_offset(extent.segment) + offset, 0, Extent::kFill);
    data_segments.try_emplace(extent.segment, 0);
    kept += bytes;
  }
  restored_clean_bytes_ = kept;
  spdlog::info("cache on {}: {} of clean data restored from the checkpoint ({} extents{})", options_.region_path,
               format_size(kept), clean.extents.size() - dropped,
               dropped == 0 ? std::string()
                            : ", " + std::to_string(dropped) + " dropped: their segment was damaged, reused or has a "
                                                               "bad block");
}

void Engine::restore_lost_ranges(std::span<const format::LostRange> lost) {
  if (lost.empty()) return;
  uint64_t sectors = 0;
  for (const format::LostRange& range : lost) {
    // No data behind it: what was lost was unreadable, and its segment may be reused.
    index_.insert(range.sector, range.sectors, 0, range.seq, Extent::kZero | Extent::kLost);
    sectors += range.sectors;
  }
  spdlog::warn("cache on {}: {} range(s), {} sectors in all (the first at sector {}), hold dirty data a media error "
               "destroyed before it was written back: reads of them fail with EIO until they are written again",
               options_.region_path, lost.size(), sectors, lost.front().sector);
}

}  // namespace pcached::cache

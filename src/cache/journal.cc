#include "cache/journal.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cassert>

#include "cache/segment_table.h"
#include "format/layout.h"
#include "format/segment_header.h"

namespace pcached::cache {

namespace {

constexpr uint32_t kReadAhead = 64 * 1024;
constexpr uint64_t kPageSize = 4096;  // the smallest unit a bad block takes away
constexpr size_t kLinkSize = format::encoded_key_set_size(0);

}  // namespace

void write_segment_header(pmem::PmemWriter& writer, const format::Superblock& superblock, uint32_t segment,
                          const format::SegmentHeader& header) {
  std::array<std::byte, format::kSegmentHeaderEncodedSize> bytes;
  format::encode_segment_header(header, superblock.salt(), bytes);
  writer.copy_nodrain(superblock.segment_offset(segment), bytes.data(), bytes.size());
}

Result<format::SegmentHeader> read_segment_header(const pmem::Region& region, const format::Superblock& superblock,
                                                  uint32_t segment) {
  std::array<std::byte, format::kSegmentHeaderEncodedSize> bytes;
  if (Status status = region.read(superblock.segment_offset(segment), bytes.data(), bytes.size()); !status.ok()) {
    return status;
  }
  auto header = format::decode_segment_header(bytes, superblock.salt());
  if (header.ok() && header->index != segment) {
    return Status::error(EBADMSG, "segment header: names segment " + std::to_string(header->index));
  }
  return header;
}

JournalReader::JournalReader(const pmem::Region& region, const format::Superblock& superblock, uint32_t slot,
                             JournalPosition start)
    : region_(region),
      superblock_(superblock),
      slot_(slot),
      position_(start),
      buffer_(std::make_unique_for_overwrite<std::byte[]>(kReadAhead)),
      read_size_(static_cast<uint32_t>(format::encoded_key_set_size(format::kMaxKeysPerSet))) {
  segments_.push_back({start.segment, start.generation, 0});
}

bool JournalReader::refill(uint32_t offset, uint64_t end) {
  uint32_t length = static_cast<uint32_t>(std::min<uint64_t>(read_size_, end - offset));
  read_size_ = std::min(read_size_ * 2, kReadAhead);
  const uint64_t at = superblock_.segment_offset(position_.segment) + offset;
  Status status = region_.read(at, buffer_.get(), length);
  if (!status.ok()) {
    const uint32_t to_page_end = static_cast<uint32_t>(kPageSize - at % kPageSize);
    if (to_page_end < length) {
      length = to_page_end;
      status = region_.read(at, buffer_.get(), length);
    }
  }
  if (!status.ok()) {
    end_ = JournalEnd::Damaged;
    damage_ = status.message();
    return false;
  }
  buffer_segment_ = position_.segment;
  buffer_offset_ = offset;
  buffer_length_ = length;
  return true;
}

void JournalReader::resume_at(uint32_t offset) {
  position_.offset = offset;
  end_ = JournalEnd::Clean;
  damage_.clear();
  buffer_segment_ = UINT32_MAX;
}

bool JournalReader::follow_link(uint32_t segment, uint32_t generation) {
  if (segment >= superblock_.segment_count) {
    end_ = JournalEnd::Damaged;
    damage_ = "link to segment " + std::to_string(segment) + ", beyond the last segment";
    return false;
  }
  // A journal only ever links to a segment it has just allocated, never to one already in its
  // chain: a link back is damage, and following it would read the same key sets forever.
  if (std::any_of(segments_.begin(), segments_.end(), [&](const ChainSegment& s) { return s.segment == segment; })) {
    end_ = JournalEnd::Damaged;
    damage_ = "journal " + std::to_string(slot_) + ", segment " + std::to_string(position_.segment) +
              ": link back to segment " + std::to_string(segment) + ", which the journal already went through";
    return false;
  }
  auto header = read_segment_header(region_, superblock_, segment);
  if (!header.ok() && header.status().code() != ENODATA) {
    end_ = JournalEnd::Damaged;
    damage_ = "journal segment " + std::to_string(segment) + ": " + header.status().message();
    return false;
  }
  if (!header.ok() || header->type != format::SegmentType::Journal || header->journal_slot != slot_ ||
      header->generation != generation) {
    // The link reached the media but the new segment's header did not: the write that needed
    // the new segment was never acknowledged. The journal ends here.
    return false;
  }
  position_ = {segment, generation, static_cast<uint32_t>(format::kSegmentHeaderSize)};
  segments_.push_back({segment, generation, 0});
  return true;
}

bool JournalReader::valid_record_follows() {
  // Key sets are written one after the other, each made durable before the next is begun, so
  // only the last one can be torn by a crash. A valid record after a bad one means damage.
  return find_key_set(region_, superblock_, position_.segment, position_.generation,
                      position_.offset + format::kKeySetAlignment, superblock_.segment_size)
      .has_value();
}

std::optional<FoundKeySet> find_key_set(const pmem::Region& region, const format::Superblock& superblock,
                                        uint32_t segment, uint32_t generation, uint64_t from, uint64_t end) {
  std::vector<format::Key> keys;
  std::vector<std::byte> record(format::encoded_key_set_size(format::kMaxKeysPerSet));
  end = std::min<uint64_t>(end, superblock.segment_size);
  from = (from + format::kKeySetAlignment - 1) / format::kKeySetAlignment * format::kKeySetAlignment;
  for (uint64_t offset = from; offset + format::kKeySetHeaderSize <= end; offset += format::kKeySetAlignment) {
    const uint64_t at = superblock.segment_offset(segment) + offset;
    size_t length = static_cast<size_t>(std::min<uint64_t>(record.size(), end - offset));
    if (!region.read(at, record.data(), length).ok()) {
      // A bad block after the record may leave the record itself readable.
      length = std::min<size_t>(length, kPageSize - at % kPageSize);
      if (!region.read(at, record.data(), length).ok()) continue;
    }
    keys.clear();
    auto header = format::decode_key_set(std::span(record.data(), length), generation, superblock.salt(), keys);
    if (header.ok()) return FoundKeySet{static_cast<uint32_t>(offset), *header, std::move(keys)};
  }
  return std::nullopt;
}

bool JournalReader::next(std::vector<format::Key>& keys, const JournalPosition* limit) {
  keys.clear();
  for (;;) {
    if (limit != nullptr && limit->segment == position_.segment && position_.offset >= limit->offset) return false;
    if (position_.offset + format::kKeySetHeaderSize > superblock_.segment_size) return false;
    // Never read past the limit: beyond it the journal's writer may be storing the next key set
    // right now (every key set before the limit is whole).
    const uint64_t readable_end = limit != nullptr && limit->segment == position_.segment
                                      ? uint64_t{limit->offset}
                                      : superblock_.segment_size;
    // The buffer must hold the largest key set that can start here (or all that is readable).
    const uint64_t needed_end =
        std::min<uint64_t>(position_.offset + format::encoded_key_set_size(format::kMaxKeysPerSet), readable_end);
    const bool buffered = buffer_segment_ == position_.segment && position_.offset >= buffer_offset_ &&
                          needed_end <= uint64_t{buffer_offset_} + buffer_length_;
    if (!buffered && !refill(position_.offset, readable_end)) return false;
    const uint32_t at = position_.offset - buffer_offset_;
    auto header = format::decode_key_set(std::span(buffer_.get() + at, buffer_length_ - at), position_.generation,
                                         superblock_.salt(), keys);
    if (!header.ok()) {
      if (header.status().code() != ENODATA) {
        end_ = valid_record_follows() ? JournalEnd::Damaged : JournalEnd::Torn;
        damage_ = "journal " + std::to_string(slot_) + ", segment " + std::to_string(position_.segment) +
                  ", offset " + std::to_string(position_.offset) + ": " + header.status().message();
      }
      return false;
    }
    if (header->kind == format::KeySetKind::Link) {
      if (!follow_link(header->link_segment, header->link_generation)) return false;
      continue;
    }
    last_record_ = position_;
    last_header_ = *header;
    position_.offset += static_cast<uint32_t>(format::encoded_key_set_size(keys.size()));
    segments_.back().max_seq = std::max(segments_.back().max_seq, keys.back().seq);
    return true;
  }
}

JournalWriter::JournalWriter(const pmem::Region& region, const format::Superblock& superblock, SegmentTable& segments,
                             JournalState& state, uint32_t slot)
    : region_(region),
      superblock_(superblock),
      segments_(segments),
      state_(state),
      slot_(slot),
      scratch_(kLinkSize) {}

Status JournalWriter::start(pmem::PmemWriter& writer, bool wait) {
  const auto segment = segments_.allocate(SegmentUse::Journal, wait);
  if (!segment) {
    return wait ? Status::error(ESHUTDOWN, "journal " + std::to_string(slot_) + ": cache is shutting down")
                : Status::error(ENOSPC, "journal " + std::to_string(slot_) + ": no free segment");
  }
  const uint32_t generation = segments_.info(*segment).generation;
  write_segment_header(writer, superblock_, *segment, {format::SegmentType::Journal, generation, *segment, slot_});
  writer.drain();
  position_ = {*segment, generation, static_cast<uint32_t>(format::kSegmentHeaderSize)};
  std::lock_guard lock(state_.mutex);
  state_.in_use = true;
  state_.active = true;
  state_.chain.assign(1, {*segment, generation, 0});
  state_.published = position_;
  state_.cursor = position_;
  return Status();
}

bool JournalWriter::fits(size_t bytes) const {
  // Room for the link behind the key set too, on good media: where a memory failure was reported
  // ahead, the link that moves on to a new segment is written where this set would have gone.
  return position_.offset + bytes + kLinkSize <= superblock_.segment_size &&
         !region_.overlaps_bad_range(superblock_.segment_offset(position_.segment) + position_.offset,
                                     bytes + kLinkSize);
}

bool JournalWriter::can_continue() const {
  return position_.offset + kLinkSize <= superblock_.segment_size &&
         !region_.overlaps_bad_range(superblock_.segment_offset(position_.segment) + position_.offset, kLinkSize);
}

bool JournalWriter::reserve(pmem::PmemWriter& writer, size_t bytes) {
  if (fits(bytes)) return true;
  return bytes + kLinkSize + format::kSegmentHeaderSize <= superblock_.segment_size && advance(writer, /*wait=*/false);
}

bool JournalWriter::advance(pmem::PmemWriter& writer, bool wait) {
  const auto segment = segments_.allocate(SegmentUse::Journal, wait);
  if (!segment) {
    assert(!wait);  // only shutdown makes a waiting allocation fail, and queues are gone by then
    return false;
  }
  const uint32_t generation = segments_.info(*segment).generation;
  // Ordering: the header is durable before the link, and the link no later than the key set that
  // needs it; the key sets in front of the link are durable before it. Replay then finds either
  // the old segment's end, or a link to a header it does not match (ending the journal before an
  // unacknowledged write), or a whole header: a torn header, or a torn set, followed by a valid
  // link reads as damage, and the cache would be refused. With none of this commit's sets staged,
  // those in front of the link are durable already and header and link are written now (the
  // caller's fence covers the link); otherwise they wait in the staged runs, each behind a fence.
  const uint64_t link_offset = superblock_.segment_offset(position_.segment) + position_.offset;
  const format::SegmentHeader header{format::SegmentType::Journal, generation, *segment, slot_};
  if (staged_runs_.empty()) {
    write_segment_header(writer, superblock_, *segment, header);
    writer.drain();
    const size_t size = format::encode_link(*segment, generation, position_.generation, superblock_.salt(), scratch_);
    writer.copy_nodrain(link_offset, scratch_.data(), size);
  } else {
    const size_t header_begin = staged_bytes_.size();
    staged_bytes_.resize(header_begin + format::kSegmentHeaderEncodedSize);
    format::encode_segment_header(
        header, superblock_.salt(),
        std::span(staged_bytes_).subspan(header_begin).first<format::kSegmentHeaderEncodedSize>());
    staged_runs_.push_back({superblock_.segment_offset(*segment), header_begin, format::kSegmentHeaderEncodedSize});
    const size_t link_begin = staged_bytes_.size();
    staged_bytes_.resize(link_begin + kLinkSize);
    const size_t size = format::encode_link(*segment, generation, position_.generation, superblock_.salt(),
                                            std::span(staged_bytes_).subspan(link_begin));
    staged_runs_.push_back({link_offset, link_begin, size});
  }
  {
    std::lock_guard lock(state_.mutex);
    state_.chain.back().max_seq = std::max(state_.chain.back().max_seq, segment_max_seq_);
    state_.chain.push_back({*segment, generation, 0});
  }
  segments_.seal(position_.segment, 0);
  position_ = {*segment, generation, static_cast<uint32_t>(format::kSegmentHeaderSize)};
  segment_max_seq_ = 0;
  return true;
}

void JournalWriter::stage(pmem::PmemWriter& writer, std::span<const format::Key> keys,
                          format::DataOrdering ordering) {
  for (size_t first = 0; first < keys.size(); first += format::kMaxKeysPerSet) {
    const auto set = keys.subspan(first, std::min<size_t>(format::kMaxKeysPerSet, keys.size() - first));
    const size_t size = format::encoded_key_set_size(set.size());
    if (!fits(size)) advance(writer);
    const uint64_t region_offset = superblock_.segment_offset(position_.segment) + position_.offset;
    const size_t begin = staged_bytes_.size();
    staged_bytes_.resize(begin + size);
    format::encode_keys(set, position_.generation, superblock_.salt(), std::span(staged_bytes_).subspan(begin, size),
                        ordering);
    staged_runs_.push_back({region_offset, begin, size});
    position_.offset += static_cast<uint32_t>(size);
    segment_max_seq_ = std::max(segment_max_seq_, set.back().seq);
  }
}

void JournalWriter::write_staged(pmem::PmemWriter& writer) {
  for (size_t i = 0; i < staged_runs_.size(); ++i) {
    // Each run durable before the next is begun (see advance()): replay can then tell the torn
    // end of the journal, only ever its last record, from damage.
    if (i > 0) writer.drain();
    const StagedRun& run = staged_runs_[i];
    writer.copy_nodrain(run.region_offset, staged_bytes_.data() + run.begin, run.size);
  }
  staged_runs_.clear();
  staged_bytes_.clear();
}

void JournalWriter::publish(uint64_t last_seq) {
  std::lock_guard lock(state_.mutex);
  state_.published = position_;
  state_.chain.back().max_seq = std::max(state_.chain.back().max_seq, last_seq);
  state_.inflight_seq.store(0, std::memory_order_relaxed);
}

}  // namespace pcached::cache

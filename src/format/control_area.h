// The control area: the small, often rewritten state of a cache — where each journal starts, the
// clean horizon, whether the last shutdown was clean, which dirty data was lost to media errors.
// Two slots are written one after the other, so a torn write leaves the other intact.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "format/layout.h"
#include "pcached/status.h"

namespace pcached::format {

inline constexpr uint32_t kNoSegment = 0xFFFFFFFFu;

struct JournalHead {
  uint32_t segment = kNoSegment;  // first retained segment of the journal
  uint32_t generation = 0;        // that segment's generation when it joined the journal
  bool in_use() const { return segment != kNoSegment; }
  bool operator==(const JournalHead&) const = default;
};

// Dirty data of sectors [sector, sector + sectors), written by the key numbered seq, that writeback
// could not read (a media error): the backing device holds older data there, so the sectors must
// fail their reads until something newer is written over them.
struct LostRange {
  uint64_t sector = 0;
  uint32_t sectors = 0;
  uint64_t seq = 0;
  bool operator==(const LostRange&) const = default;
};

struct ControlArea {
  static constexpr uint32_t kCleanShutdown = 1u << 0;

  uint32_t flags = 0;
  uint64_t update_seq = 0;  // which slot is newer
  // Every key with a sequence number below this is clean: its data is on the backing device and
  // the backing device was flushed. Recovery replays only keys at or above it.
  uint64_t clean_horizon = 0;
  // New keys are numbered from at least this.
  uint64_t next_seq = 1;
  std::array<JournalHead, kMaxJournals> journals{};
  // Sorted by sector, disjoint, at most kMaxLostRanges, every seq below the clean horizon.
  std::vector<LostRange> lost;
  bool operator==(const ControlArea&) const = default;
};

// Encodes into a whole slot; returns how many of its bytes are used (the rest is not read back).
// control.lost holds at most kMaxLostRanges: callers merge a longer list down first
// (cache/lost_ranges.h), since dropping a range would let its sectors read older data.
size_t encode_control_area(const ControlArea& control, uint32_t salt, std::span<std::byte, kControlSlotBytes> out);
Result<ControlArea> decode_control_area(std::span<const std::byte, kControlSlotBytes> in, uint32_t salt);

// Given both slots as read from the media, the current state (the valid slot with the higher
// update sequence) and the index of that slot; an error naming both slots' damage otherwise.
struct CurrentControl {
  ControlArea control;
  unsigned slot;
};
Result<CurrentControl> pick_current_control(const Result<ControlArea>& slot0, const Result<ControlArea>& slot1);

}  // namespace pcached::format

#include "format/control_area.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "format/crc32c.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 4;

uint32_t checksum(std::span<const std::byte> bytes, uint32_t salt) {
  return crc32c_skipping_field(salt, bytes.data(), kControlSize, kCrcOffset);
}

// The lost ranges' own checksum, which the slot's checksum covers (it sits in the slot's header):
// a slot torn in its list of lost ranges is refused as a whole.
uint32_t lost_checksum(const std::byte* table, size_t count, uint32_t salt) {
  return crc32c(salt, table, count * kLostRangeSize);
}

}  // namespace

size_t encode_control_area(const ControlArea& control, uint32_t salt, std::span<std::byte, kControlSlotBytes> out) {
  assert(control.lost.size() <= kMaxLostRanges);
  const size_t count = std::min(control.lost.size(), kMaxLostRanges);  // the slot's bound, with NDEBUG too
  const size_t used = kControlSize + count * kLostRangeSize;
  std::fill(out.begin(), out.begin() + static_cast<ptrdiff_t>(used), std::byte{0});
  FieldWriter table(out.data() + kControlSize);
  for (size_t i = 0; i < count; ++i) {
    table.put<uint64_t>(control.lost[i].sector).put<uint32_t>(control.lost[i].sectors).skip(4).put<uint64_t>(control.lost[i].seq);
  }
  FieldWriter w(out.data());
  w.put<uint32_t>(kControlMagic)
      .put<uint32_t>(0)  // crc
      .put<uint32_t>(kFormatVersion)
      .put<uint32_t>(control.flags)
      .put<uint64_t>(control.update_seq)
      .put<uint64_t>(control.clean_horizon)
      .put<uint64_t>(control.next_seq)
      .put<uint32_t>(static_cast<uint32_t>(count))
      .put<uint32_t>(lost_checksum(out.data() + kControlSize, count, salt));
  for (const JournalHead& head : control.journals) w.put<uint32_t>(head.segment).put<uint32_t>(head.generation);
  store_le<uint32_t>(out.data() + kCrcOffset, checksum(out, salt));
  return used;
}

Result<ControlArea> decode_control_area(std::span<const std::byte, kControlSlotBytes> in, uint32_t salt) {
  FieldReader r(in.data());
  if (r.get<uint32_t>() != kControlMagic) return Status::error(EBADMSG, "no control-area magic");
  const uint32_t stored_crc = r.get<uint32_t>();
  if (stored_crc != checksum(in, salt)) return Status::error(EBADMSG, "checksum mismatch (torn, damaged, or from an earlier format)");
  const uint32_t version = r.get<uint32_t>();
  // The layout is the same in every version so far; a cache being upgraded still has older slots.
  if (version == 0 || version > kFormatVersion) {
    return Status::error(EBADMSG, "control-area version " + std::to_string(version));
  }
  ControlArea control;
  control.flags = r.get<uint32_t>();
  control.update_seq = r.get<uint64_t>();
  control.clean_horizon = r.get<uint64_t>();
  control.next_seq = r.get<uint64_t>();
  // (Zero in version 3 and earlier, which kept these 8 bytes reserved.)
  const uint32_t lost_count = r.get<uint32_t>();
  const uint32_t lost_crc = r.get<uint32_t>();
  for (JournalHead& head : control.journals) {
    head.segment = r.get<uint32_t>();
    head.generation = r.get<uint32_t>();
  }
  if (control.next_seq < control.clean_horizon) {
    return Status::error(EBADMSG, "next sequence " + std::to_string(control.next_seq) + " below the clean horizon " +
                                      std::to_string(control.clean_horizon));
  }
  if (lost_count > kMaxLostRanges) {
    return Status::error(EBADMSG, std::to_string(lost_count) + " lost ranges, more than " + std::to_string(kMaxLostRanges));
  }
  if (lost_crc != lost_checksum(in.data() + kControlSize, lost_count, salt)) {
    return Status::error(EBADMSG, "the list of lost ranges does not match its checksum (torn)");
  }
  FieldReader table(in.data() + kControlSize);
  for (uint32_t i = 0; i < lost_count; ++i) {
    LostRange& range = control.lost.emplace_back();
    range.sector = table.get<uint64_t>();
    range.sectors = table.get<uint32_t>();
    table.skip(4);
    range.seq = table.get<uint64_t>();
    const std::string which = "lost range " + std::to_string(i) + " (sectors " + std::to_string(range.sector) + "+" +
                              std::to_string(range.sectors) + ")";
    if (range.sectors == 0 || range.sector + range.sectors < range.sector) return Status::error(EBADMSG, which + " is empty or wraps");
    if (i > 0 && range.sector < control.lost[i - 1].sector + control.lost[i - 1].sectors) {
      return Status::error(EBADMSG, which + " is out of order or overlaps the one before");
    }
    if (range.seq == 0 || range.seq >= control.next_seq) {
      return Status::error(EBADMSG, which + ": key " + std::to_string(range.seq) + " was never numbered");
    }
  }
  return control;
}

Result<CurrentControl> pick_current_control(const Result<ControlArea>& slot0, const Result<ControlArea>& slot1) {
  if (slot0.ok() && slot1.ok()) {
    const bool second_newer = slot1.value().update_seq > slot0.value().update_seq;
    return CurrentControl{second_newer ? slot1.value() : slot0.value(), second_newer ? 1u : 0u};
  }
  if (slot0.ok()) return CurrentControl{slot0.value(), 0};
  if (slot1.ok()) return CurrentControl{slot1.value(), 1};
  return Status::error(EBADMSG, "control area: both slots are damaged (slot 0: " + slot0.status().message() +
                                    "; slot 1: " + slot1.status().message() + ")");
}

}  // namespace pcached::format

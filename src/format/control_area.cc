#include "format/control_area.h"

#include <algorithm>
#include <string>

#include "format/crc32c.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 4;

uint32_t checksum(std::span<const std::byte, kControlSize> bytes, uint32_t salt) {
  return crc32c_skipping_field(salt, bytes.data(), bytes.size(), kCrcOffset);
}

}  // namespace

void encode_control_area(const ControlArea& control, uint32_t salt, std::span<std::byte, kControlSize> out) {
  std::fill(out.begin(), out.end(), std::byte{0});
  FieldWriter w(out.data());
  w.put<uint32_t>(kControlMagic)
      .put<uint32_t>(0)  // crc
      .put<uint32_t>(kFormatVersion)
      .put<uint32_t>(control.flags)
      .put<uint64_t>(control.update_seq)
      .put<uint64_t>(control.clean_horizon)
      .put<uint64_t>(control.next_seq)
      .skip(8);
  for (const JournalHead& head : control.journals) w.put<uint32_t>(head.segment).put<uint32_t>(head.generation);
  store_le<uint32_t>(out.data() + kCrcOffset, checksum(out, salt));
}

Result<ControlArea> decode_control_area(std::span<const std::byte, kControlSize> in, uint32_t salt) {
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
  r.skip(8);
  for (JournalHead& head : control.journals) {
    head.segment = r.get<uint32_t>();
    head.generation = r.get<uint32_t>();
  }
  if (control.next_seq < control.clean_horizon) {
    return Status::error(EBADMSG, "next sequence " + std::to_string(control.next_seq) + " below the clean horizon " +
                                      std::to_string(control.clean_horizon));
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

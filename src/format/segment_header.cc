#include "format/segment_header.h"

#include <algorithm>
#include <array>
#include <string>

#include "format/crc32c.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 4;

uint32_t checksum(std::span<const std::byte, kSegmentHeaderEncodedSize> bytes, uint32_t salt) {
  return crc32c_skipping_field(salt, bytes.data(), bytes.size(), kCrcOffset);
}

}  // namespace

void encode_segment_header(const SegmentHeader& header, uint32_t salt,
                           std::span<std::byte, kSegmentHeaderEncodedSize> out) {
  std::fill(out.begin(), out.end(), std::byte{0});
  FieldWriter(out.data())
      .put<uint32_t>(kSegmentMagic)
      .put<uint32_t>(0)
      .put<uint32_t>(static_cast<uint32_t>(header.type))
      .put<uint32_t>(header.generation)
      .put<uint32_t>(header.index)
      .put<uint32_t>(header.journal_slot);
  store_le<uint32_t>(out.data() + kCrcOffset, checksum(out, salt));
}

Result<SegmentHeader> decode_segment_header(std::span<const std::byte, kSegmentHeaderEncodedSize> in, uint32_t salt) {
  FieldReader r(in.data());
  if (r.get<uint32_t>() != kSegmentMagic) return Status::error(ENODATA, "segment header: never written");
  const uint32_t stored_crc = r.get<uint32_t>();
  if (stored_crc != checksum(in, salt)) return Status::error(EBADMSG, "segment header: checksum mismatch");
  SegmentHeader header;
  const uint32_t type = r.get<uint32_t>();
  if (type > static_cast<uint32_t>(SegmentType::Journal)) {
    return Status::error(EBADMSG, "segment header: unknown type " + std::to_string(type));
  }
  header.type = static_cast<SegmentType>(type);
  header.generation = r.get<uint32_t>();
  header.index = r.get<uint32_t>();
  header.journal_slot = r.get<uint32_t>();
  if (header.journal_slot >= kMaxJournals) {
    return Status::error(EBADMSG, "segment header: journal slot " + std::to_string(header.journal_slot));
  }
  return header;
}

}  // namespace pcached::format

#include "format/superblock.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "format/crc32c.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 16;  // after magic (8), version (4), size (4)

uint32_t checksum(std::span<const std::byte, kSuperblockSize> bytes) {
  return crc32c_skipping_field(0, bytes.data(), bytes.size(), kCrcOffset);
}

Status invalid(const std::string& what) { return Status::error(EINVAL, "superblock: " + what); }

Status check_geometry(const Superblock& sb) {
  if (!valid_segment_size(sb.segment_size)) {
    return invalid("segment size " + std::to_string(sb.segment_size) + " is not " + kSegmentSizeRule);
  }
  if (sb.data_start != kDataStart) return invalid("data area starts at " + std::to_string(sb.data_start));
  if (sb.segment_count < kMinSegments) return invalid("only " + std::to_string(sb.segment_count) + " segments");
  if (sb.region_size < sb.data_start || (sb.region_size - sb.data_start) / sb.segment_size < sb.segment_count) {
    return invalid(std::to_string(sb.segment_count) + " segments do not fit in a region of " +
                   std::to_string(sb.region_size) + " bytes");
  }
  if (static_cast<uint32_t>(sb.mode) > static_cast<uint32_t>(CacheMode::Writearound)) {
    return invalid("unknown cache mode " + std::to_string(static_cast<uint32_t>(sb.mode)));
  }
  if (sb.backing.kind != BackingKind::File && sb.backing.kind != BackingKind::BlockDevice) {
    return invalid("unknown backing kind " + std::to_string(static_cast<uint32_t>(sb.backing.kind)));
  }
  if (!std::has_single_bit(sb.backing.logical_block_size) || sb.backing.logical_block_size < 512 ||
      sb.backing.logical_block_size > 4096) {
    return invalid("backing logical block size " + std::to_string(sb.backing.logical_block_size));
  }
  return Status();
}

}  // namespace

uint32_t Superblock::salt() const { return crc32c(0, uuid.data(), uuid.size()); }

void encode_superblock(const Superblock& sb, std::span<std::byte, kSuperblockSize> out) {
  std::fill(out.begin(), out.end(), std::byte{0});
  FieldWriter w(out.data());
  w.put_bytes(kSuperblockMagic, sizeof kSuperblockMagic)
      .put<uint32_t>(sb.version)
      .put<uint32_t>(kSuperblockSize)
      .put<uint32_t>(0)  // crc, filled below
      .put<uint32_t>(sb.flags)
      .put_bytes(sb.uuid.data(), sb.uuid.size())
      .put<uint64_t>(sb.created_unix)
      .put<uint64_t>(sb.region_size)
      .put<uint64_t>(sb.segment_size)
      .put<uint32_t>(sb.segment_count)
      .put<uint32_t>(static_cast<uint32_t>(sb.mode))
      .put<uint64_t>(sb.data_start)
      .put<uint32_t>(static_cast<uint32_t>(sb.backing.kind))
      .put<uint32_t>(sb.backing.logical_block_size)
      .put<uint64_t>(sb.backing.device)
      .put<uint64_t>(sb.backing.inode)
      .put<uint64_t>(sb.backing.size);
  store_le<uint32_t>(out.data() + kCrcOffset, checksum(out));
}

Result<Superblock> decode_superblock(std::span<const std::byte, kSuperblockSize> in) {
  if (std::all_of(in.begin(), in.end(), [](std::byte b) { return b == std::byte{0}; })) {
    return Status::error(kBlank, "superblock: blank (all zeros)");
  }
  if (std::memcmp(in.data(), kSuperblockMagic, sizeof kSuperblockMagic) != 0) {
    return Status::error(kForeign, "superblock: no pcached magic (the region holds something else)");
  }
  FieldReader r(in.data());
  r.skip(sizeof kSuperblockMagic);
  Superblock sb;
  sb.version = r.get<uint32_t>();
  const uint32_t size = r.get<uint32_t>();
  if (sb.version > kFormatVersion) {
    return Status::error(kNewerVersion, "superblock: format version " + std::to_string(sb.version) +
                                            " was written by a newer pcached; this build reads version " +
                                            std::to_string(kFormatVersion));
  }
  const uint32_t stored_crc = r.get<uint32_t>();
  if (sb.version == 0 || size != kSuperblockSize || stored_crc != checksum(in)) {
    return Status::error(kCorrupt, "superblock: checksum mismatch (torn or damaged)");
  }
  sb.flags = r.get<uint32_t>();
  r.get_bytes(sb.uuid.data(), sb.uuid.size());
  sb.created_unix = r.get<uint64_t>();
  sb.region_size = r.get<uint64_t>();
  sb.segment_size = r.get<uint64_t>();
  sb.segment_count = r.get<uint32_t>();
  sb.mode = static_cast<CacheMode>(r.get<uint32_t>());
  sb.data_start = r.get<uint64_t>();
  sb.backing.kind = static_cast<BackingKind>(r.get<uint32_t>());
  sb.backing.logical_block_size = r.get<uint32_t>();
  sb.backing.device = r.get<uint64_t>();
  sb.backing.inode = r.get<uint64_t>();
  sb.backing.size = r.get<uint64_t>();
  if (Status geometry = check_geometry(sb); !geometry.ok()) return geometry;
  return sb;
}

}  // namespace pcached::format

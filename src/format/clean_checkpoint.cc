#include "format/clean_checkpoint.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "format/crc32c.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 4;

uint32_t header_checksum(std::span<const std::byte, kCheckpointHeaderSize> bytes, uint32_t salt) {
  return crc32c_skipping_field(salt, bytes.data(), bytes.size(), kCrcOffset);
}

std::string describe(size_t i, const CheckpointExtent& extent) {
  return "checkpoint extent " + std::to_string(i) + " (sectors " + std::to_string(extent.sector) + "+" +
         std::to_string(extent.sectors) + ")";
}

}  // namespace

std::vector<std::byte> encode_checkpoint_extents(std::span<const CheckpointExtent> extents) {
  assert(extents.size() <= kMaxCheckpointExtents);
  std::vector<std::byte> bytes(extents.size() * kCheckpointExtentSize);
  FieldWriter w(bytes.data());
  for (const CheckpointExtent& extent : extents) {
    w.put<uint64_t>(extent.sector)
        .put<uint32_t>(extent.sectors)
        .put<uint32_t>(extent.segment)
        .put<uint32_t>(extent.offset_sectors)
        .put<uint32_t>(extent.generation);
  }
  return bytes;
}

CheckpointHeader describe_checkpoint_extents(std::span<const std::byte> extent_bytes, uint64_t control_update_seq,
                                             uint32_t salt) {
  return {control_update_seq, extent_bytes.size() / kCheckpointExtentSize,
          crc32c(salt, extent_bytes.data(), extent_bytes.size())};
}

void encode_checkpoint_header(const CheckpointHeader& header, uint32_t salt,
                              std::span<std::byte, kCheckpointHeaderSize> out) {
  FieldWriter(out.data())
      .put<uint32_t>(kCheckpointMagic)
      .put<uint32_t>(0)  // crc
      .put<uint32_t>(kFormatVersion)
      .put<uint32_t>(static_cast<uint32_t>(kCheckpointExtentSize))
      .put<uint64_t>(header.control_update_seq)
      .put<uint64_t>(header.extent_count)
      .put<uint32_t>(header.extents_crc)
      .skip(4);
  store_le<uint32_t>(out.data() + kCrcOffset, header_checksum(out, salt));
}

Result<CheckpointHeader> decode_checkpoint_header(std::span<const std::byte, kCheckpointHeaderSize> in, uint32_t salt) {
  FieldReader r(in.data());
  if (r.get<uint32_t>() != kCheckpointMagic) return Status::error(ENODATA, "no clean checkpoint");
  if (r.get<uint32_t>() != header_checksum(in, salt)) {
    return Status::error(EBADMSG, "clean checkpoint header: checksum mismatch (torn, or from another cache)");
  }
  const uint32_t version = r.get<uint32_t>();
  if (version == 0 || version > kFormatVersion) {
    return Status::error(EBADMSG, "clean checkpoint of format version " + std::to_string(version));
  }
  if (const uint32_t extent_size = r.get<uint32_t>(); extent_size != kCheckpointExtentSize) {
    return Status::error(EBADMSG, "clean checkpoint with " + std::to_string(extent_size) + "-byte extents");
  }
  CheckpointHeader header;
  header.control_update_seq = r.get<uint64_t>();
  header.extent_count = r.get<uint64_t>();
  header.extents_crc = r.get<uint32_t>();
  if (header.extent_count > kMaxCheckpointExtents) {
    return Status::error(EBADMSG, "clean checkpoint of " + std::to_string(header.extent_count) +
                                      " extents, more than the " + std::to_string(kMaxCheckpointExtents) +
                                      " it can hold");
  }
  return header;
}

Result<std::vector<CheckpointExtent>> decode_checkpoint_extents(const CheckpointHeader& header,
                                                                std::span<const std::byte> in, uint32_t salt,
                                                                const CheckpointBounds& bounds) {
  if (header.extent_count > kMaxCheckpointExtents || in.size() != header.extent_count * kCheckpointExtentSize) {
    return Status::error(EBADMSG, "clean checkpoint: " + std::to_string(in.size()) + " bytes for " +
                                      std::to_string(header.extent_count) + " extents");
  }
  if (crc32c(salt, in.data(), in.size()) != header.extents_crc) {
    return Status::error(EBADMSG, "clean checkpoint: the extents do not match their checksum (torn or damaged)");
  }
  const uint64_t first_data_sector = kSegmentHeaderSize / kSectorSize;
  const uint64_t segment_sectors = bounds.segment_size / kSectorSize;
  std::vector<CheckpointExtent> extents(header.extent_count);
  FieldReader r(in.data());
  for (size_t i = 0; i < extents.size(); ++i) {
    CheckpointExtent& extent = extents[i];
    extent.sector = r.get<uint64_t>();
    extent.sectors = r.get<uint32_t>();
    extent.segment = r.get<uint32_t>();
    extent.offset_sectors = r.get<uint32_t>();
    extent.generation = r.get<uint32_t>();
    if (extent.sectors == 0 || extent.sector >= bounds.device_sectors ||
        extent.sectors > bounds.device_sectors - extent.sector) {
      return Status::error(EBADMSG, describe(i, extent) + " is empty or lies beyond the device");
    }
    if (i > 0 && extent.sector < extents[i - 1].sector + extents[i - 1].sectors) {
      return Status::error(EBADMSG, describe(i, extent) + " is out of order or overlaps the one before");
    }
    if (extent.segment >= bounds.segment_count || extent.offset_sectors < first_data_sector ||
        uint64_t{extent.offset_sectors} + extent.sectors > segment_sectors) {
      return Status::error(
          EBADMSG, describe(i, extent) + " points outside the data of segment " + std::to_string(extent.segment));
    }
  }
  return extents;
}

}  // namespace pcached::format

#include "cache/clean_checkpoint.h"

#include <spdlog/spdlog.h>

#include <array>

#include "format/layout.h"

namespace pcached::cache {

CheckpointRead read_clean_checkpoint(const pmem::Region& region, const format::Superblock& superblock,
                                     uint64_t device_sectors) {
  std::array<std::byte, format::kCheckpointHeaderSize> header_bytes;
  if (Status status = region.read(format::kScratchOffset, header_bytes.data(), header_bytes.size()); !status.ok()) {
    spdlog::warn(
        "pmem region {}: the clean checkpoint cannot be read ({}); the clean data is read again from the backing "
        "device as it is used",
        region.path(), status.message());
    return {true, std::nullopt};
  }
  auto header = format::decode_checkpoint_header(header_bytes, superblock.salt());
  if (!header.ok()) {
    if (header.status().code() == ENODATA) return {};
    spdlog::warn("pmem region {}: {}; it is ignored", region.path(), header.status().message());
    return {true, std::nullopt};
  }
  std::vector<std::byte> extent_bytes(header->extent_count * format::kCheckpointExtentSize);
  // (An empty vector's data() may be null, which the region's memcpy must not see.)
  Status status = extent_bytes.empty()
                      ? Status()
                      : region.read(format::kCheckpointExtentsOffset, extent_bytes.data(), extent_bytes.size());
  const format::CheckpointBounds bounds{superblock.segment_count, superblock.segment_size, device_sectors};
  auto extents = status.ok()
                     ? format::decode_checkpoint_extents(header.value(), extent_bytes, superblock.salt(), bounds)
                     : Result<std::vector<format::CheckpointExtent>>(status);
  if (!extents.ok()) {
    spdlog::warn("pmem region {}: {}; the clean checkpoint is ignored", region.path(), extents.status().message());
    return {true, std::nullopt};
  }
  return {true, CleanCheckpoint{header.value(), std::move(extents.value())}};
}

void erase_clean_checkpoint(pmem::PmemWriter& writer) {
  writer.fill_nodrain(format::kScratchOffset, 0, format::kCheckpointHeaderSize);
  writer.drain();
}

void write_clean_checkpoint(pmem::PmemWriter& writer, const format::Superblock& superblock,
                            std::span<const format::CheckpointExtent> extents, uint64_t control_update_seq) {
  const std::vector<std::byte> extent_bytes = format::encode_checkpoint_extents(extents);
  // Ordering: the extents durable before the header that vouches for them; a
  // cut before the header leaves the one the last attach erased, a cut in it a
  // header that fails its checksum.
  if (!extent_bytes.empty())
    writer.copy_persist(format::kCheckpointExtentsOffset, extent_bytes.data(), extent_bytes.size());
  std::array<std::byte, format::kCheckpointHeaderSize> header_bytes;
  format::encode_checkpoint_header(
      format::describe_checkpoint_extents(extent_bytes, control_update_seq, superblock.salt()), superblock.salt(),
      header_bytes);
  writer.copy_persist(format::kScratchOffset, header_bytes.data(), header_bytes.size());
}

}  // namespace pcached::cache

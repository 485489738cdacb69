// The clean checkpoint: where the clean data of a cache lay when it was
// detached on purpose, so that the next attach starts with it cached. Replay
// rebuilds only dirty data (keys above the clean horizon); without this,
// everything already written back, and everything read into the cache, would be
// gone from the index after every restart.
//
// It holds clean data only, so it is an optimisation that can always be
// dropped: whatever it names is also on the backing device. What it must never
// do is name data that is no longer current, hence (docs/format.md):
//   - it belongs to one state of the control area (the update sequence of the
//   update that
//     follows it): after any later update it is stale;
//   - every extent names its segment's generation, checked against the
//   segment's header;
//   - every attach erases it before the first store that could make it stale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/layout.h"
#include "pcached/status.h"

namespace pcached::format {

// [sector, sector + sectors) of the cached device holds the data at
// offset_sectors in segment `segment`, written there while the segment had
// `generation`.
struct CheckpointExtent {
  uint64_t sector = 0;
  uint32_t sectors = 0;
  uint32_t segment = 0;
  uint32_t offset_sectors = 0;
  uint32_t generation = 0;
  bool operator==(const CheckpointExtent&) const = default;
};

struct CheckpointHeader {
  uint64_t control_update_seq = 0;  // the control area's update sequence it belongs to
  uint64_t extent_count = 0;
  uint32_t extents_crc = 0;
  bool operator==(const CheckpointHeader&) const = default;
};

// What an extent must fit in: the cache's segments and its device.
struct CheckpointBounds {
  uint32_t segment_count = 0;
  uint64_t segment_size = 0;
  uint64_t device_sectors = 0;
};

// The extents' bytes (count * kCheckpointExtentSize) and the header that
// describes them. extents: sorted by sector, disjoint, at most
// kMaxCheckpointExtents.
std::vector<std::byte> encode_checkpoint_extents(std::span<const CheckpointExtent> extents);
CheckpointHeader describe_checkpoint_extents(std::span<const std::byte> extent_bytes, uint64_t control_update_seq,
                                             uint32_t salt);
void encode_checkpoint_header(const CheckpointHeader& header, uint32_t salt,
                              std::span<std::byte, kCheckpointHeaderSize> out);

// ENODATA where no checkpoint was ever written (or one was erased); EBADMSG for
// a damaged one.
Result<CheckpointHeader> decode_checkpoint_header(std::span<const std::byte, kCheckpointHeaderSize> in, uint32_t salt);
// The header's extents, from its extent_count * kCheckpointExtentSize bytes;
// EBADMSG unless they match its checksum, are sorted and disjoint, and each
// lies within its segment and the device.
Result<std::vector<CheckpointExtent>> decode_checkpoint_extents(const CheckpointHeader& header,
                                                                std::span<const std::byte> in, uint32_t salt,
                                                                const CheckpointBounds& bounds);

}  // namespace pcached::format

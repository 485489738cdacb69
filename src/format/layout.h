// The on-media layout of a pcached cache region: where every structure lives, how big it is, and
// its magic number. The prose is in docs/format.md. Everything is little-endian; every structure
// carries a CRC32C seeded with the cache's salt (derived from its UUID), so structures left over
// from an earlier format of the same region never validate.
//
//   0      4K     8K      12K     16K            2M               10M
//   | SB 0 | SB 1 | CTL 0 | CTL 1 | (reserved)  | copy calibration | segment 0 | segment 1 | ...
//                                               | scratch (8 MiB)  |
//
// A segment starts with a 4 KiB header block; a data segment holds request data after it, a
// journal segment holds key sets (64-byte aligned) after it.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "pcached/units.h"

namespace pcached::format {

// 2: key sets with data carry its digest (KeySetKind::HashedKeys), and data and key share a fence.
// 3: GC moves dirty data under keys of its own (KeyKind::Relocated) and records the segments it
// released with keys above the clean horizon (KeyKind::Retired): replay skips keys naming those.
// 4: the control area lists the dirty data writeback lost to media errors (LostRange), which
// must read as errors rather than as the older data of the backing device. A version 3 reader
// would ignore that list.
// An older cache is upgraded when it is attached (its key sets and control slots are still read as
// they are).
inline constexpr uint32_t kFormatVersion = 4;

inline constexpr uint64_t kBlockSize = 4096;
inline constexpr uint64_t kSectorSize = 512;
inline constexpr unsigned kSectorShift = 9;

// Superblock: two identical copies, written one after the other.
inline constexpr uint64_t kSuperblockOffsets[2] = {0, 4 * KiB};
inline constexpr size_t kSuperblockSize = 256;  // encoded bytes inside its 4 KiB block
inline constexpr char kSuperblockMagic[8] = {'P', 'C', 'A', 'C', 'H', 'E', 'D', '1'};

// Control area: two slots, the valid one with the higher update sequence is current.
inline constexpr uint64_t kControlOffsets[2] = {8 * KiB, 12 * KiB};
inline constexpr uint32_t kControlMagic = 0x4c544350;  // "PCTL"
inline constexpr uint32_t kMaxJournals = 64;
inline constexpr size_t kControlSize = 48 + kMaxJournals * 8;  // covered by the slot's checksum
// After it, the lost ranges (as many as the slot names, each 24 bytes), covered by a checksum of
// their own that the slot's checksum covers. A slot is kControlSlotBytes at most.
inline constexpr size_t kMaxLostRanges = 128;
inline constexpr size_t kLostRangeSize = 24;
inline constexpr size_t kControlSlotBytes = kControlSize + kMaxLostRanges * kLostRangeSize;
static_assert(kControlSlotBytes <= 4 * KiB);

inline constexpr uint64_t kScratchOffset = 2 * MiB;
inline constexpr uint64_t kScratchLength = 8 * MiB;

// The clean checkpoint (format/clean_checkpoint.h) lives in the scratch area between a detach and
// the next attach, which reads it before anything calibrates there: a header block, then extents.
inline constexpr uint32_t kCheckpointMagic = 0x504b4350;  // "PCKP"
inline constexpr size_t kCheckpointHeaderSize = 40;
inline constexpr size_t kCheckpointExtentSize = 24;
inline constexpr uint64_t kCheckpointExtentsOffset = kScratchOffset + kBlockSize;
inline constexpr uint64_t kMaxCheckpointExtents = (kScratchLength - kBlockSize) / kCheckpointExtentSize;
inline constexpr uint64_t kDataStart = kScratchOffset + kScratchLength;

// Segments.
inline constexpr uint64_t kMinSegmentSize = 1 * MiB;
inline constexpr uint64_t kMaxSegmentSize = 1 * GiB;
inline constexpr uint64_t kLargestDefaultSegmentSize = 16 * MiB;
// What a segment size must be (the superblock, a format, the daemon's configuration).
inline constexpr const char* kSegmentSizeRule = "a power of two between 1 MiB and 1 GiB";
constexpr bool valid_segment_size(uint64_t size) {
  return std::has_single_bit(size) && size >= kMinSegmentSize && size <= kMaxSegmentSize;
}
inline constexpr uint64_t kDefaultSegmentCount = 64;

// The segment size a format picks when none is given: about kDefaultSegmentCount segments, 1 MiB
// to 16 MiB. Several segments' worth is never log space (the journals, the open segment of each
// queue and of GC's moves, the free ones GC keeps for writers), and the smaller the log, the more
// of the data GC reclaims is still live and has to be written back and moved first. In the test
// VM, 4 KiB random writes over 128 MiB in a 352 MiB cache wrote back ~200 MiB and moved ~280 MiB
// per three jobs in 22 segments of 16 MiB; in 91 segments of 4 MiB, ~100 MiB each.
constexpr uint64_t default_segment_size(uint64_t region_size) {
  const uint64_t data = region_size > kDataStart ? region_size - kDataStart : 0;
  return std::clamp(std::bit_floor(std::max<uint64_t>(data / kDefaultSegmentCount, 1)), kMinSegmentSize,
                    kLargestDefaultSegmentSize);
}
inline constexpr uint64_t kSegmentHeaderSize = kBlockSize;
inline constexpr uint32_t kSegmentMagic = 0x47455350;  // "PSEG"
inline constexpr size_t kSegmentHeaderEncodedSize = 32;

// Key sets: a 32-byte header and 32-byte keys, padded to whole cache lines.
inline constexpr uint32_t kKeySetMagic = 0x534b4350;  // "PCKS"
inline constexpr size_t kKeySetHeaderSize = 32;
inline constexpr size_t kKeySize = 32;
inline constexpr size_t kKeySetAlignment = 64;
inline constexpr uint16_t kMaxKeysPerSet = 127;  // 32 + 127 * 32 = 4096 bytes

// The smallest region that can hold a cache: the fixed area plus a handful of segments.
inline constexpr uint32_t kMinSegments = 8;

}  // namespace pcached::format

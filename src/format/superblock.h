// The superblock: what this cache is (UUID, geometry, mode) and which backing device it belongs to.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "format/layout.h"
#include "pcached/status.h"

namespace pcached::format {

enum class BackingKind : uint32_t { File = 1, BlockDevice = 2 };

struct BackingRecord {
  BackingKind kind = BackingKind::File;
  uint32_t logical_block_size = 512;
  uint64_t device = 0;  // st_rdev of a block device, st_dev of a file
  uint64_t inode = 0;   // 0 for a block device
  uint64_t size = 0;    // bytes
  bool operator==(const BackingRecord&) const = default;
};

enum class CacheMode : uint32_t { Writeback = 0, Writethrough = 1, Writearound = 2 };

struct Superblock {
  // The operator accepted writeback on a region whose persistence domain may lose it.
  static constexpr uint32_t kAllowVolatileWriteback = 1u << 0;

  uint32_t version = kFormatVersion;
  uint32_t flags = 0;
  std::array<uint8_t, 16> uuid{};
  uint64_t created_unix = 0;
  uint64_t region_size = 0;
  uint64_t segment_size = kLargestDefaultSegmentSize;
  uint32_t segment_count = 0;
  CacheMode mode = CacheMode::Writeback;
  uint64_t data_start = kDataStart;
  BackingRecord backing;

  // Seed of every other structure's checksum: ties them to this format of the region.
  uint32_t salt() const;
  uint64_t segment_offset(uint32_t segment) const { return data_start + uint64_t{segment} * segment_size; }
  // The segment holding a region offset at or past data_start.
  uint32_t segment_at(uint64_t offset) const { return static_cast<uint32_t>((offset - data_start) / segment_size); }
  bool operator==(const Superblock&) const = default;
};

// Status codes of a superblock that does not decode, so that callers can tell the cases apart.
inline constexpr int kBlank = ENODATA;                // all zeros: never formatted
inline constexpr int kForeign = EMEDIUMTYPE;          // not a pcached superblock
inline constexpr int kCorrupt = EBADMSG;              // pcached magic, checksum wrong
inline constexpr int kNewerVersion = EPROTONOSUPPORT;  // made by a newer pcached

void encode_superblock(const Superblock& superblock, std::span<std::byte, kSuperblockSize> out);
Result<Superblock> decode_superblock(std::span<const std::byte, kSuperblockSize> in);

}  // namespace pcached::format

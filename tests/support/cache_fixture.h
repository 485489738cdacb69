// A cache on emulated pmem (a /dev/shm file at cache-line granularity) over a backing file, with
// data patterns that say which write put them there.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

#include "format/segment_header.h"
#include "format/superblock.h"
#include "frontend/sync_queue.h"
#include "pcached/cache.h"
#include "support/scratch_file.h"

namespace pcached::testing {

inline constexpr uint64_t kSector = 512;

inline constexpr uint32_t kTestSharedFenceClasses = 0b111000;  // 4, 8 and 16 KiB

struct CacheFiles {
  CacheFiles(uint64_t region_bytes, uint64_t backing_bytes) : region(region_bytes), backing(backing_bytes) {}
  ScratchFile region;
  ScratchFile backing;

  cache::CacheOptions options(bool format = false) const {
    cache::CacheOptions options;
    options.region_path = region.path();
    options.backing_path = backing.path();
    options.format = format;
    options.segment_size = 1 * MiB;
    options.copy_policy.spec = pmem::parse_policy_spec("nt").value();
    options.writeback_interval = std::chrono::milliseconds(1);
    // Tests write long sequential runs to fill the cache; the cutoff's own tests turn it on.
    options.tunables.sequential_cutoff = 0;
    // Writeback flat out, racing the foreground at every step; the pacing tests choose their own.
    options.tunables.writeback_rate = 0;
    // A /dev/shm file is a volatile/test region: writeback on it is the tests' explicit choice.
    options.allow_volatile_writeback = true;
    // The commit protocol fixed, not measured at every open (the measurement streams ~130 MiB
    // through the writer, which the persistence simulator records store by store): 4-16 KiB
    // commits share one fence with their key set, the rest fence their data first, about as this
    // machine measures; so every test runs both protocols.
    options.commit_shared_fence_classes = kTestSharedFenceClasses;
    return options;
  }
};

// Writeback paused (a rate limit whose bucket never refills, never idle): dirty data and pending
// discards stay as the test leaves them until it flushes, or the watermarks, GC or a full cache
// press.
inline cache::CacheOptions hold_writeback(cache::CacheOptions options) {
  options.tunables.writeback_rate = 1;
  options.tunables.writeback_idle_ms = 0;
  options.freeze_writeback_rate = true;
  return options;
}

inline std::unique_ptr<cache::Cache> open_cache(const cache::CacheOptions& options) {
  ForcedGranularity cache_line("CACHE_LINE");
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) throw std::runtime_error(cache.status().message());
  return std::move(cache.value());
}

inline std::unique_ptr<frontend::SyncQueue> make_queue(cache::Cache& cache) {
  auto queue = frontend::SyncQueue::create(cache);
  if (!queue.ok()) throw std::runtime_error(queue.status().message());
  return std::move(queue.value());
}

// Sector content that names its write: (write id, sector), then bytes derived from both.
inline void fill_sector(std::byte* sector_data, uint64_t write_id, uint64_t sector) {
  uint64_t words[kSector / 8];
  words[0] = write_id;
  words[1] = sector;
  uint64_t x = write_id * 0x9E3779B97F4A7C15ull ^ sector;
  for (size_t i = 2; i < kSector / 8; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    words[i] = x;
  }
  std::memcpy(sector_data, words, kSector);  // one copy: cheap in the sanitizer builds as well
}

inline std::vector<std::byte> pattern(uint64_t write_id, uint64_t sector, uint32_t sectors) {
  std::vector<std::byte> data(sectors * kSector);
  for (uint32_t i = 0; i < sectors; ++i) fill_sector(data.data() + i * kSector, write_id, sector + i);
  return data;
}

// The write id a sector holds, 0 for all zeros, UINT64_MAX for anything else (torn or wrong).
inline uint64_t decode_sector(const std::byte* sector_data, uint64_t sector) {
  uint64_t id = 0;
  std::memcpy(&id, sector_data, 8);
  if (id == 0) {
    // All zeros iff the sector equals itself shifted by a byte (one memcmp, not 512 loads).
    return std::memcmp(sector_data, sector_data + 1, kSector - 1) == 0 ? 0 : UINT64_MAX;
  }
  std::byte expected[kSector];
  fill_sector(expected, id, sector);
  return std::memcmp(expected, sector_data, kSector) == 0 ? id : UINT64_MAX;
}

inline std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<std::byte> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// Part of a file: checking a few sectors must not cost a read of the whole device.
inline std::vector<std::byte> read_file(const std::string& path, uint64_t offset, size_t length) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<std::byte> bytes(length);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(length));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

// A region file's superblock (one of its copies, decoded).
inline format::Superblock read_superblock(const std::string& region_path, unsigned copy = 0) {
  const std::vector<std::byte> bytes = read_file(region_path, format::kSuperblockOffsets[copy], format::kSuperblockSize);
  return format::decode_superblock(std::span<const std::byte, format::kSuperblockSize>(bytes.data(), bytes.size()))
      .value();
}

// What the next user of a released segment may leave in it at once: its own header (the
// generation after the one the image holds) and its own data over everything else. Returns what
// the segment was, or nothing if the image holds no valid header for it.
inline std::optional<format::SegmentType> overwrite_as_reused(std::vector<std::byte>& image,
                                                       const format::Superblock& superblock, uint32_t segment) {
  std::byte* start = image.data() + superblock.segment_offset(segment);
  const auto header = format::decode_segment_header(
      std::span<const std::byte, format::kSegmentHeaderEncodedSize>(start, format::kSegmentHeaderEncodedSize),
      superblock.salt());
  if (!header.ok()) return std::nullopt;
  std::memset(start, 0x5A, superblock.segment_size);
  format::encode_segment_header({format::SegmentType::Data, header.value().generation + 1, segment, 0}, superblock.salt(),
                                std::span<std::byte, format::kSegmentHeaderEncodedSize>(start, format::kSegmentHeaderEncodedSize));
  return header.value().type;
}

// Where the first copy of `sector` holding write `id`'s pattern lies in a region image.
inline std::optional<uint64_t> find_cached_sector(const std::vector<std::byte>& image, uint64_t sector, uint64_t id) {
  for (uint64_t offset = format::kDataStart; offset + kSector <= image.size(); offset += kSector) {
    if (decode_sector(image.data() + offset, sector) == id) return offset;
  }
  return std::nullopt;
}

// Tears that copy: one 8-byte word of it never reached the media. Returns where it is.
inline std::optional<uint64_t> tear_cached_sector(std::vector<std::byte>& image, uint64_t sector, uint64_t id) {
  const std::optional<uint64_t> offset = find_cached_sector(image, sector, id);
  if (offset) image[*offset + 264] ^= std::byte{0x40};
  return offset;
}

inline void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Writes bytes at offset into an existing file (a backing device image, say), leaving the rest.
inline void write_file_at(const std::string& path, uint64_t offset, std::span<const std::byte> bytes) {
  std::fstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

}  // namespace pcached::testing

// The region image the recovery fuzzer starts from: a small cache with dirty data in one journal,
// abandoned as in a crash, the same bytes in every process (fixed UUID, no timestamp, no backing
// identity), so that an input found in one run means the same thing in the next. Inputs patch
// it; reseal() can then make the patched structures' checksums right again, so the fuzzer gets
// past the CRCs to the checks behind them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "format/layout.h"
#include "pcached/cache.h"
#include "pcached/status.h"

namespace pcached::fuzz {

inline constexpr uint64_t kSegmentSize = 1 * MiB;
inline constexpr uint32_t kSegments = 12;
inline constexpr uint64_t kRegionBytes = format::kDataStart + kSegments * kSegmentSize;
inline constexpr uint64_t kBackingBytes = 8 * MiB;
// The first bytes of a segment: all a patch can reach, all reseal() looks at, and all that is
// restored between runs (the image's key sets and every header the engine writes are in it).
inline constexpr uint64_t kSegmentWindow = 64 * KiB;

// How the fuzzer opens the image: force, because the superblock names no backing identity.
cache::CacheOptions image_options(const std::string& region_path, const std::string& backing_path);

// Formats the region file (kRegionBytes) over the backing file (kBackingBytes), writes, writes
// zeroes and discards through one queue with writeback held off, and abandons the cache; then
// gives it the fixed identity and reseals it.
Status build_image(const std::string& region_path, const std::string& backing_path);

// Recomputes the checksum of every superblock copy, control slot, segment header and key set in
// the image (a mapping of the whole region) that has its magic, as pcached would have written
// it. Key sets are looked for in the first kSegmentWindow bytes of journal segments.
void reseal(std::span<std::byte> image);

// The parts of the image a patch names by its first byte.
struct PatchArea {
  uint64_t offset;
  uint64_t length;
};
PatchArea patch_area(uint8_t selector);

}  // namespace pcached::fuzz

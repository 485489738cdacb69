// CRC32C (Castagnoli), the checksum of every metadata structure on pmem. Hardware (SSE4.2 crc32)
// where the CPU has it, a table otherwise; both give the same values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pcached::format {

// Continues a CRC: crc32c(crc32c(0, a), b) == crc32c(0, a+b). Start with 0 (or a salt).
uint32_t crc32c(uint32_t crc, const void* data, size_t len);

// The checksum of an encoded structure that stores its own CRC at crc_offset: computed over all of
// it with that 4-byte field taken as zero.
uint32_t crc32c_skipping_field(uint32_t seed, const std::byte* data, size_t len, size_t crc_offset);

}  // namespace pcached::format

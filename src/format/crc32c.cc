#include "format/crc32c.h"

#include <cpuid.h>
#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace pcached::format {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t software(uint32_t crc, const unsigned char* p, size_t len) {
  for (size_t i = 0; i < len; ++i) crc = kTable[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

__attribute__((target("sse4.2"))) uint32_t hardware(uint32_t crc, const unsigned char* p, size_t len) {
  uint64_t wide = crc;
  while (len >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
    p += 8;
    len -= 8;
  }
  crc = static_cast<uint32_t>(wide);
  while (len-- > 0) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}

bool has_sse42() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_SSE4_2) != 0;
}

}  // namespace

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  static const bool use_hardware = has_sse42();
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  crc = use_hardware ? hardware(crc, bytes, len) : software(crc, bytes, len);
  return ~crc;
}

uint32_t crc32c_skipping_field(uint32_t seed, const std::byte* data, size_t len, size_t crc_offset) {
  static constexpr unsigned char kZeros[4] = {};
  uint32_t crc = crc32c(seed, data, crc_offset);
  crc = crc32c(crc, kZeros, sizeof kZeros);
  return crc32c(crc, data + crc_offset + sizeof kZeros, len - crc_offset - sizeof kZeros);
}

}  // namespace pcached::format

// The superblock decoder over any 256 bytes: a Superblock or a Status with one of the documented
// codes, never a crash; what decodes re-encodes to the same value.
//   input: [flags] [256 bytes, zero-filled if short]
//   flags bit 0: compute the checksum first, so the fuzzer reaches the field checks behind it.
#include <array>

#include "format/crc32c.h"
#include "format/endian.h"
#include "format/superblock.h"
#include "fuzz/fuzz_support.h"

using namespace pcached;
using namespace pcached::format;

namespace {

constexpr size_t kCrcOffset = 16;

void seal(std::array<std::byte, kSuperblockSize>& bytes) {
  store_le<uint32_t>(bytes.data() + kCrcOffset, crc32c_skipping_field(0, bytes.data(), bytes.size(), kCrcOffset));
}

Superblock example() {
  Superblock sb;
  sb.uuid = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  sb.created_unix = 1700000000;
  sb.region_size = kDataStart + 64 * MiB;
  sb.segment_size = 1 * MiB;
  sb.segment_count = 64;
  sb.backing = {BackingKind::BlockDevice, 4096, 0x0810, 0, 1 * GiB};
  return sb;
}

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "superblock");
  std::array<std::byte, kSuperblockSize> bytes;
  auto save = [&](const std::string& name, uint8_t flags) {
    seeds.write(name, fuzz::InputBuilder().u8(flags).bytes(bytes).data());
  };
  Superblock sb = example();
  encode_superblock(sb, bytes);
  save("valid", 0);
  bytes[100] ^= std::byte{0x40};
  save("damaged", 0);
  save("damaged-sealed", 1);
  sb.mode = CacheMode::Writearound;
  sb.backing = {BackingKind::File, 512, 0x803, 12345, 16 * MiB};
  encode_superblock(sb, bytes);
  save("file-writearound", 0);
  sb = example();
  sb.version = kFormatVersion + 1;
  encode_superblock(sb, bytes);
  save("newer", 0);
  sb = example();
  sb.version = 1;  // older: attached and upgraded
  encode_superblock(sb, bytes);
  save("version-1", 0);
  sb = example();
  sb.segment_size = 3 * MiB;
  encode_superblock(sb, bytes);
  save("bad-segment-size", 0);
  bytes.fill(std::byte{0});
  save("blank", 0);
  bytes.fill(std::byte{0x55});
  save("foreign", 0);
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::InputReader input(data, size);
  const uint8_t flags = input.u8();
  std::array<std::byte, kSuperblockSize> bytes;
  input.bytes(bytes.data(), bytes.size());
  if (flags & 1) seal(bytes);

  auto decoded = decode_superblock(bytes);
  if (!decoded.ok()) {
    const int code = decoded.status().code();
    FUZZ_CHECK(code == kBlank || code == kForeign || code == kCorrupt || code == kNewerVersion || code == EINVAL);
    FUZZ_CHECK(!decoded.status().message().empty());
    return 0;
  }
  const Superblock& sb = decoded.value();
  FUZZ_CHECK(sb.version >= 1 && sb.version <= kFormatVersion);
  FUZZ_CHECK(sb.segment_offset(sb.segment_count) <= sb.region_size);
  std::array<std::byte, kSuperblockSize> again;
  encode_superblock(sb, again);
  auto round_trip = decode_superblock(again);
  FUZZ_CHECK(round_trip.ok());
  FUZZ_CHECK(round_trip.value() == sb);
  return 0;
}

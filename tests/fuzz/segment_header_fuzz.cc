// The segment-header decoder over any 32 bytes: a header, ENODATA (never written) or EBADMSG, never
// a crash; what decodes re-encodes to the same value.
//   input: [flags] [salt, u32 LE] [32 bytes, zero-filled if short]
//   flags bit 0: compute the checksum first.
#include <array>

#include "format/crc32c.h"
#include "format/endian.h"
#include "format/segment_header.h"
#include "fuzz/fuzz_support.h"

using namespace pcached;
using namespace pcached::format;

namespace {

constexpr size_t kCrcOffset = 4;
using Bytes = std::array<std::byte, kSegmentHeaderEncodedSize>;

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "segment_header");
  constexpr uint32_t kSalt = 0x5eed;
  Bytes bytes;
  auto save = [&](const std::string& name, uint8_t flags) {
    seeds.write(name, fuzz::InputBuilder().u8(flags).u32(kSalt).bytes(bytes).data());
  };
  encode_segment_header({SegmentType::Data, 4, 11, 0}, kSalt, bytes);
  save("data", 0);
  encode_segment_header({SegmentType::Journal, 1, 3, 5}, kSalt, bytes);
  save("journal", 0);
  encode_segment_header({SegmentType::Free, 0, 0, 0}, kSalt, bytes);
  save("free", 0);
  bytes[8] = std::byte{7};  // unknown type
  save("unknown-type", 1);
  encode_segment_header({SegmentType::Journal, 1, 3, 64}, kSalt, bytes);
  save("slot-out-of-range", 0);
  bytes[0] = std::byte{0};
  save("no-magic", 0);
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::InputReader input(data, size);
  const uint8_t flags = input.u8();
  const uint32_t salt = input.u32();
  Bytes bytes;
  input.bytes(bytes.data(), bytes.size());
  if (flags & 1) {
    store_le<uint32_t>(bytes.data() + kCrcOffset, crc32c_skipping_field(salt, bytes.data(), bytes.size(), kCrcOffset));
  }
  auto decoded = decode_segment_header(bytes, salt);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == ENODATA || decoded.status().code() == EBADMSG);
    return 0;
  }
  FUZZ_CHECK(decoded.value().journal_slot < kMaxJournals);
  Bytes again;
  encode_segment_header(decoded.value(), salt, again);
  auto round_trip = decode_segment_header(again, salt);
  FUZZ_CHECK(round_trip.ok());
  FUZZ_CHECK(round_trip.value() == decoded.value());
  return 0;
}

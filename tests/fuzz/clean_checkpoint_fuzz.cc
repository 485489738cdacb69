// The clean-checkpoint decoder over any header and extents: each decodes or is
// refused (ENODATA for no header, EBADMSG otherwise); what decodes lies within
// the bounds, sorted and disjoint, and encodes back to the same bytes under the
// same header.
//   input: [flags] [salt, u32 LE] [segment count, u32 LE] [segment size shift,
//   u8]
//          [device sectors, u32 LE] [header, 40 bytes] [extents: the rest]
//   flags bit 0: give the header the extents' own count and checksum; bit 1:
//   seal its checksum.
#include <array>

#include "format/clean_checkpoint.h"
#include "format/crc32c.h"
#include "format/endian.h"
#include "fuzz/fuzz_support.h"

using namespace pcached;
using namespace pcached::format;

namespace {

using HeaderBytes = std::array<std::byte, kCheckpointHeaderSize>;

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "clean_checkpoint");
  constexpr uint32_t kSalt = 0x5eed1234;
  auto save = [&](const std::string& name, uint8_t flags, const HeaderBytes& header,
                  std::span<const std::byte> extents) {
    seeds.write(
        name,
        fuzz::InputBuilder().u8(flags).u32(kSalt).u32(16).u8(20).u32(1u << 20).bytes(header).bytes(extents).data());
  };
  const std::vector<CheckpointExtent> extents = {{0, 8, 0, 8, 1}, {64, 128, 3, 1024, 7}, {4096, 2040, 15, 8, 2}};
  const std::vector<std::byte> bytes = encode_checkpoint_extents(extents);
  HeaderBytes header;
  encode_checkpoint_header(describe_checkpoint_extents(bytes, 9, kSalt), kSalt, header);
  save("valid", 0, header, bytes);
  save("resealed", 3, header, bytes);
  std::vector<std::byte> torn = bytes;
  torn[30] ^= std::byte{4};
  save("extent-torn", 0, header, torn);
  save("erased", 0, HeaderBytes{}, bytes);
  const std::vector<CheckpointExtent> overlapping = {{0, 16, 0, 8, 1}, {8, 8, 1, 8, 1}};
  save("overlapping", 3, header, encode_checkpoint_extents(overlapping));
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::InputReader input(data, size);
  const uint8_t flags = input.u8();
  const uint32_t salt = input.u32();
  CheckpointBounds bounds;
  bounds.segment_count = input.u32();
  bounds.segment_size = uint64_t{1} << (20 + input.u8() % 11);  // 1 MiB to 1 GiB
  bounds.device_sectors = input.u32();
  HeaderBytes header_bytes;
  input.bytes(header_bytes.data(), header_bytes.size());
  const std::span<const std::byte> rest = input.rest();
  const std::span<const std::byte> whole = rest.first(rest.size() - rest.size() % kCheckpointExtentSize);
  if (flags & 3) {
    // Past the checksums, so that the checks behind them are reached.
    auto decoded = decode_checkpoint_header(header_bytes, salt);
    CheckpointHeader header = decoded.ok() ? decoded.value() : CheckpointHeader{};
    if (flags & 1)
      header = describe_checkpoint_extents(
          whole.first(std::min<size_t>(whole.size(), kMaxCheckpointExtents * kCheckpointExtentSize)),
          header.control_update_seq, salt);
    if (flags & 2) encode_checkpoint_header(header, salt, header_bytes);
  }
  auto header = decode_checkpoint_header(header_bytes, salt);
  if (!header.ok()) {
    FUZZ_CHECK(header.status().code() == ENODATA || header.status().code() == EBADMSG);
    return 0;
  }
  FUZZ_CHECK(header->extent_count <= kMaxCheckpointExtents);
  const std::span<const std::byte> in =
      rest.first(std::min<size_t>(rest.size(), header->extent_count * kCheckpointExtentSize));
  auto extents = decode_checkpoint_extents(header.value(), in, salt, bounds);
  if (!extents.ok()) {
    FUZZ_CHECK(extents.status().code() == EBADMSG);
    return 0;
  }
  FUZZ_CHECK(extents->size() == header->extent_count);
  for (size_t i = 0; i < extents->size(); ++i) {
    const CheckpointExtent& extent = extents.value()[i];
    FUZZ_CHECK(extent.sectors > 0 && extent.sector + extent.sectors <= bounds.device_sectors);
    FUZZ_CHECK(extent.segment < bounds.segment_count);
    FUZZ_CHECK(uint64_t{extent.offset_sectors} * kSectorSize >= kSegmentHeaderSize);
    FUZZ_CHECK((uint64_t{extent.offset_sectors} + extent.sectors) * kSectorSize <= bounds.segment_size);
    FUZZ_CHECK(i == 0 || extent.sector >= extents.value()[i - 1].sector + extents.value()[i - 1].sectors);
  }
  const std::vector<std::byte> again = encode_checkpoint_extents(extents.value());
  FUZZ_CHECK(std::equal(again.begin(), again.end(), in.begin(), in.end()));
  FUZZ_CHECK(describe_checkpoint_extents(again, header->control_update_seq, salt) == header.value());
  return 0;
}

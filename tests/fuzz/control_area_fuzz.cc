// The control-area decoder over any two slots, and the choice between them: each slot decodes or
// is refused with EBADMSG; what decodes re-encodes to the same value; the current slot is a valid
// one with the highest update sequence, and is refused only when neither slot is valid.
//   input: [flags] [salt, u32 LE] [slot 0, 3632 bytes] [slot 1, 3632 bytes] (zero-filled if short)
//   flags bit 0 / bit 1: compute slot 0's / slot 1's checksum first.
#include <array>

#include "format/control_area.h"
#include "format/crc32c.h"
#include "format/endian.h"
#include "fuzz/fuzz_support.h"

using namespace pcached;
using namespace pcached::format;

namespace {

constexpr size_t kCrcOffset = 4;
using Slot = std::array<std::byte, kControlSlotBytes>;

void seal(Slot& bytes, uint32_t salt) {
  store_le<uint32_t>(bytes.data() + kCrcOffset, crc32c_skipping_field(salt, bytes.data(), kControlSize, kCrcOffset));
}

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "control_area");
  constexpr uint32_t kSalt = 0x1234abcd;
  Slot slots[2];
  auto save = [&](const std::string& name, uint8_t flags) {
    seeds.write(name, fuzz::InputBuilder().u8(flags).u32(kSalt).bytes(slots[0]).bytes(slots[1]).data());
  };
  ControlArea control;
  control.update_seq = 7;
  control.clean_horizon = 100;
  control.next_seq = 250;
  control.journals[0] = {3, 9};
  control.journals[1] = {17, 2};
  encode_control_area(control, kSalt, slots[0]);
  control.update_seq = 8;
  control.next_seq = 260;
  control.flags = ControlArea::kCleanShutdown;
  encode_control_area(control, kSalt, slots[1]);
  save("both-valid", 0);
  slots[1][30] ^= std::byte{1};
  save("slot1-torn", 0);
  slots[0][0] = std::byte{0};
  save("both-damaged", 0);
  encode_control_area(control, kSalt + 1, slots[0]);
  save("other-salt", 0);
  control.lost = {{8, 8, 120}, {4096, 64, 200}};
  encode_control_area(control, kSalt, slots[0]);
  save("lost-ranges", 0);
  slots[0][kControlSize + 30] ^= std::byte{1};
  save("lost-ranges-torn", 0);
  control.lost.clear();
  control.next_seq = 50;  // below the horizon
  encode_control_area(control, kSalt, slots[0]);
  encode_control_area(ControlArea{}, kSalt, slots[1]);
  save("next-below-horizon", 0);
}

void check_slot(const Result<ControlArea>& decoded, uint32_t salt) {
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == EBADMSG);
    return;
  }
  const ControlArea& control = decoded.value();
  FUZZ_CHECK(control.next_seq >= control.clean_horizon);
  FUZZ_CHECK(control.lost.size() <= kMaxLostRanges);
  for (size_t i = 0; i < control.lost.size(); ++i) {
    FUZZ_CHECK(control.lost[i].sectors > 0 && control.lost[i].seq < control.next_seq);
    FUZZ_CHECK(i == 0 || control.lost[i].sector >= control.lost[i - 1].sector + control.lost[i - 1].sectors);
  }
  Slot again;
  encode_control_area(decoded.value(), salt, again);
  auto round_trip = decode_control_area(again, salt);
  FUZZ_CHECK(round_trip.ok());
  FUZZ_CHECK(round_trip.value() == decoded.value());
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::InputReader input(data, size);
  const uint8_t flags = input.u8();
  const uint32_t salt = input.u32();
  Slot slots[2];
  for (unsigned i = 0; i < 2; ++i) {
    input.bytes(slots[i].data(), slots[i].size());
    if (flags & (1u << i)) seal(slots[i], salt);
  }
  const Result<ControlArea> decoded[2] = {decode_control_area(slots[0], salt), decode_control_area(slots[1], salt)};
  for (const auto& slot : decoded) check_slot(slot, salt);

  auto current = pick_current_control(decoded[0], decoded[1]);
  if (!decoded[0].ok() && !decoded[1].ok()) {
    FUZZ_CHECK(!current.ok());
    return 0;
  }
  FUZZ_CHECK(current.ok());
  const unsigned slot = current.value().slot;
  FUZZ_CHECK(slot < 2 && decoded[slot].ok());
  FUZZ_CHECK(current.value().control == decoded[slot].value());
  FUZZ_CHECK(!decoded[slot ^ 1].ok() || decoded[slot ^ 1].value().update_seq <= current.value().control.update_seq);
  return 0;
}

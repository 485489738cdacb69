// The key-set decoder over any bytes: a key set or link, ENODATA (end of journal) or EBADMSG,
// never a crash and never a read past the span it was given. Keys are appended only on success;
// decoded keys satisfy what replay relies on (known kind, non-empty range that does not wrap,
// sequence numbers increasing from first_seq: strictly, but for a relocated or retired key, or a
// checksum after a relocated one, which may repeat the one before), and re-encode to the same
// record.
//   input: [flags] [salt, u32 LE] [journal generation, u32 LE] [record bytes: the rest]
//   flags bit 0: compute the record's checksum first (when its header makes a size of it).
#include <algorithm>
#include <vector>

#include "format/crc32c.h"
#include "format/endian.h"
#include "format/key_set.h"
#include "fuzz/fuzz_support.h"

using namespace pcached;
using namespace pcached::format;

namespace {

constexpr size_t kCrcOffset = 4;

// The checksum the record at the start of bytes would have, if its header names a size that fits.
void seal(std::vector<std::byte>& bytes, uint32_t salt) {
  if (bytes.size() < kKeySetHeaderSize) return;
  const uint16_t count = load_le<uint16_t>(bytes.data() + 12);
  const uint16_t kind = load_le<uint16_t>(bytes.data() + 14);
  const size_t keys = kind == static_cast<uint16_t>(KeySetKind::Keys) || kind == static_cast<uint16_t>(KeySetKind::HashedKeys)
                          ? count
                          : 0;
  if (kKeySetHeaderSize + keys * kKeySize > bytes.size()) return;
  store_le<uint32_t>(bytes.data() + kCrcOffset,
                     crc32c_skipping_field(salt, bytes.data(), kKeySetHeaderSize + keys * kKeySize, kCrcOffset));
}

void write_seeds(const char* root) {
  const fuzz::SeedDirectory seeds(root, "key_set");
  constexpr uint32_t kSalt = 0xfeed;
  constexpr uint32_t kGeneration = 3;
  auto save = [&](const std::string& name, uint8_t flags, std::span<const std::byte> record) {
    seeds.write(name, fuzz::InputBuilder().u8(flags).u32(kSalt).u32(kGeneration).bytes(record).data());
  };
  std::vector<std::byte> record(encoded_key_set_size(kMaxKeysPerSet));
  std::vector<Key> keys = {{100, 8, KeyKind::Write, 41, 2, 8, 5}};
  size_t size = encode_keys(keys, kGeneration, kSalt, record);
  save("one-key", 0, std::span(record.data(), size));
  keys.push_back({0, 1, KeyKind::Zero, 42, 0, 0, 0});
  keys.push_back({4096, kMaxKeySectors, KeyKind::Discard, 50, 0, 0, 0});
  keys.push_back({~0ull - 8, 8, KeyKind::Write, 51, 7, 2040, 1});
  size = encode_keys(keys, kGeneration, kSalt, record);
  save("four-keys", 0, std::span(record.data(), size));
  save("four-keys-truncated", 0, std::span(record.data(), size - 64));
  record[32 + 8] = std::byte{0x99};  // first key's sequence number
  save("four-keys-damaged", 0, std::span(record.data(), size));
  save("four-keys-first-seq-wrong", 1, std::span(record.data(), size));
  keys.clear();
  for (uint64_t i = 0; i < kMaxKeysPerSet; ++i) keys.push_back({i * 8, 8, KeyKind::Write, 1000 + i, 1, 8 + 8 * uint32_t(i), 1});
  size = encode_keys(keys, kGeneration, kSalt, record);
  save("full", 0, std::span(record.data(), size));
  keys = {{0, 1, KeyKind::Zero, 42, 0, 0, 0}, {4096, 64, KeyKind::Discard, 43, 0, 0, 0}};
  size = encode_keys(keys, kGeneration, kSalt, record);
  save("no-data-keys", 0, std::span(record.data(), size));  // a set without a digest
  size = encode_link(9, 4, kGeneration, kSalt, record);
  save("link", 0, std::span(record.data(), size));
  size = encode_link(9, 4, kGeneration - 1, kSalt, record);
  save("link-older-generation", 0, std::span(record.data(), size));
  save("empty", 0, {});
}

}  // namespace

PCACHED_FUZZ_SEEDS_FROM(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::InputReader input(data, size);
  const uint8_t flags = input.u8();
  const uint32_t salt = input.u32();
  const uint32_t generation = input.u32();
  // A copy of exactly the rest, so that ASan sees any read past the end of the span.
  std::vector<std::byte> record(input.rest().begin(), input.rest().end());
  if (flags & 1) seal(record, salt);

  // Keys of earlier records are already in the vector: a decode must leave them be.
  const std::vector<Key> earlier = {{1, 1, KeyKind::Write, 1, 0, 8, 1}, {2, 1, KeyKind::Zero, 2, 0, 0, 0}};
  std::vector<Key> keys = earlier;
  auto header = decode_key_set(record, generation, salt, keys);
  FUZZ_CHECK(std::equal(earlier.begin(), earlier.end(), keys.begin()));
  if (!header.ok()) {
    FUZZ_CHECK(header.status().code() == ENODATA || header.status().code() == EBADMSG);
    FUZZ_CHECK(keys.size() == earlier.size());
    return 0;
  }
  const std::span<const Key> decoded(keys.data() + earlier.size(), keys.size() - earlier.size());
  FUZZ_CHECK(header->journal_generation == generation);
  FUZZ_CHECK(encoded_key_set_size(decoded.size()) <= record.size());

  std::vector<std::byte> again(encoded_key_set_size(kMaxKeysPerSet));
  std::vector<Key> round_trip;
  if (header->kind == KeySetKind::Link) {
    FUZZ_CHECK(decoded.empty());
    const size_t encoded = encode_link(header->link_segment, header->link_generation, generation, salt, again);
    auto link = decode_key_set(std::span(again.data(), encoded), generation, salt, round_trip);
    FUZZ_CHECK(link.ok() && link->kind == KeySetKind::Link && round_trip.empty());
    FUZZ_CHECK(link->link_segment == header->link_segment && link->link_generation == header->link_generation);
    return 0;
  }
  FUZZ_CHECK(header->kind == KeySetKind::Keys || header->kind == KeySetKind::HashedKeys);
  FUZZ_CHECK(!decoded.empty() && decoded.size() == header->count && decoded.size() <= kMaxKeysPerSet);
  FUZZ_CHECK(decoded.front().seq == header->first_seq);
  for (size_t i = 0; i < decoded.size(); ++i) {
    const Key& key = decoded[i];
    FUZZ_CHECK(key.kind == KeyKind::Write || key.kind == KeyKind::Zero || key.kind == KeyKind::Discard ||
               key.kind == KeyKind::WrittenThrough || key.kind == KeyKind::Checksum ||
               key.kind == KeyKind::Relocated || key.kind == KeyKind::Retired);
    FUZZ_CHECK(key.sectors >= 1 && key.sectors <= kMaxKeySectors);
    FUZZ_CHECK(key.sector + key.sectors > key.sector);
    if (i > 0) {
      const bool may_repeat = key.kind == KeyKind::Relocated || key.kind == KeyKind::Retired ||
                              (key.kind == KeyKind::Checksum && decoded[i - 1].kind == KeyKind::Relocated);
      FUZZ_CHECK(key.seq > decoded[i - 1].seq || (may_repeat && key.seq == decoded[i - 1].seq));
    }
  }
  const size_t encoded = encode_keys(decoded, generation, salt, again);
  FUZZ_CHECK(encoded == encoded_key_set_size(decoded.size()));
  auto keys_again = decode_key_set(std::span(again.data(), encoded), generation, salt, round_trip);
  // Written again, a set with data keys carries a digest (of the hashes a writer would have set;
  // decoded keys have none), one without does not.
  const bool any_data = std::any_of(decoded.begin(), decoded.end(), [](const Key& key) { return has_data(key.kind); });
  FUZZ_CHECK(keys_again.ok() && keys_again->first_seq == header->first_seq);
  FUZZ_CHECK(keys_again->kind == (any_data ? KeySetKind::HashedKeys : KeySetKind::Keys));
  FUZZ_CHECK(std::equal(decoded.begin(), decoded.end(), round_trip.begin(), round_trip.end()));
  // Written with its data fenced first, the same keys make a set without a digest.
  encode_keys(decoded, generation, salt, again, DataOrdering::DataFirst);
  round_trip.clear();
  keys_again = decode_key_set(std::span(again.data(), encoded), generation, salt, round_trip);
  FUZZ_CHECK(keys_again.ok() && keys_again->kind == KeySetKind::Keys && keys_again->data_digest == 0);
  FUZZ_CHECK(std::equal(decoded.begin(), decoded.end(), round_trip.begin(), round_trip.end()));
  return 0;
}

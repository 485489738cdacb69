#include <catch2/catch.hpp>
// The format says XXH3-64: the reference implementation, inlined here, is the oracle.
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/clean_checkpoint.h"
#include "format/control_area.h"
#include "format/crc32c.h"
#include "format/data_hash.h"
#include "format/endian.h"
#include "format/key_set.h"
#include "format/segment_header.h"
#include "format/superblock.h"

using namespace pcached;
using namespace pcached::format;

namespace {

Superblock sample_superblock() {
  Superblock sb;
  for (size_t i = 0; i < sb.uuid.size(); ++i) sb.uuid[i] = static_cast<uint8_t>(i * 17 + 3);
  sb.created_unix = 1790000000;
  sb.region_size = 1 * GiB;
  sb.segment_size = 16 * MiB;
  sb.segment_count = static_cast<uint32_t>((sb.region_size - kDataStart) / sb.segment_size);
  sb.mode = CacheMode::Writeback;
  sb.backing = {BackingKind::BlockDevice, 4096, 0x10300, 0, 100 * GiB};
  return sb;
}

std::vector<Key> sample_keys(size_t n, uint64_t first_seq) {
  std::vector<Key> keys;
  for (size_t i = 0; i < n; ++i) {
    Key key;
    key.sector = 1000 + i * 8;
    key.sectors = static_cast<uint32_t>(8 + i);
    key.kind = i % 3 == 0 ? KeyKind::Write : (i % 3 == 1 ? KeyKind::Zero : KeyKind::Discard);
    key.seq = first_seq + i * 2;
    key.segment = static_cast<uint32_t>(i);
    key.offset_sectors = static_cast<uint32_t>(8 * i + 8);
    key.generation = 77;
    if (has_data(key.kind)) key.data_hash = 0x9E3779B97F4A7C15ull * (i + 1);
    keys.push_back(key);
  }
  return keys;
}

}  // namespace

TEST_CASE("crc32c matches the Castagnoli check value and composes", "[format][crc]") {
  const std::string check = "123456789";
  CHECK(crc32c(0, check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c(0, nullptr, 0) == 0);
  const uint32_t whole = crc32c(0, check.data(), check.size());
  CHECK(crc32c(crc32c(0, check.data(), 4), check.data() + 4, 5) == whole);
  std::vector<unsigned char> zeros(32, 0);
  CHECK(crc32c(0, zeros.data(), zeros.size()) == 0x8A9136AAu);  // RFC 3720 B.4
}

TEST_CASE("a superblock round-trips and every flipped byte is caught", "[format][superblock]") {
  const Superblock sb = sample_superblock();
  std::array<std::byte, kSuperblockSize> bytes;
  encode_superblock(sb, bytes);
  auto decoded = decode_superblock(bytes);
  REQUIRE(decoded.ok());
  CHECK(decoded.value() == sb);

  for (size_t i = 0; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= std::byte{0x40};
    auto damaged = decode_superblock(copy);
    INFO("byte " << i);
    REQUIRE_FALSE(damaged.ok());
    // Flips in the magic make it foreign, flips in the version may make it look newer; the rest
    // are checksum failures.
    if (i >= 16) CHECK(damaged.status().code() == kCorrupt);
  }
}

TEST_CASE("a superblock tells blank, foreign, newer and invalid apart", "[format][superblock]") {
  std::array<std::byte, kSuperblockSize> bytes{};
  CHECK(decode_superblock(bytes).status().code() == kBlank);

  std::memcpy(bytes.data(), "\x7f" "ELF", 4);
  CHECK(decode_superblock(bytes).status().code() == kForeign);

  Superblock newer = sample_superblock();
  newer.version = kFormatVersion + 1;
  encode_superblock(newer, bytes);
  auto refused = decode_superblock(bytes);
  CHECK(refused.status().code() == kNewerVersion);
  CHECK(refused.status().message().find("newer pcached") != std::string::npos);

  Superblock odd = sample_superblock();
  odd.segment_size = 3 * MiB;
  encode_superblock(odd, bytes);
  CHECK(decode_superblock(bytes).status().code() == EINVAL);

  Superblock overfull = sample_superblock();
  overfull.segment_count += 1;
  encode_superblock(overfull, bytes);
  CHECK(decode_superblock(bytes).status().message().find("do not fit") != std::string::npos);
}

TEST_CASE("the control area round-trips, is salted, and the newer valid slot wins", "[format][control]") {
  ControlArea a;
  a.update_seq = 7;
  a.clean_horizon = 100;
  a.next_seq = 150;
  a.flags = ControlArea::kCleanShutdown;
  a.journals[0] = {12, 3};
  a.journals[5] = {40, 9};
  a.lost = {{64, 8, 90}, {1000, 1, 120}};
  const uint32_t salt = 0xC0FFEE;
  std::array<std::byte, kControlSlotBytes> bytes;
  const size_t used = encode_control_area(a, salt, bytes);
  CHECK(used == kControlSize + 2 * kLostRangeSize);
  REQUIRE(decode_control_area(bytes, salt).ok());
  CHECK(decode_control_area(bytes, salt).value() == a);
  CHECK_FALSE(decode_control_area(bytes, salt + 1).ok());  // another format's control area

  // Every byte in use is checked, the lost ranges too (a slot torn there is refused whole).
  for (size_t i = 0; i < used; ++i) {
    auto copy = bytes;
    copy[i] ^= std::byte{1};
    INFO("byte " << i);
    CHECK_FALSE(decode_control_area(copy, salt).ok());
  }

  ControlArea b = a;
  b.update_seq = 8;
  b.clean_horizon = 120;
  auto current = pick_current_control(a, b);
  REQUIRE(current.ok());
  CHECK(current->slot == 1);
  CHECK(current->control.clean_horizon == 120);
  Result<ControlArea> broken = Status::error(EBADMSG, "checksum mismatch");
  CHECK(pick_current_control(a, broken)->slot == 0);
  CHECK(pick_current_control(broken, b)->slot == 1);
  auto neither = pick_current_control(broken, broken);
  REQUIRE_FALSE(neither.ok());
  CHECK(neither.status().message().find("both slots are damaged") != std::string::npos);
}

TEST_CASE("a control slot of version 3 reads with no lost ranges; a bad list of lost ranges is refused",
          "[format][control]") {
  const uint32_t salt = 0xC0FFEE;
  ControlArea control;
  control.clean_horizon = 100;
  control.next_seq = 150;
  control.journals[0] = {12, 3};
  std::array<std::byte, kControlSlotBytes> bytes{};
  // What version 3 wrote: its 560 bytes with bytes 40-47 reserved (zero), anything after them.
  encode_control_area(control, salt, bytes);
  std::fill(bytes.begin() + kControlSize, bytes.end(), std::byte{0xA5});
  store_le<uint32_t>(bytes.data() + 8, 3);
  store_le<uint32_t>(bytes.data() + 4, crc32c_skipping_field(salt, bytes.data(), kControlSize, 4));
  auto old = decode_control_area(bytes, salt);
  REQUIRE(old.ok());
  CHECK(old->lost.empty());
  CHECK(old->journals[0] == JournalHead{12, 3});

  auto refused = [&](std::vector<LostRange> lost) {
    ControlArea bad = control;
    bad.lost = std::move(lost);
    encode_control_area(bad, salt, bytes);
    auto decoded = decode_control_area(bytes, salt);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().code() == EBADMSG);
    return decoded.status().message();
  };
  CHECK(refused({{10, 0, 5}}).find("empty") != std::string::npos);
  CHECK(refused({{10, 8, 5}, {12, 8, 6}}).find("overlaps") != std::string::npos);
  CHECK(refused({{20, 8, 5}, {10, 8, 6}}).find("out of order") != std::string::npos);
  CHECK(refused({{10, 8, 150}}).find("never numbered") != std::string::npos);
  CHECK(refused({{UINT64_MAX - 2, 8, 5}}).find("wraps") != std::string::npos);
  // A count above the bound (the slot holds no more).
  encode_control_area(control, salt, bytes);
  store_le<uint32_t>(bytes.data() + 40, kMaxLostRanges + 1);
  store_le<uint32_t>(bytes.data() + 4, crc32c_skipping_field(salt, bytes.data(), kControlSize, 4));
  CHECK(decode_control_area(bytes, salt).status().message().find("more than") != std::string::npos);
}

TEST_CASE("segment headers round-trip and reject damage", "[format][segment]") {
  const SegmentHeader header{SegmentType::Journal, 41, 17, 3};
  std::array<std::byte, kSegmentHeaderEncodedSize> bytes;
  encode_segment_header(header, 99, bytes);
  CHECK(decode_segment_header(bytes, 99).value() == header);
  CHECK(decode_segment_header(bytes, 98).status().code() == EBADMSG);
  std::array<std::byte, kSegmentHeaderEncodedSize> zeros{};
  CHECK(decode_segment_header(zeros, 99).status().code() == ENODATA);
  for (size_t i = 4; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= std::byte{0x10};
    CHECK(decode_segment_header(copy, 99).status().code() == EBADMSG);
  }
}

TEST_CASE("key sets round-trip, pad to cache lines, and end or fail cleanly", "[format][keyset]") {
  const uint32_t salt = 1234, generation = 5;
  CHECK(encoded_key_set_size(1) == 64);
  CHECK(encoded_key_set_size(2) == 128);
  CHECK(encoded_key_set_size(kMaxKeysPerSet) == 4096);

  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{kMaxKeysPerSet}}) {
    INFO(n << " keys");
    const std::vector<Key> keys = sample_keys(n, 500);
    std::vector<std::byte> buffer(encoded_key_set_size(n) + 64, std::byte{0xEE});
    REQUIRE(encode_keys(keys, generation, salt, buffer) == encoded_key_set_size(n));
    std::vector<Key> decoded;
    auto header = decode_key_set(buffer, generation, salt, decoded);
    REQUIRE(header.ok());
    // Every sample has a write first: a set with data carries the digest of its data keys' hashes.
    CHECK(header->kind == KeySetKind::HashedKeys);
    std::vector<uint64_t> hashes;
    for (const Key& key : keys) {
      if (has_data(key.kind)) hashes.push_back(key.data_hash);
    }
    CHECK(header->data_digest == data_digest(hashes));
    CHECK(header->count == n);
    CHECK(decoded == keys);
    CHECK(decode_key_set(buffer, generation + 1, salt, decoded).status().code() == ENODATA);
  }

  const std::vector<Key> keys = sample_keys(3, 9);
  std::vector<std::byte> buffer(encoded_key_set_size(3));
  encode_keys(keys, generation, salt, buffer);
  for (size_t i = 0; i < buffer.size(); ++i) {
    auto copy = buffer;
    copy[i] ^= std::byte{0x08};
    std::vector<Key> out;
    auto damaged = decode_key_set(copy, generation, salt, out);
    INFO("byte " << i);
    REQUIRE_FALSE(damaged.ok());
    CHECK(out.empty());
  }
  std::vector<Key> out;
  CHECK(decode_key_set(std::span(buffer).first(100), generation, salt, out).status().code() == EBADMSG);
  std::vector<std::byte> zeros(64);
  CHECK(decode_key_set(zeros, generation, salt, out).status().code() == ENODATA);
}

namespace {

// A set encoded (generation 5, salt 6) as kind 1: the keys, and no digest.
void check_without_digest(std::span<const std::byte> buffer, const std::vector<Key>& keys) {
  std::vector<Key> decoded;
  auto header = decode_key_set(buffer, 5, 6, decoded);
  REQUIRE(header.ok());
  CHECK(header->kind == KeySetKind::Keys);
  CHECK(header->data_digest == 0);
  CHECK(decoded == keys);
}

}  // namespace

TEST_CASE("GC's moved and retired keys may repeat a sequence number; nothing else may", "[format][keyset]") {
  auto key = [](KeyKind kind, uint64_t seq) {
    Key k;
    k.sector = 100;
    k.sectors = 8;
    k.kind = kind;
    k.seq = seq;
    k.segment = 3;
    k.offset_sectors = 8;
    k.generation = 2;
    return k;
  };
  auto decodes = [](const std::vector<Key>& keys) {
    std::vector<std::byte> buffer(encoded_key_set_size(keys.size()));
    encode_keys(keys, 5, 6, buffer, DataOrdering::DataFirst);
    std::vector<Key> decoded;
    auto header = decode_key_set(buffer, 5, 6, decoded);
    if (header.ok()) CHECK(decoded == keys);
    return header.ok();
  };
  // One key's data moved in two pieces, each with its checksum; then its segment retired.
  CHECK(decodes({key(KeyKind::Relocated, 7), key(KeyKind::Checksum, 7), key(KeyKind::Relocated, 7),
                 key(KeyKind::Checksum, 7), key(KeyKind::Retired, 7), key(KeyKind::Relocated, 9)}));
  CHECK_FALSE(decodes({key(KeyKind::Write, 7), key(KeyKind::Write, 7)}));
  CHECK_FALSE(decodes({key(KeyKind::Write, 7), key(KeyKind::Checksum, 7)}));  // numbered apart when written
  CHECK_FALSE(decodes({key(KeyKind::Relocated, 7), key(KeyKind::Write, 7)}));
  CHECK_FALSE(decodes({key(KeyKind::Relocated, 9), key(KeyKind::Relocated, 7)}));  // never down
}

TEST_CASE("a key set without data keys carries no digest", "[format][keyset]") {
  std::vector<Key> keys = sample_keys(3, 40);
  keys.erase(keys.begin());  // the write: a write-zeroes and a discard remain
  std::vector<std::byte> buffer(encoded_key_set_size(keys.size()));
  encode_keys(keys, 5, 6, buffer);
  check_without_digest(buffer, keys);
}

TEST_CASE("data hashes are XXH3-64 on every CPU, and a digest is XXH3-64 of the hashes", "[format][keyset]") {
  // format::data_hash picks an AVX2 build where it can; the format says XXH3-64, whatever built it.
  std::vector<unsigned char> data(8192 + 3);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t len : {size_t{0}, size_t{1}, size_t{64}, size_t{512}, size_t{4096}, size_t{8192 + 3}}) {
    INFO(len << " bytes");
    CHECK(data_hash(data.data(), len) == XXH3_64bits(data.data(), len));
  }
  CHECK(data_hash(nullptr, 0) == 0x2D06800538D394C2ull);  // XXH3-64 of nothing, as published
  const std::vector<uint64_t> hashes = {0x0102030405060708ull, 0x1112131415161718ull};
  const unsigned char little_endian[16] = {8, 7, 6, 5, 4, 3, 2, 1, 0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};
  CHECK(data_digest(hashes) == XXH3_64bits(little_endian, sizeof little_endian));
  CHECK(data_digest(std::span(hashes).first(1)) != data_digest(hashes));
}

TEST_CASE("a link record names the next segment", "[format][keyset]") {
  std::vector<std::byte> buffer(64);
  REQUIRE(encode_link(33, 8, 2, 77, buffer) == 64);
  std::vector<Key> keys;
  auto header = decode_key_set(buffer, 2, 77, keys);
  REQUIRE(header.ok());
  CHECK(header->kind == KeySetKind::Link);
  CHECK(header->link_segment == 33);
  CHECK(header->link_generation == 8);
  CHECK(keys.empty());
}

TEST_CASE("decoders survive random bytes", "[format][robustness]") {
  std::mt19937_64 rng(2026);
  std::vector<Key> keys;
  for (int round = 0; round < 20000; ++round) {
    std::array<std::byte, kSuperblockSize> bytes;
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    if (round % 2 == 0) std::memcpy(bytes.data(), kSuperblockMagic, sizeof kSuperblockMagic);
    CHECK_FALSE(decode_superblock(bytes).ok());
    std::vector<std::byte> record(static_cast<size_t>(rng() % 300));
    for (auto& b : record) b = static_cast<std::byte>(rng());
    if (record.size() >= 4 && round % 2 == 0) {
      const uint32_t magic = kKeySetMagic;
      std::memcpy(record.data(), &magic, 4);
    }
    keys.clear();
    auto decoded = decode_key_set(record, 0, 0, keys);
    if (!decoded.ok()) CHECK(keys.empty());
  }
}

TEST_CASE("a key set whose data was fenced first carries no digest, data keys or not", "[format][keyset]") {
  const std::vector<Key> keys = sample_keys(3, 40);  // a write among them
  std::vector<std::byte> shared(encoded_key_set_size(keys.size())), data_first(shared.size());
  encode_keys(keys, 5, 6, shared, DataOrdering::SharedFence);
  encode_keys(keys, 5, 6, data_first, DataOrdering::DataFirst);
  check_without_digest(data_first, keys);
  std::vector<Key> decoded;
  auto header = decode_key_set(shared, 5, 6, decoded);
  REQUIRE(header.ok());
  CHECK(header->kind == KeySetKind::HashedKeys);
  CHECK(decoded == keys);
}

TEST_CASE("a clean checkpoint round-trips, is salted, and refuses extents out of order or out of bounds",
          "[format][checkpoint]") {
  const CheckpointBounds bounds{8, 1 * MiB, 65536};
  const std::vector<CheckpointExtent> extents = {{0, 8, 0, 8, 3}, {8, 16, 1, 2032, 1}, {4096, 2040, 7, 8, 9}};
  const std::vector<std::byte> bytes = encode_checkpoint_extents(extents);
  REQUIRE(bytes.size() == extents.size() * kCheckpointExtentSize);
  const CheckpointHeader header = describe_checkpoint_extents(bytes, 42, 99);
  CHECK(header.control_update_seq == 42);
  CHECK(header.extent_count == 3);
  std::array<std::byte, kCheckpointHeaderSize> header_bytes;
  encode_checkpoint_header(header, 99, header_bytes);
  REQUIRE(decode_checkpoint_header(header_bytes, 99).value() == header);
  CHECK(decode_checkpoint_extents(header, bytes, 99, bounds).value() == extents);

  // Another cache's salt, a flipped byte anywhere, an erased header.
  CHECK(decode_checkpoint_header(header_bytes, 98).status().code() == EBADMSG);
  CHECK(decode_checkpoint_extents(header, bytes, 98, bounds).status().code() == EBADMSG);
  for (size_t i = 4; i < header_bytes.size(); ++i) {
    auto copy = header_bytes;
    copy[i] ^= std::byte{0x02};
    CHECK(decode_checkpoint_header(copy, 99).status().code() == EBADMSG);
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= std::byte{0x02};
    CHECK(decode_checkpoint_extents(header, copy, 99, bounds).status().code() == EBADMSG);
  }
  std::array<std::byte, kCheckpointHeaderSize> erased{};
  CHECK(decode_checkpoint_header(erased, 99).status().code() == ENODATA);
  // Fewer bytes than the header counts.
  CHECK(decode_checkpoint_extents(header, std::span(bytes).first(48), 99, bounds).status().code() == EBADMSG);

  // Extents that pass their checksum but could not have been written: each is refused, named.
  auto refused = [&](std::vector<CheckpointExtent> bad, const std::string& words) {
    const std::vector<std::byte> bad_bytes = encode_checkpoint_extents(bad);
    auto decoded = decode_checkpoint_extents(describe_checkpoint_extents(bad_bytes, 1, 99), bad_bytes, 99, bounds);
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.status().code() == EBADMSG);
    INFO(decoded.status().message());
    CHECK(decoded.status().message().find(words) != std::string::npos);
  };
  refused({{8, 8, 0, 8, 1}, {12, 8, 0, 64, 1}}, "overlaps");
  refused({{100, 8, 0, 8, 1}, {50, 8, 0, 64, 1}}, "out of order");
  refused({{0, 0, 0, 8, 1}}, "empty");
  refused({{65530, 8, 0, 8, 1}}, "beyond the device");
  refused({{0, 8, 8, 8, 1}}, "outside");         // no segment 8
  refused({{0, 8, 0, 0, 1}}, "outside");         // over the segment's header
  refused({{0, 16, 0, 2040, 1}}, "outside");     // past the segment's end
}

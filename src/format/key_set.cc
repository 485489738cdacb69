#include "format/key_set.h"

#include <algorithm>
#include <cassert>
#include <string>

#include "format/crc32c.h"
#include "format/data_hash.h"
#include "format/endian.h"

namespace pcached::format {

namespace {

constexpr size_t kCrcOffset = 4;

// The CRC covers the header (its crc field taken as zero) and the keys.
uint32_t checksum(std::span<const std::byte> record, size_t keys, uint32_t salt) {
  return crc32c_skipping_field(salt, record.data(), kKeySetHeaderSize + keys * kKeySize, kCrcOffset);
}

// Bytes 24-31 hold the link's target in a link, the data digest in a HashedKeys set.
void write_header(std::span<std::byte> out, const KeySetHeader& header) {
  FieldWriter writer(out.data());
  writer.put<uint32_t>(kKeySetMagic)
      .put<uint32_t>(0)
      .put<uint32_t>(header.journal_generation)
      .put<uint16_t>(header.count)
      .put<uint16_t>(static_cast<uint16_t>(header.kind))
      .put<uint64_t>(header.first_seq);
  if (header.kind == KeySetKind::HashedKeys) {
    writer.put<uint64_t>(header.data_digest);
  } else {
    writer.put<uint32_t>(header.link_segment).put<uint32_t>(header.link_generation);
  }
}

void seal(std::span<std::byte> out, size_t keys, size_t encoded, uint32_t salt) {
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(kKeySetHeaderSize + keys * kKeySize),
            out.begin() + static_cast<std::ptrdiff_t>(encoded), std::byte{0});
  store_le<uint32_t>(out.data() + kCrcOffset, checksum(out, keys, salt));
}

Status damaged(const std::string& what) { return Status::error(EBADMSG, "key set: " + what); }

}  // namespace

size_t encode_keys(std::span<const Key> keys, uint32_t journal_generation, uint32_t salt, std::span<std::byte> out,
                   DataOrdering ordering) {
  assert(!keys.empty() && keys.size() <= kMaxKeysPerSet);
  const size_t encoded = encoded_key_set_size(keys.size());
  assert(out.size() >= encoded);
  KeySetHeader header;
  uint64_t hashes[kMaxKeysPerSet];
  size_t data_keys = 0;
  if (ordering == DataOrdering::SharedFence) {
    for (const Key& key : keys) {
      if (has_data(key.kind)) hashes[data_keys++] = key.data_hash;
    }
  }
  header.kind = data_keys > 0 ? KeySetKind::HashedKeys : KeySetKind::Keys;
  if (data_keys > 0) header.data_digest = data_digest(std::span<const uint64_t>(hashes, data_keys));
  header.count = static_cast<uint16_t>(keys.size());
  header.journal_generation = journal_generation;
  header.first_seq = keys.front().seq;
  write_header(out, header);
  FieldWriter w(out.data() + kKeySetHeaderSize);
  for (const Key& key : keys) {
    assert(key.sectors >= 1 && key.sectors <= kMaxKeySectors);
    w.put<uint64_t>(key.sector)
        .put<uint64_t>(key.seq)
        .put<uint32_t>(key.segment)
        .put<uint32_t>(key.offset_sectors)
        .put<uint32_t>(key.generation)
        .put<uint32_t>(key.sectors | (static_cast<uint32_t>(key.kind) << 28));
  }
  seal(out, keys.size(), encoded, salt);
  return encoded;
}

size_t encode_link(uint32_t next_segment, uint32_t next_generation, uint32_t journal_generation, uint32_t salt,
                   std::span<std::byte> out) {
  const size_t encoded = encoded_key_set_size(0);
  assert(out.size() >= encoded);
  KeySetHeader header;
  header.kind = KeySetKind::Link;
  header.journal_generation = journal_generation;
  header.link_segment = next_segment;
  header.link_generation = next_generation;
  write_header(out, header);
  seal(out, 0, encoded, salt);
  return encoded;
}

Result<KeySetHeader> decode_key_set(std::span<const std::byte> in, uint32_t journal_generation, uint32_t salt,
                                    std::vector<Key>& keys) {
  if (in.size() < kKeySetHeaderSize) return Status::error(ENODATA, "key set: end of segment");
  FieldReader r(in.data());
  if (r.get<uint32_t>() != kKeySetMagic) return Status::error(ENODATA, "key set: none here");
  const uint32_t stored_crc = r.get<uint32_t>();
  KeySetHeader header;
  header.journal_generation = r.get<uint32_t>();
  // A record of an earlier use of this segment: the journal ends before it.
  if (header.journal_generation != journal_generation) return Status::error(ENODATA, "key set: older generation");
  header.count = r.get<uint16_t>();
  header.kind = static_cast<KeySetKind>(r.get<uint16_t>());
  header.first_seq = r.get<uint64_t>();
  if (header.kind == KeySetKind::HashedKeys) {
    header.data_digest = r.get<uint64_t>();
  } else {
    header.link_segment = r.get<uint32_t>();
    header.link_generation = r.get<uint32_t>();
  }
  if (!holds_keys(header.kind) && header.kind != KeySetKind::Link) return damaged("unknown kind");
  const size_t count = holds_keys(header.kind) ? header.count : 0;
  if (holds_keys(header.kind) && (count == 0 || count > kMaxKeysPerSet)) {
    return damaged("key count " + std::to_string(count));
  }
  if (header.kind == KeySetKind::Link && header.count != 0) return damaged("link with keys");
  if (encoded_key_set_size(count) > in.size()) return damaged("runs past the end of its segment");
  if (stored_crc != checksum(in, count, salt)) return damaged("checksum mismatch");

  FieldReader kr(in.data() + kKeySetHeaderSize);
  const size_t first = keys.size();
  for (size_t i = 0; i < count; ++i) {
    Key key;
    key.sector = kr.get<uint64_t>();
    key.seq = kr.get<uint64_t>();
    key.segment = kr.get<uint32_t>();
    key.offset_sectors = kr.get<uint32_t>();
    key.generation = kr.get<uint32_t>();
    const uint32_t sectors_and_kind = kr.get<uint32_t>();
    key.sectors = sectors_and_kind & kMaxKeySectors;
    const uint32_t kind = sectors_and_kind >> 28;
    if (kind < static_cast<uint32_t>(KeyKind::Write) || kind > static_cast<uint32_t>(KeyKind::Retired)) {
      keys.resize(first);
      return damaged("key of unknown kind " + std::to_string(kind));
    }
    key.kind = static_cast<KeyKind>(kind);
    if (key.sectors == 0 || key.sector + key.sectors < key.sector) {
      keys.resize(first);
      return damaged("key with an empty or wrapping range");
    }
    // A moved key repeats the number of the key it moves, and one key's data may move in pieces.
    const bool may_repeat = i > 0 && (key.kind == KeyKind::Relocated || key.kind == KeyKind::Retired ||
                                      (key.kind == KeyKind::Checksum && keys.back().kind == KeyKind::Relocated));
    if ((i == 0 && key.seq != header.first_seq) ||
        (i > 0 && (key.seq < keys.back().seq || (key.seq == keys.back().seq && !may_repeat)))) {
      keys.resize(first);
      return damaged("sequence numbers out of order");
    }
    keys.push_back(key);
  }
  return header;
}

}  // namespace pcached::format

// Keys and key sets: the journal's records. A key says "these sectors now hold the data at this
// place in the region" (or "are zero", or "were discarded"), with the sequence number that orders
// it against every other key of the cache. A key set is a batch of keys of one journal, written
// and checksummed as one record; a link record ends a journal segment and names the next one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "format/layout.h"
#include "pcached/status.h"

namespace pcached::format {

enum class KeyKind : uint8_t {
  Write = 1,    // sectors hold data at (segment, offset)
  Zero = 2,     // sectors read as zeros (write-zeroes); no data in the region
  Discard = 3,  // sectors are no longer cached; their content is undefined
  // Like Write, but the data was on the backing device before the key was written (writethrough):
  // writeback need not copy it again, only flush the device before the key counts as clean.
  WrittenThrough = 4,
  // The CRC32C (in the sector field) of the data of the key before it in the same key set, which
  // names the same place (segment, offset, generation, length): data_crc.
  Checksum = 5,
  // Format 3: dirty data GC moved out of a segment it reclaims, before writeback reached it. It
  // carries the sequence number of the key whose data it moves (so it orders against every other
  // key exactly as that one did), and only the part of it still live. Written to GC's own journal;
  // the key it moves from stays in its journal and drives writeback, from wherever the data is.
  Relocated = 6,
  // Format 3: GC released data segment `segment` of generation `generation` while keys naming it
  // were still above the clean horizon, once their live data had moved (Relocated keys, durable
  // first): replay skips the keys that name it, since the segment may be reused. Numbered as the
  // newest key in the segment, so it is replayed as long as any of them is. No sectors of its own.
  Retired = 7,
};
// Sequence numbers repeat in a key set only for Relocated and Retired keys (and a checksum
// following a Relocated one): each shares the number of the key it moves or retires.

// Keys whose data the cache holds for a client write: writeback passes these down.
inline bool has_data(KeyKind kind) { return kind == KeyKind::Write || kind == KeyKind::WrittenThrough; }
// Keys that name data in the region, which replay puts in the index.
inline bool names_data(KeyKind kind) { return has_data(kind) || kind == KeyKind::Relocated; }

inline constexpr uint32_t kMaxKeySectors = (1u << 28) - 1;

struct Key {
  uint64_t sector = 0;   // first logical sector (512 bytes)
  uint32_t sectors = 0;  // length in sectors, 1 .. kMaxKeySectors
  KeyKind kind = KeyKind::Write;
  uint64_t seq = 0;
  // Write only: where the data is. offset_sectors counts from the start of the segment.
  uint32_t segment = 0;
  uint32_t offset_sectors = 0;
  uint32_t generation = 0;  // of the data segment when the data was written
  // Write and written-through: data_hash() of the data. Kept in DRAM only; the key set records
  // the digest of its keys' hashes (see data_hash.h), so a decoded key has 0 here.
  uint64_t data_hash = 0;
  // What the key says (its encoded fields); data_hash is not among them.
  bool operator==(const Key& other) const {
    return sector == other.sector && sectors == other.sectors && kind == other.kind && seq == other.seq &&
           segment == other.segment && offset_sectors == other.offset_sectors && generation == other.generation;
  }
};

// Keys: a key set of format version 1, whose data was durable before it was written. HashedKeys
// (version 2): a key set with at least one data key, carrying the digest of their data; the data
// and the key set become durable at the same fence.
enum class KeySetKind : uint16_t { Keys = 1, Link = 2, HashedKeys = 3 };

inline bool holds_keys(KeySetKind kind) { return kind == KeySetKind::Keys || kind == KeySetKind::HashedKeys; }

struct KeySetHeader {
  KeySetKind kind = KeySetKind::Keys;
  uint16_t count = 0;
  uint32_t journal_generation = 0;  // of the journal segment it is written in
  uint64_t first_seq = 0;           // Keys: keys[0].seq
  uint32_t link_segment = 0;        // Link: the journal's next segment
  uint32_t link_generation = 0;
  uint64_t data_digest = 0;         // HashedKeys: data_digest() of its data keys' hashes
};

constexpr size_t encoded_key_set_size(size_t keys) {
  return (kKeySetHeaderSize + keys * kKeySize + kKeySetAlignment - 1) / kKeySetAlignment * kKeySetAlignment;
}

// How replay knows a key set's data is whole. SharedFence: the data and the set become durable
// at the same fence, so a set with data keys is a HashedKeys set carrying the digest of their
// data_hash fields. DataFirst: the data was durable before the set was written (a Keys set).
enum class DataOrdering { SharedFence, DataFirst };

// Writes a key set of 1..kMaxKeysPerSet keys (sequence numbers strictly increasing, but see
// KeyKind::Relocated) into out,
// which must hold encoded_key_set_size(keys.size()) bytes; returns the bytes written.
size_t encode_keys(std::span<const Key> keys, uint32_t journal_generation, uint32_t salt, std::span<std::byte> out,
                   DataOrdering ordering = DataOrdering::SharedFence);
size_t encode_link(uint32_t next_segment, uint32_t next_generation, uint32_t journal_generation, uint32_t salt,
                   std::span<std::byte> out);

// Decodes the key set at the start of in (in may extend past it). ENODATA: no key set here for
// this journal generation (the end of the journal); EBADMSG: a damaged or inconsistent record.
// Keys are appended to keys.
Result<KeySetHeader> decode_key_set(std::span<const std::byte> in, uint32_t journal_generation, uint32_t salt,
                                    std::vector<Key>& keys);

}  // namespace pcached::format

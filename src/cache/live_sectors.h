// Which sectors of the data segments hold data the index points at: one bit per 512-byte sector,
// kept by the index as it places, trims, moves and evicts extents. Two scans pass mostly data that
// newer writes have long replaced: writeback, walking the journals' keys, and GC, walking the
// ranges its victims ever received. They test the bits first and go to the index (a lock and a
// tree search) only where something is still live.
//
// A bit is set and cleared under the index shard lock of the one extent that holds its sector;
// neighbouring sectors may belong to extents of other shards, hence atomic words.
//
// The bits say where data is, not whose it is. For writeback, "nothing live where key K put its
// data" proves K has nothing left to write back only if K's data can have gone nowhere else: the
// segment is still the generation K wrote into, and no data has moved out of it (GC moves dirty data
// and the moved extent keeps K's number). A segment is *traced* from the moment a queue opens it
// in this attach until GC moves anything out of it or it is released; the segments a recovery
// finds are not (replay may have put data of their keys elsewhere), and writeback asks the index
// about their keys, as it always did.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace pcached::cache {

class LiveSectors {
 public:
  LiveSectors(uint64_t data_start, uint64_t segment_size, uint32_t segment_count);

  // The sectors of [location, location + sectors * 512) became live (set) or dead (clear).
  void set(uint64_t location, uint64_t sectors);
  void clear(uint64_t location, uint64_t sectors);
  // Whether any sector of the range is live.
  bool any(uint64_t location, uint64_t sectors) const;

  // A queue opened `segment` at `generation`: every extent placed in it from now on sets its bits.
  void trace(uint32_t segment, uint32_t generation);
  // Data moved out of the segment at `location`, or the segment is released: its bits no longer
  // tell where its keys' data is.
  void untrace_segment_of(uint64_t location);
  void untrace(uint32_t segment);

  // Whether the data a key wrote at `location` into `segment` of `generation` is all dead: replaced,
  // trimmed or discarded, so that the index holds nothing of it. False whenever that cannot be
  // known from the bits (see above).
  bool dead(uint32_t segment, uint32_t generation, uint64_t location, uint64_t sectors) const;

  // DRAM held by the bits and the per-segment trace marks.
  uint64_t memory_bytes() const;

 private:
  template <typename Apply>
  void for_each_word(uint64_t location, uint64_t sectors, Apply apply) const;

  uint64_t data_start_;
  uint64_t segment_size_;
  uint32_t segment_count_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
  // Per segment: its generation + 1 while it is traced, 0 when it is not.
  std::unique_ptr<std::atomic<uint64_t>[]> traced_;
};

}  // namespace pcached::cache

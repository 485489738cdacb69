// A persistent-memory region mapped with libpmem2: a devdax character device (/dev/daxX.Y), a file
// on a DAX filesystem (fsdax), or, for tests and demos only, a plain file whose stores are made
// durable by msync ("volatile/test" region).
//
// The region owns its fd and mapping. It does not write: every store to pmem goes through a
// PmemWriter (pmem_writer.h), so that the copy method and the persistence order live in one place.
// Reads of pmem go through Region::read(), which turns a media error into EIO for that read only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pcached/status.h"
#include "pcached/units.h"

struct pmem2_map;

namespace pcached::pmem {

inline constexpr size_t kCacheLine = 64;
inline constexpr uint64_t kDefaultMinRegionSize = 16 * MiB;

// The smallest unit whose durability the platform guarantees once it is flushed (libpmem2's
// "store granularity"). Byte: CPU caches are in the persistence domain (eADR). CacheLine: stores
// need a cache flush and a fence. Page: not real pmem; durability needs msync.
enum class Granularity { Byte, CacheLine, Page };
const char* to_string(Granularity granularity);

enum class RegionKind { DevDax, File };
const char* to_string(RegionKind kind);

struct BadRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const BadRange&) const = default;
};

struct RegionOptions {
  std::string path;
  // Accept a page-granularity region (a plain file, not DAX). Persistence then goes through
  // msync; such a region is for tests and demos, and opening one logs a warning.
  bool allow_volatile = false;
  uint64_t min_size = kDefaultMinRegionSize;
  // Tests: ranges to treat as bad blocks the platform reported at open (a file on /dev/shm has
  // none), to exercise what media errors in metadata and data do.
  std::vector<BadRange> injected_bad_ranges;
};

// What makes this region this region: used to recognise the same device after a restart and to
// refuse a superblock that belongs elsewhere.
struct RegionIdentity {
  RegionKind kind = RegionKind::File;
  dev_t device = 0;  // st_rdev of a devdax device, st_dev of a file
  ino_t inode = 0;   // 0 for devdax
  uint64_t size = 0;
  std::string path;
};

class Region {
 public:
  static Result<std::unique_ptr<Region>> open(const RegionOptions& options);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  Granularity granularity() const { return granularity_; }
  bool is_volatile() const { return granularity_ == Granularity::Page; }
  const RegionIdentity& identity() const { return identity_; }
  const std::string& path() const { return identity_.path; }
  int numa_node() const { return numa_node_; }
  pmem2_map* native_map() const { return map_; }

  // Copies [offset, offset+len) of the region into dst. A range that overlaps a known bad block
  // fails with EIO without being touched; a read that faults (SIGBUS: poisoned media, or the file
  // was truncated under the mapping) fails with EIO, records the faulting page as bad, and leaves
  // the process running. Safe to call from any thread.
  Status read(uint64_t offset, void* dst, size_t len) const;

  // Bad blocks: those libpmem2/libndctl reported at open, plus pages that faulted since.
  std::vector<BadRange> bad_ranges() const;
  bool overlaps_bad_range(uint64_t offset, uint64_t len) const;
  void mark_bad(uint64_t offset, uint64_t len) const;
  // The kernel reported [offset, offset+len) as failed before anything read it (an early
  // memory-failure report, memory_failure.h): marked bad like a page whose read faulted.
  void record_memory_failure(uint64_t offset, uint64_t len) const;
  uint64_t media_errors() const { return media_errors_.load(std::memory_order_relaxed); }

 private:
  Region() = default;

  int fd_ = -1;
  pmem2_map* map_ = nullptr;
  std::byte* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t alignment_ = 0;
  int numa_node_ = -1;
  Granularity granularity_ = Granularity::Page;
  RegionIdentity identity_;

  mutable std::mutex bad_mutex_;
  mutable std::vector<BadRange> bad_ranges_;  // sorted by offset, non-overlapping
  mutable std::atomic<bool> has_bad_ranges_{false};
  mutable std::atomic<uint64_t> media_errors_{0};
};

}  // namespace pcached::pmem

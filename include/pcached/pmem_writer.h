// The one door through which pcached stores to pmem. Every store is a copy (or fill) that leaves
// the written lines flushed; drain() is the fence that makes everything copied before it durable.
// Callers batch: copy the data, copy the key, then drain once; the order "data and key durable
// before the write is acknowledged" is the caller's to keep, by draining before acknowledging.
//
// A writer is owned by one thread (a queue thread, a background job): it keeps unsynchronised
// counters. Several writers share one Region and one CopyPolicy.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pcached/copy_method.h"
#include "pcached/copy_policy.h"
#include "pcached/pmem_region.h"

namespace pcached::pmem {

enum class StoreKind { Cached, NonTemporal };

// Sees every store, flush and fence a writer issues, in program order, with region offsets. The
// persistence simulator implements it to build the image a power cut would leave.
class PersistObserver {
 public:
  virtual ~PersistObserver() = default;
  virtual void on_store(uint64_t offset, size_t len, StoreKind kind) = 0;
  virtual void on_flush(uint64_t offset, size_t len) = 0;
  virtual void on_fence() = 0;
};

// Written only by the writer's thread (relaxed stores, no read-modify-write), read by anyone
// (metrics): counting costs the copy path nothing but two stores.
struct CopyCounters {
  using Counter = std::atomic<uint64_t>;
  std::array<std::array<Counter, kSizeClassCount>, kCopyMethodCount> copies{};
  std::array<std::array<Counter, kSizeClassCount>, kCopyMethodCount> bytes{};
  Counter fences{0};

  static void add(Counter& counter, uint64_t by) {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

class PmemWriter {
 public:
  PmemWriter(const Region& region, const CopyPolicy& policy, PersistObserver* observer = nullptr);

  // Copies src to [offset, offset+len) with the policy's method for len and flushes it. Durable
  // after the next drain().
  void copy_nodrain(uint64_t offset, const void* src, size_t len) {
    copy_nodrain(offset, src, len, policy_.method_for(len));
  }
  void copy_nodrain(uint64_t offset, const void* src, size_t len, CopyMethod method);
  void fill_nodrain(uint64_t offset, uint8_t value, size_t len);
  // Copies [source, source+len) of the region itself to [offset, offset+len) and flushes it:
  // read through Region::read, straight into the destination (no bounce through DRAM), so a media
  // error in the source fails this copy with EIO, leaving the destination partly written, and
  // never the process. Cached stores and a flush whatever the policy: the streaming copy cannot
  // take the fault. Durable after the next drain().
  Status copy_within_nodrain(uint64_t offset, uint64_t source, size_t len);

  void copy_persist(uint64_t offset, const void* src, size_t len) {
    copy_nodrain(offset, src, len);
    drain();
  }

  // Flushes lines of [offset, offset+len) again (after a store made through this writer, the lines
  // are flushed already; use this only to re-persist a range), and persist() adds the fence.
  void flush(uint64_t offset, size_t len);
  void persist(uint64_t offset, size_t len) {
    flush(offset, len);
    drain();
  }

  // Fence: every copy, fill and flush issued by this writer before it is durable when it returns.
  void drain();

  const CopyCounters& counters() const { return counters_; }
  const Region& region() const { return region_; }
  const CopyPolicy& policy() const { return policy_; }

 private:
  template <typename StreamingStore, typename CachedStore>
  void store(uint64_t offset, size_t len, CopyMethod method, StreamingStore streaming, CachedStore cached);
  void flush_range(void* address, size_t len, CopyMethod method);
  void count(CopyMethod method, size_t len);

  // libpmem2's routines for this mapping, looked up once (same signatures as pmem2_*_fn).
  using MemcpyFn = void* (*)(void*, const void*, size_t, unsigned);
  using MemsetFn = void* (*)(void*, int, size_t, unsigned);
  using PersistFn = void (*)(const void*, size_t);

  const Region& region_;
  const CopyPolicy& policy_;
  MemcpyFn memcpy_fn_;
  MemsetFn memset_fn_;
  PersistFn persist_fn_;
  PersistObserver* observer_;
  CopyMethod default_flush_;
  CopyCounters counters_;
};

}  // namespace pcached::pmem

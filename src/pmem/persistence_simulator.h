// A model of what survives a power cut, for crash-consistency tests on DRAM.
//
// Attached to PmemWriters as their PersistObserver, it follows the x86 persistence rules line by
// line: a cached store leaves a line dirty (lost at a power cut unless the CPU happened to evict
// it); a flush (clwb/clflushopt) or a streaming store captures the line, and the issuing thread's
// next fence makes that capture durable. What the region held when the simulator was attached
// counts as durable. On an eADR region (byte granularity) the caches are persistent: a cached store
// needs no flush, only the fence that drains the store buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"

namespace pcached::pmem {

class PersistenceSimulator final : public PersistObserver {
 public:
  explicit PersistenceSimulator(const Region& region);

  void on_store(uint64_t offset, size_t len, StoreKind kind) override;
  void on_flush(uint64_t offset, size_t len) override;
  void on_fence() override;

  struct PowerCut {
    // Chance that a line not yet durable reached the media anyway (evicted, or its flush had
    // completed before the fence). 0 drops every such line: the strictest cut.
    double keep_unpersisted = 0.0;
    // A kept line is torn: each aligned 8-byte word (the unit x86 writes atomically) is
    // independently old or new.
    bool tear_words = false;
    uint64_t seed = 0;
  };
  // The bytes the region would hold after a power cut now.
  std::vector<std::byte> image_after_power_cut(const PowerCut& cut) const;

  // Cuts the power just before event number `event` (1-based count of store, flush and fence
  // notifications): on_cut gets the image then, and the simulator goes on as if nothing happened.
  // on_cut runs on whichever thread reaches that event, with the simulator locked: it must not
  // call back into the simulator.
  using CutHandler = std::function<void(std::vector<std::byte> image)>;
  void arm_cut(uint64_t event, const PowerCut& cut, CutHandler on_cut);
  bool cut_done() const;

  // Lines whose current content is not known to be durable (dirty, or flushed but not fenced).
  size_t unpersisted_lines() const;
  // Store, flush and fence notifications seen so far.
  uint64_t events() const;

 private:
  using Line = std::array<std::byte, kCacheLine>;
  std::vector<std::byte> image_locked(const PowerCut& cut) const;
  void count_event();
  Line snapshot(uint64_t line) const;
  void capture(uint64_t offset, size_t len);

  const Region& region_;
  const bool eadr_;  // byte granularity: the CPU caches are in the persistence domain
  mutable std::mutex mutex_;
  std::vector<std::byte> durable_;
  std::set<uint64_t> dirty_;                                        // line indexes
  std::map<std::thread::id, std::map<uint64_t, Line>> awaiting_fence_;  // per issuing thread
  uint64_t events_ = 0;
  uint64_t cut_event_ = 0;
  PowerCut cut_;
  CutHandler on_cut_;
  bool cut_done_ = false;
};

}  // namespace pcached::pmem

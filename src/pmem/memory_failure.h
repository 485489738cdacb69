// Memory failures the kernel reports before anything reads the page. When the platform finds
// poison (a patrol scrub, or a failure the kernel learns of another way), it unmaps the page from
// every process and sends SIGBUS with si_code BUS_MCEERR_AO ("action optional") to those that asked
// for early reports (PR_MCE_KILL_EARLY); the others hear of it only when they load from the page
// (BUS_MCEERR_AR, which Region::read survives). Early reports let the cache stop trusting the page
// at once: clean data there is read from the backing device from then on, dirty data fails its
// reads with EIO instead of being served, and no new write is placed on it.
//
// The signal handler only notes the address, in a pipe (a queue that is safe to write from a
// signal); a monitor thread takes the reports and marks the page bad in the region that maps it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/unique_fd.h"
#include "pcached/status.h"

namespace pcached::pmem {

class Region;

// Regions register while mapped, so that a report can be matched to the region holding the page.
void track_region(const Region& region);
void untrack_region(const Region& region);

// Called by the SIGBUS handler (signal context) for a BUS_MCEERR_AO report. Returns false when no
// monitor is running: the report then keeps its default meaning.
bool queue_memory_failure_report(const void* address, short address_lsb);

// At most one at a time, for the life of the daemon. Starting it asks the kernel for early reports.
class MemoryFailureMonitor {
 public:
  static Result<std::unique_ptr<MemoryFailureMonitor>> start();
  ~MemoryFailureMonitor();
  MemoryFailureMonitor(const MemoryFailureMonitor&) = delete;
  MemoryFailureMonitor& operator=(const MemoryFailureMonitor&) = delete;

  // Reports handled so far: those in a pmem region, and those in no region (DRAM, or a region
  // already gone).
  uint64_t pmem_reports() const { return pmem_reports_.load(std::memory_order_relaxed); }
  uint64_t other_reports() const { return other_reports_.load(std::memory_order_relaxed); }

 private:
  MemoryFailureMonitor() = default;
  void run(int reports_fd);
  void handle(uintptr_t address, short address_lsb);

  UniqueFd stop_;  // eventfd
  std::atomic<uint64_t> pmem_reports_{0};
  std::atomic<uint64_t> other_reports_{0};
  std::thread thread_;
};

}  // namespace pcached::pmem

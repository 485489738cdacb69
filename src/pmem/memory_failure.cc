#include "pmem/memory_failure.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/thread_name.h"
#include "pcached/pmem_region.h"
#include "pmem/media_read.h"

namespace pcached::pmem {

namespace {

struct Report {
  uintptr_t address;
  int64_t address_lsb;
};
// A write of at most PIPE_BUF bytes to a pipe is atomic: records never interleave.
static_assert(sizeof(Report) <= PIPE_BUF);

// The pipe lives as long as the process: a handler running while a monitor stops must never
// write to a descriptor that was closed, and perhaps reused for a file, under it.
int g_pipe[2] = {-1, -1};
std::atomic<int> g_report_fd{-1};  // g_pipe[1] while a monitor runs, else -1
std::atomic<uint64_t> g_dropped{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

std::mutex g_regions_mutex;
std::vector<const Region*> g_regions;

Status open_pipe_once() {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) error = errno;
  });
  if (error != 0) return Status::error(error, std::string("cannot create the memory-failure queue: ") + std::strerror(error));
  return Status();
}

}  // namespace

void track_region(const Region& region) {
  std::lock_guard lock(g_regions_mutex);
  g_regions.push_back(&region);
}

void untrack_region(const Region& region) {
  std::lock_guard lock(g_regions_mutex);
  std::erase(g_regions, &region);
}

bool queue_memory_failure_report(const void* address, short address_lsb) {
  const int fd = g_report_fd.load(std::memory_order_acquire);
  if (fd < 0) return false;
  const Report report{reinterpret_cast<uintptr_t>(address), address_lsb};
  if (::write(fd, &report, sizeof report) != static_cast<ssize_t>(sizeof report)) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

Result<std::unique_ptr<MemoryFailureMonitor>> MemoryFailureMonitor::start() {
  if (Status status = open_pipe_once(); !status.ok()) return status;
  install_sigbus_handler();
  auto monitor = std::unique_ptr<MemoryFailureMonitor>(new MemoryFailureMonitor());
  monitor->stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!monitor->stop_.valid()) {
    return Status::error(errno, std::string("cannot create the memory-failure monitor: ") + std::strerror(errno));
  }
  int expected = -1;
  if (!g_report_fd.compare_exchange_strong(expected, g_pipe[1])) {
    return Status::error(EBUSY, "a memory-failure monitor is running already");
  }
  monitor->thread_ = std::thread([raw = monitor.get()] { raw->run(g_pipe[0]); });
  return monitor;
}

MemoryFailureMonitor::~MemoryFailureMonitor() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(stop_.get(), &one, sizeof one);
  thread_.join();
  // Reports that arrive from now on keep their default meaning; the thread that asked for them
  // (the only one that did) is gone, so the kernel sends none that are optional.
  g_report_fd.store(-1, std::memory_order_release);
}

void MemoryFailureMonitor::run(int reports_fd) {
  name_this_thread("pcached-mce");
  // On this thread only (threads inherit it, and this one starts none): the kernel sends an early
  // report to one thread of the process, the first that asked for them, so it interrupts no
  // queue's I/O.
  if (::prctl(PR_MCE_KILL, PR_MCE_KILL_SET, PR_MCE_KILL_EARLY, 0, 0) != 0) {
    spdlog::warn("cannot ask for early memory-failure reports (PR_MCE_KILL_EARLY): {}; poisoned pmem is found "
                 "only when a read faults",
                 std::strerror(errno));
  }
  uint64_t dropped_seen = 0;
  for (;;) {
    pollfd fds[2] = {{reports_fd, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;  // the report's own signal interrupts the wait
      spdlog::error("memory-failure monitor: poll: {}", std::strerror(errno));
      return;
    }
    Report reports[64];
    ssize_t got;
    while ((got = ::read(reports_fd, reports, sizeof reports)) > 0) {
      for (size_t i = 0; i < static_cast<size_t>(got) / sizeof(Report); ++i) {
        handle(reports[i].address, static_cast<short>(reports[i].address_lsb));
      }
    }
    if (const uint64_t dropped = g_dropped.load(std::memory_order_relaxed); dropped != dropped_seen) {
      spdlog::error("memory-failure monitor: {} report(s) lost (the queue was full); those pages are found when a read "
                    "faults",
                    dropped - dropped_seen);
      dropped_seen = dropped;
    }
    if (fds[1].revents & POLLIN) return;
  }
}

void MemoryFailureMonitor::handle(uintptr_t address, short address_lsb) {
  // The kernel tracks poison per 4 KiB page, but reports it per page of the mapping: a devdax
  // device mapped in 2 MiB pages (its default alignment) reports the whole 2 MiB, from its start.
  // All of it is treated as bad: nothing says which 4 KiB went.
  const uint64_t extent = uint64_t{1} << std::clamp<int>(address_lsb, 12, 30);
  const uintptr_t begin = address & ~(extent - 1);
  {
    std::lock_guard lock(g_regions_mutex);
    for (const Region* region : g_regions) {
      const auto base = reinterpret_cast<uintptr_t>(region->base());
      if (address >= base && address - base < region->size()) {
        const uint64_t offset = std::max(begin, base) - base;
        region->record_memory_failure(offset, std::min<uint64_t>(begin + extent - base, region->size()) - offset);
        pmem_reports_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
  }
  other_reports_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("memory failure reported at address {:#x} (2^{} bytes), outside every pmem region: the kernel has "
                "taken the page away from the daemon",
                address, address_lsb);
}

}  // namespace pcached::pmem

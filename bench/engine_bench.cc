// Engine benchmark, in process, no ublk: 4 KiB / 64 KiB / 1 MiB random and sequential writes and
// cached reads on 1 and 2 queues (IOPS, MiB/s, latency percentiles), against the raw copy
// bandwidth of the same region measured in the same run; plus the recovery time of a full cache
// and the DRAM the index takes per extent; the hit ratio of GC's cost-benefit victim choice against
// FIFO on a skewed (zipf) read workload; and foreground write latency with writeback running
// against writeback held back.
//
//   pcached-engine-bench [--json] [--quick] [--region-size 1G]
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thread>

#include "backing/backing_device.h"
#include "cache/extent_index.h"
#include "common/cycle_clock.h"
#include "format/layout.h"
#include "frontend/sync_queue.h"
#include "pcached/cache.h"
#include "pcached/pmem_writer.h"
#include "pmem/throughput_meter.h"

using namespace pcached;
using Clock = std::chrono::steady_clock;

namespace {

class TempFile {
 public:
  TempFile(const std::string& name, uint64_t size) : path_("/dev/shm/pcached-bench-" + name + "-" + std::to_string(::getpid())) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) throw std::runtime_error("cannot create " + path_);
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Cell {
  std::string op;       // "write" or "read"
  std::string pattern;  // "random" or "sequential"
  uint32_t block;       // bytes
  unsigned queues;
  uint64_t ops = 0;
  double seconds = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double iops() const { return static_cast<double>(ops) / seconds; }
  double mib_s() const { return iops() * block / (1024.0 * 1024.0); }
};

double percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t index = std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())));
  return sorted[index];
}

// Runs one cell: each queue thread issues its share of I/O over its own slice of the working set.
Cell run_cell(cache::Cache& cache, const std::string& op, const std::string& pattern, uint32_t block, unsigned queues,
              uint64_t working_set, double seconds, uint64_t max_ops_per_queue = UINT64_MAX) {
  Cell cell{op, pattern, block, queues};
  std::vector<std::vector<double>> latencies(queues);
  std::vector<uint64_t> counts(queues, 0);
  // When each queue's I/O loop began and ended: the cell's time is the span of the loops, without
  // creating the queues (a journal segment and a control-area update each), which is setup, not I/O.
  std::vector<Clock::time_point> loop_begin(queues), loop_end(queues);
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  const uint64_t slice = working_set / queues;
  const uint32_t sectors = block / 512;
  const auto start = Clock::now();
  for (unsigned q = 0; q < queues; ++q) {
    threads.emplace_back([&, q] {
      auto queue = frontend::SyncQueue::create(cache);
      if (!queue.ok()) {
        failed = true;
        return;
      }
      std::vector<std::byte> buffer(block, std::byte{0x5A});
      void* aligned = nullptr;
      if (posix_memalign(&aligned, 4096, block) != 0) return;
      std::memcpy(aligned, buffer.data(), block);
      auto* data = static_cast<std::byte*>(aligned);
      std::mt19937_64 rng(q + 1);
      const uint64_t blocks = slice / block;
      const uint64_t base = q * slice / 512;
      uint64_t next = 0;
      latencies[q].reserve(1 << 20);
      // One clock reading per I/O, which ends its latency and starts the next one's (three
      // steady_clock readings per I/O, as this loop had, cost 70 ns: 12 % of a 4 KiB write). The
      // loop's own work between two I/Os (a random number, a vector append) is counted in.
      constexpr uint64_t kDeadlineCheckEvery = 64;  // I/Os between looks at the cell's clock
      loop_begin[q] = Clock::now();
      CycleClock::Ticks before = CycleClock::now();
      // At least one I/O per queue, however slow the build (sanitizers) or the host: a cell never
      // reports 0 operations.
      while (counts[q] < max_ops_per_queue) {
        if (counts[q] % kDeadlineCheckEvery == 0 && counts[q] != 0 &&
            Clock::now() - start >= std::chrono::duration<double>(seconds)) {
          break;
        }
        const uint64_t index = pattern == "random" ? rng() % blocks : next++ % blocks;
        const uint64_t sector = base + index * sectors;
        const int rc = op == "write" ? queue.value()->write(sector, sectors, data) : queue.value()->read(sector, sectors, data);
        const CycleClock::Ticks after = CycleClock::now();
        if (rc != static_cast<int>(block)) {
          failed = true;
          break;
        }
        latencies[q].push_back(std::chrono::duration<double, std::micro>(CycleClock::between(before, after)).count());
        before = after;
        ++counts[q];
      }
      loop_end[q] = Clock::now();
      std::free(aligned);
    });
  }
  for (auto& thread : threads) thread.join();
  cell.seconds = std::chrono::duration<double>(*std::max_element(loop_end.begin(), loop_end.end()) -
                                               *std::min_element(loop_begin.begin(), loop_begin.end()))
                     .count();
  if (failed) throw std::runtime_error("an I/O failed during " + op + " " + pattern);
  std::vector<double> all;
  for (unsigned q = 0; q < queues; ++q) {
    cell.ops += counts[q];
    all.insert(all.end(), latencies[q].begin(), latencies[q].end());
  }
  std::sort(all.begin(), all.end());
  cell.p50_us = percentile(all, 0.50);
  cell.p99_us = percentile(all, 0.99);
  cell.p999_us = percentile(all, 0.999);
  return cell;
}

// Raw copy bandwidth of the region at a size, the references the engine is measured against:
// - nt_mib_s: NT copy + fence, what a write costs at least;
// - ordered_mib_s: NT copy + fence, then one 64-byte line + fence: what a write costs at least when
//   its key (a key set of one line, appended like a journal) must not be durable before its data
//   (format version 1; version 2 puts both behind one fence, so the engine can beat this one);
// - read_mib_s: plain memcpy out of the region, what a cached read costs at least.
struct RawCopy {
  double nt_mib_s = 0;
  double ordered_mib_s = 0;
  double read_mib_s = 0;
};

RawCopy raw_copy(const std::string& region_path, uint32_t block) {
  pmem::RegionOptions options;
  options.path = region_path;
  options.min_size = 0;
  auto region = pmem::Region::open(options).value();
  pmem::CopyPolicy policy(pmem::PolicyTable{}, "bench");
  pmem::PmemWriter writer(*region, policy);
  std::vector<std::byte> source(block, std::byte{1});
  // The key lines cycle through the first MiB of the data area, the copies go to the rest.
  constexpr uint64_t kKeyArea = 1 * MiB;
  const uint64_t key_area_offset = format::kDataStart;
  pmem::MeterOptions meter;
  meter.area_offset = format::kDataStart + kKeyArea;
  meter.area_length = std::min<uint64_t>(256 * MiB, region->size() - meter.area_offset);
  // A fresh mapping faults on the first touch of each page; the engine's mapping had long been
  // touched when it was measured, so the reference must be too.
  volatile std::byte sink_byte{};
  for (uint64_t offset = 0; offset < kKeyArea + meter.area_length; offset += 4096) {
    sink_byte = region->base()[key_area_offset + offset];
  }
  (void)sink_byte;
  meter.rounds = 5;
  const std::byte key_line[64] = {};
  uint64_t key_cursor = 0;
  const auto writes = pmem::measure_copy_throughput(
      {[&](uint64_t offset, const void* src, size_t len) {
         writer.copy_nodrain(offset, src, len, pmem::CopyMethod::NonTemporal);
         writer.drain();
       },
       [&](uint64_t offset, const void* src, size_t len) {
         writer.copy_nodrain(offset, src, len, pmem::CopyMethod::NonTemporal);
         writer.drain();
         writer.copy_nodrain(key_area_offset + key_cursor, key_line, sizeof key_line, pmem::CopyMethod::NonTemporal);
         writer.drain();
         key_cursor = (key_cursor + sizeof key_line) % kKeyArea;
       }},
      source.data(), block, meter);
  std::byte* base = region->base();
  std::vector<std::byte> sink(block);
  const auto read = pmem::measure_copy_throughput(
      {[&](uint64_t offset, const void*, size_t len) { std::memcpy(sink.data(), base + offset, len); }}, source.data(),
      block, meter);
  return {writes->at(0), writes->at(1), read->front()};
}

// DRAM per extent: what the index's trees hold for many non-adjacent 4 KiB extents, inserted in
// random order (so nodes are as full as they get in practice, not as after an ordered load).
double index_bytes_per_extent(uint64_t extents) {
  auto index = std::make_unique<cache::ExtentIndex>();
  std::vector<uint64_t> order(extents);
  for (uint64_t i = 0; i < extents; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  for (uint64_t i : order) index->insert(i * 16, 8, i * 4096, i + 1, 0);
  return static_cast<double>(index->memory_bytes()) / static_cast<double>(index->extents());
}

cache::CacheOptions bench_options(const std::string& region, const std::string& backing, uint64_t region_size) {
  cache::CacheOptions options;
  options.region_path = region;
  options.backing_path = backing;
  options.format = true;
  // The default 16 MiB segments, or smaller ones when a small region would hold too few.
  options.segment_size = region_size >= 512 * MiB ? 16 * MiB : 2 * MiB;
  // Sequential runs measure the engine, not the bypass to the backing file.
  options.tunables.sequential_cutoff = 0;
  // Writeback flat out where a cell does not hold it back: its interference at its heaviest.
  options.tunables.writeback_rate = 0;
  options.allow_volatile_writeback = true;  // a /dev/shm file stands in for pmem
  options.copy_policy.spec = pmem::parse_policy_spec("nt").value();
  return options;
}

// Zipf-distributed 4 KiB block numbers over `blocks`, hot blocks scattered over the device.
class ZipfBlocks {
 public:
  ZipfBlocks(uint64_t blocks, double theta, uint64_t seed) : cdf_(blocks), placement_(blocks), rng_(seed) {
    double sum = 0;
    for (uint64_t i = 0; i < blocks; ++i) cdf_[i] = (sum += 1.0 / std::pow(static_cast<double>(i + 1), theta));
    for (double& value : cdf_) value /= sum;
    for (uint64_t i = 0; i < blocks; ++i) placement_[i] = i;
    std::shuffle(placement_.begin(), placement_.end(), rng_);
  }
  uint64_t next() {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    const auto rank = static_cast<uint64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    return placement_[std::min<uint64_t>(rank, placement_.size() - 1)];
  }

 private:
  std::vector<double> cdf_;
  std::vector<uint64_t> placement_;
  std::mt19937_64 rng_;
};

// Read hit ratio of a zipf workload on a cache ten times smaller than the data, after a warm-up.
double zipf_hit_ratio(const std::string& gc_policy, uint64_t reads) {
  const uint64_t region_size = 64 * MiB, device_size = 512 * MiB;
  TempFile region("zipf-region", region_size);
  TempFile backing("zipf-backing", device_size);
  cache::CacheOptions options = bench_options(region.path(), backing.path(), region_size);
  if (!cache::apply_setting(options.tunables, "gc_policy", gc_policy).ok()) std::abort();
  auto cache = cache::Cache::open(options).value();
  double ratio = 0;
  {
    auto queue = frontend::SyncQueue::create(*cache).value();
    ZipfBlocks blocks(device_size / 4096, 0.99, 11);
    void* aligned = nullptr;
    if (posix_memalign(&aligned, 4096, 4096) != 0) std::abort();
    auto read = [&] {
      if (queue->read(blocks.next() * 8, 8, static_cast<std::byte*>(aligned)) != 4096) std::abort();
    };
    for (uint64_t i = 0; i < reads; ++i) read();
    const cache::CacheStats before = cache->stats();
    for (uint64_t i = 0; i < reads; ++i) read();
    const cache::CacheStats after = cache->stats();
    ratio = static_cast<double>(after.read_hits - before.read_hits) / static_cast<double>(reads);
    std::free(aligned);
  }
  cache->abandon();
  return ratio;
}

// Foreground 4 KiB random writes (a fixed count, within the cache's room) with writeback running
// flat out, and with writeback held back (rate limit of 1 byte/s, never idle, no watermark).
// The write goal, measured in rounds so that host noise hits the engine and its reference alike.
// Each round measures the reference (NT copy + fence of 4 KiB at random offsets) on a region file,
// then 4 KiB random writes into a freshly formatted cache on that same file: once with writeback
// held back, so that the queue's core and the memory system are the write path's alone (the
// goal's "per core"), and once with writeback running on the other core, copying to a backing file
// in RAM as fast as it can. The medians of the rounds' ratios are reported; the latency cells are
// the round with the median running ratio.
struct WriteGoal {
  double nt_mib_s = 0;       // the reference, median of the rounds
  double ordered_mib_s = 0;  // the ordered (data, then key) reference, median of the rounds
  double held_ratio = 0;     // writeback held back
  double running_ratio = 0;  // writeback running
  double held_vs_ordered = 0;
  Cell held, running;
};

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

WriteGoal measure_write_goal(uint64_t writes, unsigned rounds) {
  const uint64_t region_size = 512 * MiB;
  TempFile region("wb-region", region_size);
  TempFile backing("wb-backing", region_size);
  struct Round {
    double nt, ordered, held_ratio, running_ratio;
    Cell held, running;
  };
  std::vector<Round> results;
  for (unsigned round = 0; round < rounds; ++round) {
    Round r{};
    const RawCopy reference = raw_copy(region.path(), 4096);
    r.nt = reference.nt_mib_s;
    r.ordered = reference.ordered_mib_s;
    for (bool held_back : {true, false}) {
      cache::CacheOptions options = bench_options(region.path(), backing.path(), region_size);
      options.force = true;  // each run formats over the last
      if (held_back) {
        options.tunables.writeback_rate = 1;
        options.tunables.writeback_idle_ms = 0;
        options.tunables.writeback_high = 100;
      }
      auto cache = cache::Cache::open(options).value();
      Cell cell = run_cell(*cache, "write", "random", 4096, 1, 64 * MiB, 60.0, writes);
      cache->abandon();
      (held_back ? r.held : r.running) = cell;
      (held_back ? r.held_ratio : r.running_ratio) = cell.mib_s() / r.nt;
    }
    results.push_back(r);
  }
  std::vector<double> nt, ordered, held, running, held_vs_ordered;
  for (const Round& r : results) {
    nt.push_back(r.nt);
    ordered.push_back(r.ordered);
    held.push_back(r.held_ratio);
    running.push_back(r.running_ratio);
    held_vs_ordered.push_back(r.held_ratio * r.nt / r.ordered);
  }
  WriteGoal goal{median_of(nt), median_of(ordered), median_of(held), median_of(running), median_of(held_vs_ordered), {}, {}};
  const Round& middle = *std::find_if(results.begin(), results.end(),
                                      [&](const Round& r) { return r.running_ratio == goal.running_ratio; });
  goal.held = middle.held;
  goal.running = middle.running;
  return goal;
}

// The read goal, in rounds as the write goal: each round measures the reference (plain memcpy of
// 4 KiB out of random offsets of the region file's first 256 MiB) and then 4 KiB random read
// hits over 256 MiB of a fresh cache on that same file, written in 1 MiB requests and written
// back before the reads start (so that writeback and GC are quiet: the read path alone). Returns
// the median ratio and the median reference.
std::pair<double, double> measure_read_goal(uint64_t reads, unsigned rounds) {
  const uint64_t region_size = 512 * MiB;
  const uint64_t read_set = 256 * MiB;
  TempFile region("read-region", region_size);
  TempFile backing("read-backing", region_size);
  std::vector<double> references, ratios;
  void* aligned = nullptr;
  if (posix_memalign(&aligned, 4096, MiB) != 0) std::abort();
  std::memset(aligned, 0x3C, MiB);
  auto* data = static_cast<std::byte*>(aligned);
  for (unsigned round = 0; round < rounds; ++round) {
    const double reference = raw_copy(region.path(), 4096).read_mib_s;
    cache::CacheOptions options = bench_options(region.path(), backing.path(), region_size);
    options.force = true;  // each round formats over the last
    auto cache = cache::Cache::open(options).value();
    {
      auto queue = frontend::SyncQueue::create(*cache).value();
      for (uint64_t offset = 0; offset < read_set; offset += MiB) {
        if (queue->write(offset / 512, MiB / 512, data) != static_cast<int>(MiB)) throw std::runtime_error("a fill failed");
      }
    }
    if (!cache->flush_all().ok()) throw std::runtime_error("the read goal's cache did not write back");
    const Cell cell = run_cell(*cache, "read", "random", 4096, 1, read_set, 60.0, reads);
    cache->abandon();
    references.push_back(reference);
    ratios.push_back(cell.mib_s() / reference);
  }
  std::free(aligned);
  return {median_of(ratios), median_of(references)};
}

// 4 KiB random writes into a fresh cache's free space, handed over `batch` at a time the way the
// ublk frontend hands over what one wake-up of a queue brings (at queue depth `batch`): one fence
// then covers the whole batch. Returns the writes per second.
double batched_write_iops(uint64_t writes, unsigned batch) {
  const uint64_t region_size = 512 * MiB;
  TempFile region("batch-region", region_size);
  TempFile backing("batch-backing", region_size);
  auto cache = cache::Cache::open(bench_options(region.path(), backing.path(), region_size)).value();
  auto queue = frontend::SyncQueue::create(*cache).value();
  void* aligned = nullptr;
  if (posix_memalign(&aligned, 4096, 4096) != 0) std::abort();
  std::memset(aligned, 0x5A, 4096);
  std::mt19937_64 rng(5);
  const uint64_t blocks = 64 * MiB / 4096;
  std::vector<cache::Request> requests(batch);
  uint64_t done = 0;
  const auto start = Clock::now();
  while (done < writes) {
    for (cache::Request& request : requests) {
      request = {cache::Op::Write, rng() % blocks * 8, 8, static_cast<std::byte*>(aligned), false};
    }
    for (int result : queue->execute_batch(requests)) {
      if (result != 4096) throw std::runtime_error("a batched write failed");
    }
    done += batch;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::free(aligned);
  queue.reset();
  cache->abandon();
  return static_cast<double>(done) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcached engine benchmark (in process, no ublk)"};
  bool json = false, quick = false;
  std::string region_size_text = "1G";
  app.add_flag("--json", json, "print the figures as JSON");
  app.add_flag("--quick", quick, "short runs (a smoke test)");
  app.add_option("--region-size", region_size_text, "size of the emulated pmem region")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  CycleClock::calibrate();  // before the first latency is taken
  // Figures go to stdout (tables, JSON); the log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("pcached"));
  spdlog::set_level(spdlog::level::warn);
  ::setenv("PMEM2_FORCE_GRANULARITY", "CACHE_LINE", 1);

  const uint64_t region_size = parse_size(region_size_text).value();
  const double cell_seconds = quick ? 0.05 : 0.4;
  TempFile region("region", region_size);
  const uint64_t device_size = 2 * region_size;
  TempFile backing("backing", device_size);

  cache::CacheOptions options = bench_options(region.path(), backing.path(), region_size);
  options.copy_policy.spec = pmem::parse_policy_spec("auto").value();
  auto opened = cache::Cache::open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "pcached-engine-bench: %s\n", opened.status().message().c_str());
    return 1;
  }
  auto cache = std::move(opened.value());
  // Writes go over half the cache's capacity (writeback and GC stay busy); reads over a quarter of
  // it, written just before, so that they are all hits.
  const uint64_t capacity = region_size - format::kDataStart;
  const uint64_t write_set = capacity / 2 / MiB * MiB;
  const uint64_t read_set = capacity / 4 / MiB * MiB;
  auto warm = [&] {
    auto queue = frontend::SyncQueue::create(*cache).value();
    void* aligned = nullptr;
    if (posix_memalign(&aligned, 4096, MiB) != 0) std::abort();
    std::memset(aligned, 0x33, MiB);
    for (uint64_t offset = 0; offset < read_set; offset += MiB) {
      queue->write(offset / 512, MiB / 512, static_cast<std::byte*>(aligned));
    }
    std::free(aligned);
  };

  std::vector<Cell> cells;
  for (uint32_t block : {4096u, 65536u, 1048576u}) {
    for (const char* pattern : {"random", "sequential"}) {
      for (unsigned queues : {1u, 2u}) {
        cells.push_back(run_cell(*cache, "write", pattern, block, queues, write_set, cell_seconds));
        warm();
        cells.push_back(run_cell(*cache, "read", pattern, block, queues, read_set, cell_seconds));
      }
    }
  }
  const cache::CacheStats stats = cache->stats();
  const std::string policy = cache->copy_policy_description();
  if (!cache->detach(false).ok()) return 1;
  cache.reset();

  const RawCopy raw = raw_copy(region.path(), 4096);
  const double nt_4k = raw.nt_mib_s;
  const double read_4k = raw.read_mib_s;

  // Recovery of a full cache: fill it with dirty data that cannot be written back, then crash.
  double recovery_seconds = 0;
  uint64_t recovered_keys = 0;
  {
    options.format = false;
    options.copy_policy.spec = pmem::parse_policy_spec("nt").value();
    auto full = cache::Cache::open(options).value();
    full->backing_faults().writes.count = -1;
    {
      auto queue = frontend::SyncQueue::create(*full).value();
      void* aligned = nullptr;
      if (posix_memalign(&aligned, 4096, 4096) != 0) return 1;
      std::memset(aligned, 7, 4096);
      const uint64_t writes = (region_size - format::kDataStart) * 6 / 10 / 4096;
      for (uint64_t i = 0; i < writes; ++i) queue->write(i * 8 * 3 % (device_size / 512 - 8), 8, static_cast<std::byte*>(aligned));
      std::free(aligned);
    }
    full->abandon();
    full.reset();
    const auto t0 = Clock::now();
    auto reopened = cache::Cache::open(options).value();
    recovery_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    recovered_keys = reopened->stats().recovered_keys;
    reopened->abandon();
  }
  const double bytes_per_extent = index_bytes_per_extent(quick ? 100000 : 1000000);
  const uint64_t zipf_reads = quick ? 20000 : 300000;
  const double zipf_fifo = zipf_hit_ratio("fifo", zipf_reads);
  const double zipf_cost = zipf_hit_ratio("cost-benefit", zipf_reads);
  const unsigned kGoalRounds = quick ? 1 : 5;
  const WriteGoal write_goal = measure_write_goal(quick ? 5000 : 60000, kGoalRounds);
  const Cell& writeback_running = write_goal.running;
  const Cell& writeback_held = write_goal.held;
  const unsigned kBatch = 16;
  const double batched_iops = batched_write_iops(quick ? 5000 : 60000, kBatch);

  auto find = [&](const char* op, const char* pattern, uint32_t block, unsigned queues) -> const Cell& {
    return *std::find_if(cells.begin(), cells.end(), [&](const Cell& c) {
      return c.op == op && c.pattern == pattern && c.block == block && c.queues == queues;
    });
  };
  // The goal is the engine's own write path: writes into free cache space (writeback running,
  // no GC needed). The table's write cells run with the cache full, where the sustained rate is
  // what writeback and GC free, i.e. the backing device's pace.
  const double batched_write_ratio = batched_iops * 4096 / MiB / write_goal.nt_mib_s;
  const double sustained_write_ratio = find("write", "random", 4096, 1).mib_s() / nt_4k;
  const auto [read_ratio, read_reference] = measure_read_goal(quick ? 5000 : 300000, kGoalRounds);

  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Cell& c : cells) {
      rows.push_back({{"op", c.op}, {"pattern", c.pattern}, {"block", c.block}, {"queues", c.queues},
                      {"iops", c.iops()}, {"mib_per_s", c.mib_s()}, {"p50_us", c.p50_us}, {"p99_us", c.p99_us},
                      {"p999_us", c.p999_us}});
    }
    nlohmann::json doc = {{"benchmark", "engine"},
                          {"region_bytes", region_size},
                          {"copy_policy", policy},
                          {"reference", {{"nt_copy_4k_mib_per_s", nt_4k},
                                         {"nt_copy_then_key_line_4k_mib_per_s", raw.ordered_mib_s},
                                         {"memcpy_read_4k_mib_per_s", read_4k}}},
                          {"cells", rows},
                          {"ratios", {{"write_4k_random_vs_nt_copy", write_goal.held_ratio},
                                      {"write_4k_random_vs_nt_copy_then_key_line", write_goal.held_vs_ordered},
                                      {"write_4k_random_writeback_running_vs_nt_copy", write_goal.running_ratio},
                                      {"write_4k_random_batched_vs_nt_copy", batched_write_ratio},
                                      {"write_4k_random_sustained_vs_nt_copy", sustained_write_ratio},
                                      {"read_4k_random_vs_copy", read_ratio}}},
                          {"read_goal", {{"rounds", kGoalRounds}, {"memcpy_read_4k_mib_per_s", read_reference}}},
                          {"recovery", {{"seconds", recovery_seconds}, {"keys", recovered_keys}, {"cache_bytes", region_size}}},
                          {"index_bytes_per_extent", bytes_per_extent},
                          {"zipf_hit_ratio", {{"reads", zipf_reads}, {"fifo", zipf_fifo}, {"cost_benefit", zipf_cost}}},
                          {"write_goal", {{"rounds", kGoalRounds}, {"nt_copy_4k_mib_per_s", write_goal.nt_mib_s},
                                          {"nt_copy_then_key_line_4k_mib_per_s", write_goal.ordered_mib_s},
                                          {"held_back_iops", writeback_held.iops()}}},
                          {"writeback_interference",
                           {{"writes", writeback_running.ops},
                            {"running_iops", writeback_running.iops()},
                            {"running", {{"p50_us", writeback_running.p50_us}, {"p99_us", writeback_running.p99_us},
                                         {"p999_us", writeback_running.p999_us}}},
                            {"held_back", {{"p50_us", writeback_held.p50_us}, {"p99_us", writeback_held.p99_us},
                                           {"p999_us", writeback_held.p999_us}}},
                            {"p99_ratio", writeback_running.p99_us / writeback_held.p99_us}}},
                          {"batched_writes", {{"batch", kBatch}, {"iops", batched_iops}}},
                          {"writeback_bytes", stats.writeback_bytes},
                          {"gc_runs", stats.gc_runs}};
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::printf("pcached engine benchmark: %s emulated pmem (cache-line flushes), backing file on /dev/shm\n",
              format_size(region_size).c_str());
  std::printf("copy policy: %s\n\n", policy.c_str());
  std::printf("%-6s %-10s %7s %6s %10s %10s %9s %9s %9s\n", "op", "pattern", "block", "queues", "IOPS", "MiB/s", "p50 us",
              "p99 us", "p99.9 us");
  for (const Cell& c : cells) {
    std::printf("%-6s %-10s %7s %6u %10.0f %10.0f %9.2f %9.2f %9.2f\n", c.op.c_str(), c.pattern.c_str(),
                format_size(c.block).c_str(), c.queues, c.iops(), c.mib_s(), c.p50_us, c.p99_us, c.p999_us);
  }
  std::printf("\nreference (same region, same run): NT copy + fence 4 KiB random %.0f MiB/s, memcpy out 4 KiB %.0f MiB/s\n",
              nt_4k, read_4k);
  std::printf("  NT copy + fence, then a 64-byte key line + fence (data durable before its key) %.0f MiB/s: %.2f of "
              "NT copy (the floor of format version 1's write; version 2 fences data and key together)\n",
              raw.ordered_mib_s, raw.ordered_mib_s / nt_4k);
  std::printf("4 KiB random write into free cache space, 1 queue, median of %u rounds (each against its own reference, "
              "NT copy + fence %.0f MiB/s):\n",
              kGoalRounds, write_goal.nt_mib_s);
  std::printf("  writeback held back (the write path per core): %.0f IOPS, %.2f of raw NT copy (goal >= 0.60), "
              "%.2f of NT copy then key line\n",
              writeback_held.iops(), write_goal.held_ratio, write_goal.held_vs_ordered);
  std::printf("  writeback running on the other core:           %.0f IOPS, %.2f of raw NT copy\n",
              writeback_running.iops(), write_goal.running_ratio);
  std::printf("  in batches of %u (ublk at QD %u), writeback running: %.0f IOPS, %.2f of raw NT copy\n", kBatch, kBatch,
              batched_iops, batched_write_ratio);
  std::printf("4 KiB random write on a full cache (GC and writeback pace it), 1 queue: %.2f of raw NT copy\n",
              sustained_write_ratio);
  std::printf("4 KiB random read hit, 1 queue, writeback quiet, median of %u rounds (each against its own reference, "
              "memcpy out %.0f MiB/s): %.2f of raw copy (goal >= 0.60)\n",
              kGoalRounds, read_reference, read_ratio);
  std::printf("recovery of a %s cache holding %lu dirty keys: %.3f s (goal < 1 s)\n", format_size(region_size).c_str(),
              static_cast<unsigned long>(recovered_keys), recovery_seconds);
  std::printf("index DRAM per extent: %.1f bytes (goal <= 48)\n", bytes_per_extent);
  std::printf("zipf(0.99) 4 KiB reads, cache 1/8 of the data, %lu reads after as many to warm up: hit ratio "
              "FIFO %.3f, cost-benefit %.3f\n",
              static_cast<unsigned long>(zipf_reads), zipf_fifo, zipf_cost);
  std::printf("4 KiB random writes, p50/p99/p99.9 us: writeback running %.2f/%.2f/%.2f, held back %.2f/%.2f/%.2f "
              "(p99 ratio %.2f)\n",
              writeback_running.p50_us, writeback_running.p99_us, writeback_running.p999_us, writeback_held.p50_us,
              writeback_held.p99_us, writeback_held.p999_us, writeback_running.p99_us / writeback_held.p99_us);
  std::printf("during the runs: %s written back, %lu GC runs\n", format_size(stats.writeback_bytes).c_str(),
              static_cast<unsigned long>(stats.gc_runs));
  return 0;
}

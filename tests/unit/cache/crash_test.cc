// Crash consistency: every acknowledged operation survives a SIGKILL of the process and a power
// cut that drops whatever was not yet flushed and fenced (or keeps a random part of it, whole or
// torn at 8-byte granularity); no sector ever reads back torn, invented or older than what was
// acknowledged. The workload mixes writes (single and batched), write-zeroes, discards and reads
// on a cache small enough that writeback and GC reclaim segments all the time.
//
// Crash points per test: 200 SIGKILLs and 300 power cuts by default, times PCACHED_TEST_SCALE.
// For campaigns (scripts/crash-campaign.sh): PCACHED_CRASH_POINTS sets both counts,
// PCACHED_CRASH_SEED varies the workloads, and PCACHED_CRASH_DUMP_DIR receives the region and
// backing images of the first failure (as they were before recovery). Each test prints its totals.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <thread>

#include "cache/commit_protocol.h"
#include "backing/backing_device.h"
#include "format/layout.h"
#include "pmem/persistence_simulator.h"
#include "support/cache_fixture.h"
#include "support/crash_model.h"
#include "support/test_scale.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

// 12 segments of 1 MiB for 24 MiB of device: the workload keeps GC reclaiming.
constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 24 * MiB;
constexpr uint64_t kDeviceSectors = kBackingBytes / kSector;

unsigned crash_points(unsigned usual) { return env_count("PCACHED_CRASH_POINTS", scaled(usual)); }
uint64_t crash_seed(uint64_t usual) { return usual + env_count("PCACHED_CRASH_SEED", 0) * 1000; }

// Keeps the images a failure was found on, for a closer look (PCACHED_CRASH_DUMP_DIR).
void dump_failure(const std::vector<std::byte>& region, const std::vector<std::byte>& backing) {
  static bool dumped = false;
  const char* dir = std::getenv("PCACHED_CRASH_DUMP_DIR");
  if (dir == nullptr || dumped) return;
  write_file(std::string(dir) + "/region", region);
  write_file(std::string(dir) + "/backing", backing);
  dumped = true;
}

// GC starts early (a quarter of the segments in use), so that even a short run reclaims. With a
// writeback rate, writeback mostly goes only as far as GC needs (the default's behaviour); with
// none (0) it runs flat out.
cache::CacheOptions small_cache_options(const CacheFiles& files, uint64_t writeback_rate) {
  cache::CacheOptions options = files.options();
  options.tunables.gc_threshold = 25;
  options.tunables.writeback_rate = writeback_rate;
  return options;
}


// The random workload: mostly writes of up to max_write sectors, and write-zeroes, discards
// (ranges up to 128 sectors) and reads.
struct WorkloadOp {
  cache::Op op;
  uint64_t sector;
  uint32_t sectors;
};

WorkloadOp next_op(std::mt19937_64& rng, uint32_t max_write, uint64_t span) {
  const unsigned dice = static_cast<unsigned>(rng() % 100);
  const cache::Op op = dice < 72   ? cache::Op::Write
                       : dice < 80 ? cache::Op::WriteZeroes
                       : dice < 87 ? cache::Op::Discard
                                   : cache::Op::Read;
  const uint32_t longest = op == cache::Op::Write ? max_write : 128;
  const uint64_t sector = rng() % span;
  const auto sectors = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(longest, span - sector));
  return {op, sector, sectors};
}

OpKind kind_of(cache::Op op) {
  return op == cache::Op::Write ? OpKind::Write : op == cache::Op::WriteZeroes ? OpKind::Zero : OpKind::Discard;
}

int expected_result(const WorkloadOp& op) {
  return op.op == cache::Op::Write || op.op == cache::Op::Read ? static_cast<int>(op.sectors * kSector) : 0;
}

// One batch of the workload as the frontend submits it, with the records the model needs.
struct Batch {
  std::vector<WorkloadOp> ops;
  std::vector<uint64_t> ids;  // per op; 0 for reads
  std::vector<std::vector<std::byte>> buffers;
  std::vector<cache::Request> requests;
  std::vector<OpRecord> records;  // the operations that change the device, in order

  // Operations over the first `span` sectors of the device.
  Batch(std::mt19937_64& rng, size_t count, uint32_t max_write, uint64_t span, uint64_t& next_id) {
    for (size_t i = 0; i < count; ++i) {
      const WorkloadOp op = next_op(rng, max_write, span);
      ops.push_back(op);
      if (op.op == cache::Op::Read) {
        ids.push_back(0);
        buffers.emplace_back(op.sectors * kSector);
      } else {
        ids.push_back(next_id++);
        records.push_back({ids.back(), op.sector, op.sectors, kind_of(op.op)});
        buffers.push_back(op.op == cache::Op::Write ? pattern(ids.back(), op.sector, op.sectors)
                                                    : std::vector<std::byte>());
      }
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      requests.push_back({ops[i].op, ops[i].sector, ops[i].sectors, buffers[i].empty() ? nullptr : buffers[i].data(), false});
    }
  }

  std::vector<int> execute(frontend::SyncQueue& queue) {
    return requests.size() == 1 ? std::vector<int>{queue.execute(requests[0])} : queue.execute_batch(requests);
  }

  // Applies the batch to the model in order, checking each read against the state it must see:
  // the operations before it (in the batch too) are done; those after it in the batch are under
  // way at the same time (the kernel hands a batch over at once, with no order among its requests),
  // so each sector may already show their effect (a read miss can reach the backing device after
  // writeback stored a later write there). False on the first wrong read.
  bool apply_and_check_reads(CrashModel& model, uint64_t newest_issued, CrashTotals& reads, const std::string& where) {
    bool ok = true;
    size_t record = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].op == cache::Op::Read) {
        const std::span<const OpRecord> later(records.data() + record, records.size() - record);
        ok = model.verify(buffers[i].data(), ops[i].sector, ops[i].sectors, later, newest_issued, false, reads,
                          where + ", read " + std::to_string(ops[i].sector) + "+" + std::to_string(ops[i].sectors)) &&
             ok;
      } else {
        model.apply(records[record++]);
      }
    }
    return ok;
  }
};

// Attaches a cache to copies of a region image and a backing device image (recovery), and checks
// every sector of it against the model.
struct RecoveredCopy {
  CacheFiles files{0, 0};
  RecoveredCopy(const std::vector<std::byte>& image, const std::vector<std::byte>& backing) {
    write_file(files.region.path(), image);
    write_file(files.backing.path(), backing);
  }
  cache::CacheOptions options(const std::string& policy) const {
    cache::CacheOptions options = files.options();
    options.force = true;  // the copy of the backing file is another inode
    options.copy_policy.spec = pmem::parse_policy_spec(policy).value();
    return options;
  }
};

bool verify_recovery(const RecoveredCopy& copy, const std::string& policy, CrashModel& model,
                     std::span<const OpRecord> in_flight, uint64_t newest_issued, CrashTotals& totals,
                     const std::string& where, pmem::PersistObserver* observer = nullptr) {
  ForcedGranularity cache_line("CACHE_LINE");
  cache::CacheOptions options = copy.options(policy);
  options.persist_observer = observer;
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) {
    ++totals.wrong;
    totals.fail(where + ": recovery failed: " + cache.status().message());
    return false;
  }
  bool ok = true;
  {
    auto queue = make_queue(*cache.value());
    ok = model.verify_device(*queue, in_flight, newest_issued, false, totals, where);
  }
  cache.value()->abandon();
  return ok;
}

// A region file mapped a second time, for a persistence simulator to watch.
std::unique_ptr<pmem::Region> open_view(const std::string& region_path) {
  ForcedGranularity cache_line("CACHE_LINE");
  pmem::RegionOptions region_options;
  region_options.path = region_path;
  region_options.min_size = 0;
  return std::move(pmem::Region::open(region_options).value());
}

// A second power cut while the recovered cache attaches, replays, writes back and fills the
// checking reads into pmem; then recovery again, and the same check.
bool verify_recovery_cut_again(const RecoveredCopy& copy, const std::string& policy, CrashModel& model,
                               std::span<const OpRecord> in_flight, uint64_t newest_issued, const pmem::PersistenceSimulator::PowerCut& cut,
                               uint64_t at, CrashTotals& totals, const std::string& where) {
  const std::unique_ptr<pmem::Region> view = open_view(copy.files.region.path());
  pmem::PersistenceSimulator simulator(*view);
  std::mutex mutex;
  std::optional<std::pair<std::vector<std::byte>, std::vector<std::byte>>> second;
  simulator.arm_cut(at, cut, [&](std::vector<std::byte> image) {
    std::lock_guard lock(mutex);
    second.emplace(std::move(image), read_file(copy.files.backing.path()));
  });
  CrashTotals first;  // what the first recovery served before the cut counts as checked, too
  const bool before_ok = verify_recovery(copy, policy, model, in_flight, newest_issued, first, where, &simulator);
  totals.sectors += first.sectors;
  totals.lost += first.lost;
  totals.wrong += first.wrong;
  for (const std::string& failure : first.failures) totals.fail(failure);
  // The cache is gone: no more events. If they were fewer than `at`, the power fails now.
  if (!simulator.cut_done()) {
    std::vector<std::byte> image = simulator.image_after_power_cut(cut);
    std::lock_guard lock(mutex);
    second.emplace(std::move(image), read_file(copy.files.backing.path()));
  }
  std::lock_guard lock(mutex);
  const RecoveredCopy again(second->first, second->second);
  return verify_recovery(again, policy, model, in_flight, newest_issued, totals, where + ", cut again at event " +
                                                                                    std::to_string(at) + " of recovery") &&
         before_ok;
}

}  // namespace

TEST_CASE("power cuts lose no acknowledged operation while writeback and GC run",
          "[cache][crash][power-cut][random-cuts]") {
  // The policy decides which stores stream (durable at the next fence) and which go through the
  // cache (dirty until flushed, then durable at the next fence). The commit protocol, whether a
  // write's data shares its fence with the key set (which carries a digest replay checks) or is
  // fenced first: each in one run, and a mix by size in the third.
  // Writeback runs flat out in the first and the fourth, as far as GC needs (and at a trickle) in
  // the second and third, and all but stopped (1 byte/s) in the last. The last two workloads span
  // 1 MiB of the device, which fits in the cache: the segments GC reclaims hold a little of it,
  // which GC moves rather than evicts; in the last, that data is mostly dirty, and GC moves it
  // under keys of its own.
  // The last two take turns between two queues, batch by batch, as the ublk frontend's queue
  // threads do: writeback then merges two journals whose key numbers interleave (three, with GC's
  // own in the last), and the clean horizon is the lowest number pending in any of them.
  const auto [policy, usual_seed, shared_fence_classes, writeback_rate, span, queue_count] =
      GENERATE(table<std::string, uint64_t, uint32_t, uint64_t, uint64_t, size_t>(
          {{"nt", 7, cache::kAllClassesShareFence, 0, kDeviceSectors, 1},
           {"clflushopt", 8, 0, MiB, kDeviceSectors, 1},
           {"threshold:8K", 9, 0b111000, MiB, kDeviceSectors, 1},
           {"clflushopt", 10, cache::kAllClassesShareFence, 0, MiB / kSector, 1},
           {"threshold:8K", 11, 0b111000, 1, MiB / kSector, 1},
           {"nt", 12, 0, 0, kDeviceSectors, 2},
           {"threshold:8K", 13, cache::kAllClassesShareFence, 1, MiB / kSector, 2}}));
  const uint64_t seed = crash_seed(usual_seed);
  const unsigned cuts = (crash_points(300) + 4) / 5;  // per workload: 420 in all by default
  INFO("policy " << policy << ", span " << span << " sectors, seed " << seed << ", " << cache::describe_commit_protocol(shared_fence_classes)
                 << ", writeback rate " << writeback_rate << ", " << queue_count << " queue(s)");

  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();
  const std::unique_ptr<pmem::Region> view = open_view(files.region.path());
  pmem::PersistenceSimulator simulator(*view);
  cache::CacheOptions options = small_cache_options(files, writeback_rate);
  // At the trickle, GC is to find dirty data to move, and whether any was left to it must not be
  // a race. Checking a cut leaves the cache idle for longer than writeback_idle_ms under
  // ThreadSanitizer, and idle writeback cleaned everything. Over 25 % of this small cache, GC is
  // needed as soon as two queues hold their segments: it takes each segment the moment it is
  // sealed (all live, not worth moving) and, short of victims, writes back what the oldest hold.
  // Over half, sealed segments gather, dirty, and overwrites leave the oldest little live.
  if (writeback_rate == 1) {
    options.tunables.writeback_idle_ms = 0;
    options.tunables.gc_threshold = 50;
  }
  options.copy_policy.spec = pmem::parse_policy_spec(policy).value();
  options.commit_shared_fence_classes = shared_fence_classes;
  options.persist_observer = &simulator;
  auto cache = open_cache(options);
  std::vector<std::unique_ptr<frontend::SyncQueue>> queues;
  for (size_t i = 0; i < queue_count; ++i) queues.push_back(make_queue(*cache));
  uint64_t batches = 0;

  std::mt19937_64 rng(seed);
  CrashModel model(kDeviceSectors);
  CrashTotals totals, reads;
  std::atomic<uint64_t> newest_issued{0};
  struct Captured {
    std::vector<std::byte> image, backing;
    uint64_t at;
    uint64_t newest_issued;
  };
  std::mutex capture_mutex;
  std::optional<Captured> captured;

  enum CutKind { kStrict, kPartial, kPartialTorn, kAllTorn, kCutKinds };
  static constexpr const char* kCutNames[kCutKinds] = {"strict", "partial", "partial+torn", "all+torn"};
  unsigned done = 0, by_kind[kCutKinds] = {}, nested = 0, during_zero_or_discard = 0;
  pmem::PersistenceSimulator::PowerCut cut;
  uint64_t cut_at = 0;
  auto arm = [&] {
    // Rotate: drop every line not yet durable; keep a random share of them; the same, torn at
    // 8-byte granularity; keep them all, torn.
    cut = {};
    const auto kind = static_cast<CutKind>(done % kCutKinds);
    std::uniform_real_distribution<double> share(0.05, 0.95);
    cut.keep_unpersisted = kind == kStrict ? 0.0 : kind == kAllTorn ? 1.0 : share(rng);
    cut.tear_words = kind == kPartialTorn || kind == kAllTorn;
    cut.seed = rng();
    cut_at = simulator.events() + 1 + rng() % 400;
    simulator.arm_cut(cut_at, cut, [&, at = cut_at](std::vector<std::byte> image) {
      Captured c{std::move(image), read_file(files.backing.path()), at, newest_issued.load()};
      std::lock_guard lock(capture_mutex);
      captured = std::move(c);
    });
  };
  arm();

  // Reads during the workload: the first wrong one ends the test, with what it found.
  auto check_reads = [&](bool ok) {
    for (const std::string& failure : reads.failures) UNSCOPED_INFO(failure);
    REQUIRE(ok);
  };
  // What the workload is there to cut: GC reclaiming, moving (in the small spans) and moving dirty
  // data (at the trickle). How soon GC first does each depends on how the threads run, and the
  // scaled-down runs (ThreadSanitizer: 9 cuts) can end before it has: past the planned cuts, the
  // cutting goes on, up to four times as long, until GC has done it all at least once.
  const bool expect_moves = span < kDeviceSectors;
  const bool expect_dirty_moves = writeback_rate == 1;
  const auto exercised = [&] {
    const cache::CacheStats stats = cache->stats();
    return stats.segments_reclaimed > 0 && (!expect_moves || stats.gc_moved_bytes > 0) &&
           (!expect_dirty_moves || stats.gc_moved_dirty_bytes > 0);
  };
  bool done_exercising = false;
  uint64_t next_id = 1;
  while (done < cuts || (!done_exercising && done < 4 * cuts)) {
    // Single requests and batches (as the ublk frontend submits them) alternate.
    const size_t count = rng() % 2 == 0 ? 1 : 2 + rng() % 5;
    Batch batch(rng, count, 32, span, next_id);
    newest_issued.store(next_id - 1);
    const std::vector<int> results = batch.execute(*queues[batches++ % queues.size()]);
    const uint64_t acknowledged_at = simulator.events();
    for (size_t i = 0; i < results.size(); ++i) REQUIRE(results[i] == expected_result(batch.ops[i]));
    const std::string where = "policy " + policy + ", seed " + std::to_string(seed) + ", after write " +
                              std::to_string(next_id - 1);

    if (!simulator.cut_done()) {
      check_reads(batch.apply_and_check_reads(model, next_id - 1, reads, where));
      continue;
    }
    std::optional<Captured> c;
    {
      std::lock_guard lock(capture_mutex);
      c.swap(captured);
    }
    REQUIRE(c.has_value());
    // The batch counts as acknowledged only if it completed before the cut; otherwise those of
    // its operations that were issued by then were under way.
    std::vector<OpRecord> in_flight;
    const bool batch_acknowledged = acknowledged_at < c->at;
    if (batch_acknowledged) {
      check_reads(batch.apply_and_check_reads(model, next_id - 1, reads, where));
    } else {
      for (const OpRecord& record : batch.records) {
        if (record.id <= c->newest_issued) in_flight.push_back(record);
      }
      for (const OpRecord& record : in_flight) during_zero_or_discard += record.kind != OpKind::Write;
    }
    const auto kind = static_cast<CutKind>(done % kCutKinds);
    const std::string at = where + ", power cut " + std::to_string(done) + " (" + kCutNames[kind] + ", keep " +
                           std::to_string(cut.keep_unpersisted) + ", event " + std::to_string(c->at) + ")";
    const RecoveredCopy copy(c->image, c->backing);
    // Every fifth cut (of every kind in turn), the power fails again while the recovered cache
    // attaches, replays, writes back and is read.
    bool ok = true;
    if (done % 5 == 4) {
      pmem::PersistenceSimulator::PowerCut again;
      again.keep_unpersisted = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
      again.tear_words = rng() % 2 == 0;
      again.seed = rng();
      // Half of them early: while attaching and writing back what was replayed.
      const uint64_t again_at = 1 + rng() % (rng() % 2 == 0 ? 30 : 600);
      ok = verify_recovery_cut_again(copy, policy, model, in_flight, c->newest_issued, again, again_at, totals, at);
      ++nested;
    } else {
      ok = verify_recovery(copy, policy, model, in_flight, c->newest_issued, totals, at);
    }
    if (!ok) dump_failure(c->image, c->backing);
    ++by_kind[kind];
    ++done;
    if (done >= cuts && !done_exercising) done_exercising = exercised();
    if (!batch_acknowledged) check_reads(batch.apply_and_check_reads(model, next_id - 1, reads, where));
    arm();
  }
  const cache::CacheStats stats = cache->stats();
  queues.clear();
  cache->abandon();

  std::printf("power cuts (policy %s, %lu KiB span, %zu queue(s)): %s; %u strict, %u partial, %u partial+torn, %u all+torn, %u cut again "
              "during recovery, %u with a write-zeroes or discard under way; live reads: %lu sectors, losses=%lu, "
              "wrong=%lu; writeback %lu MiB, GC reclaimed %lu segments in %lu runs, moved %lu KiB (%lu KiB dirty), evicted %lu KiB\n",
              policy.c_str(), static_cast<unsigned long>(span * kSector / KiB), queue_count, totals.summary().c_str(), by_kind[kStrict], by_kind[kPartial], by_kind[kPartialTorn],
              by_kind[kAllTorn], nested, during_zero_or_discard, static_cast<unsigned long>(reads.sectors),
              static_cast<unsigned long>(reads.lost), static_cast<unsigned long>(reads.wrong),
              static_cast<unsigned long>(stats.writeback_bytes / MiB), static_cast<unsigned long>(stats.segments_reclaimed),
              static_cast<unsigned long>(stats.gc_runs), static_cast<unsigned long>(stats.gc_moved_bytes / KiB),
              static_cast<unsigned long>(stats.gc_moved_dirty_bytes / KiB), static_cast<unsigned long>(stats.gc_evicted_bytes / KiB));
  INFO(totals.failures_text());
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
  CHECK(stats.segments_reclaimed > 0);  // the cuts did land while GC was reclaiming
  if (expect_moves) CHECK(stats.gc_moved_bytes > 0);  // and moving
  if (expect_dirty_moves) CHECK(stats.gc_moved_dirty_bytes > 0);  // dirty data too
  CHECK(stats.gc_index_searches == 0);  // each run found its victims' data through their contents lists
}

using PowerCutCheck = std::function<void(const std::vector<std::byte>& image, uint64_t seed)>;

// Hands `check` the images of `count` power cuts of the simulator's present state, numbered on
// from `seed`: odd seeds keep each line not yet durable whole with probability `keep_whole`, even
// ones keep every such line but torn at 8-byte granularity.
void cut_power(pmem::PersistenceSimulator& simulator, uint64_t& seed, unsigned count, double keep_whole,
               const PowerCutCheck& check) {
  for (unsigned i = 0; i < count; ++i) {
    pmem::PersistenceSimulator::PowerCut cut;
    cut.seed = ++seed;
    cut.tear_words = cut.seed % 2 == 0;
    cut.keep_unpersisted = cut.tear_words ? 1.0 : keep_whole;
    check(simulator.image_after_power_cut(cut), cut.seed);
  }
}

// Forwards to a persistence simulator and, while armed, hands the images power cuts just before
// each fence would leave to a check: several per fence, alternately keeping every line not yet
// durable torn, and keeping nearly all of them whole (so that a record of many lines can land
// whole while another one does not).
class CutAtEachFence final : public pmem::PersistObserver {
 public:
  using Check = PowerCutCheck;
  explicit CutAtEachFence(pmem::PersistenceSimulator& simulator) : simulator_(simulator) {}
  void on_store(uint64_t offset, size_t len, pmem::StoreKind kind) override { simulator_.on_store(offset, len, kind); }
  void on_flush(uint64_t offset, size_t len) override { simulator_.on_flush(offset, len); }
  void on_fence() override {
    if (check_) cut_power(simulator_, seed_, cuts_per_fence_, 0.98, check_);
    simulator_.on_fence();
  }
  void arm(Check check, unsigned cuts_per_fence) {
    check_ = std::move(check);
    cuts_per_fence_ = cuts_per_fence;
  }
  void disarm() { check_ = nullptr; }

 private:
  pmem::PersistenceSimulator& simulator_;
  Check check_;  // set and used on the test's thread only: writeback is held, only the queue fences
  unsigned cuts_per_fence_ = 0;
  uint64_t seed_ = 0;
};

TEST_CASE("a power cut while a batch's key sets cross into a new journal segment leaves a journal that replays",
          "[cache][crash][power-cut][recovery]") {
  // A batch of more keys than a key set holds is journaled as several sets; when the journal
  // segment fills among them, a link to the next segment follows the first sets. Were the link
  // durable before those sets, a cut that tore them would leave a torn set followed by a valid
  // link: damage, and the cache refused with all its dirty data.
  //
  // And a cut that tore one set of a batch while keeping a later one would read as damage too,
  // crossing or not: each set must be durable before the next is written.
  //
  // The same deterministic workload runs twice (writeback held, so only the queue stores): the
  // first run finds the batches that begin a journal segment, the second cuts the power at each
  // fence of those batches and of two others, many times over.
  constexpr uint64_t kRegion = format::kDataStart + 16 * MiB;
  // A formatted cache on files, run with observer watching it.
  auto run = [&](const std::function<void(size_t batch, const std::vector<OpRecord>&)>& before_batch,
                 const std::function<void(size_t batch)>& began_segment, CutAtEachFence* observer,
                 const CacheFiles& files) {
    cache::CacheOptions options = files.options();
    options.tunables.data_crc = true;  // two keys per write
    options.copy_policy.spec = pmem::parse_policy_spec("nt").value();
    options.persist_observer = observer;
    auto cache = open_cache(options);
    cache->backing_faults().writes.count = -1;  // all of it stays dirty: the journal holds it
    auto queue = make_queue(*cache);
    std::mt19937_64 rng(51);
    uint64_t next_id = 1;
    // 140-179 one-sector writes a batch: 280-358 keys, three key sets; 110 batches fill more
    // than a 1 MiB journal segment.
    for (size_t batch = 0; batch < 130; ++batch) {
      const auto count = static_cast<size_t>(140 + rng() % 40);
      std::vector<OpRecord> records;
      std::vector<std::vector<std::byte>> buffers;
      std::vector<cache::Request> requests;
      buffers.reserve(count);
      for (size_t i = 0; i < count; ++i) {
        const OpRecord record{next_id++, rng() % kDeviceSectors, 1, OpKind::Write};
        records.push_back(record);
        buffers.push_back(pattern(record.id, record.sector, 1));
        requests.push_back({cache::Op::Write, record.sector, 1, buffers.back().data(), false});
      }
      const uint32_t journal_segments = cache->stats().segments_journal;
      before_batch(batch, records);
      for (const int result : queue->execute_batch(requests)) REQUIRE(result == static_cast<int>(kSector));
      if (observer != nullptr) observer->disarm();
      if (cache->stats().segments_journal > journal_segments) began_segment(batch);
    }
    queue.reset();
    cache->abandon();
  };

  std::vector<size_t> crossing;
  {
    CacheFiles files(kRegion, kBackingBytes);
    open_cache(files.options(/*format=*/true))->abandon();
    run([](size_t, const std::vector<OpRecord>&) {}, [&](size_t batch) { crossing.push_back(batch); }, nullptr, files);
  }
  REQUIRE(!crossing.empty());
  std::vector<size_t> cut_batches = crossing;
  cut_batches.insert(cut_batches.end(), {1, 2});

  CacheFiles files(kRegion, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();
  const std::unique_ptr<pmem::Region> view = open_view(files.region.path());
  pmem::PersistenceSimulator simulator(*view);
  CutAtEachFence observer(simulator);
  CrashModel model(kDeviceSectors);
  CrashTotals totals;
  unsigned cuts = 0;
  // Fewer under ThreadSanitizer (this test has one thread at work; each check is ten times slower
  // there), but always both kinds of cut.
  const unsigned cuts_per_fence = std::max(2u, scaled(12));
  std::vector<size_t> crossed_again;
  std::vector<OpRecord> previous;  // acknowledged once the next batch begins
  run(
      [&](size_t batch, const std::vector<OpRecord>& records) {
        for (const OpRecord& record : previous) model.apply(record);
        previous = records;
        if (std::find(cut_batches.begin(), cut_batches.end(), batch) != cut_batches.end()) {
          const std::vector<std::byte> backing = read_file(files.backing.path());
          observer.arm(
              [&, records, backing, batch](const std::vector<std::byte>& image, uint64_t seed) {
                const RecoveredCopy copy(image, backing);
                verify_recovery(copy, "nt", model, records, records.back().id, totals,
                                "batch " + std::to_string(batch) + ", cut " + std::to_string(seed));
                ++cuts;
              },
              cuts_per_fence);
        }
      },
      [&](size_t batch) { crossed_again.push_back(batch); }, &observer, files);
  CHECK(crossed_again == crossing);  // the two runs did the same
  INFO(totals.failures_text());
  CHECK(cuts >= cut_batches.size() * 3 * cuts_per_fence);  // the data's fence and one per key set, at least
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
}

// Cuts the power at fences of any thread, as chosen: at every few fences (one in `every`) while
// sampling, or at the next few fences after a store to a segment's first byte (its header: the
// segment is being put to a new use) while watching headers. The checks run under a lock, one at a
// time, whichever thread fences; the state they check against is set under the same lock.
class CutAtGcFences final : public pmem::PersistObserver {
 public:
  enum class Mode { Off, Sample, AfterHeaders };
  using Check = PowerCutCheck;
  CutAtGcFences(pmem::PersistenceSimulator& simulator, uint64_t data_start, uint64_t segment_size)
      : simulator_(simulator), data_start_(data_start), segment_size_(segment_size) {}
  void on_store(uint64_t offset, size_t len, pmem::StoreKind kind) override {
    simulator_.on_store(offset, len, kind);
    if (offset >= data_start_ && (offset - data_start_) % segment_size_ == 0) {
      std::lock_guard lock(mutex_);
      if (mode_ == Mode::AfterHeaders) fences_to_cut_ = 3;
    }
  }
  void on_flush(uint64_t offset, size_t len) override { simulator_.on_flush(offset, len); }
  void on_fence() override {
    {
      std::lock_guard lock(mutex_);
      const bool cut = (mode_ == Mode::Sample && ++fences_ % every_ == 0) ||
                       (mode_ == Mode::AfterHeaders && fences_to_cut_ > 0 && fences_to_cut_-- > 0);
      if (cut && cuts_ < max_cuts_) {
        cut_power(simulator_, seed_, 2, 0.5, check_);  // one of each kind
        cuts_ += 2;
      }
    }
    simulator_.on_fence();
  }
  // From the test's thread; `change` runs under the lock the checks hold.
  void with_lock(const std::function<void()>& change) {
    std::lock_guard lock(mutex_);
    change();
  }
  void arm(Mode mode, Check check, unsigned every, unsigned max_cuts) {
    with_lock([&] {
      mode_ = mode;
      check_ = std::move(check);
      every_ = every;
      max_cuts_ = cuts_ + max_cuts;
    });
  }
  void disarm() {
    with_lock([&] { mode_ = Mode::Off; });
  }
  unsigned cuts() {
    std::lock_guard lock(mutex_);
    return cuts_;
  }

 private:
  pmem::PersistenceSimulator& simulator_;
  const uint64_t data_start_, segment_size_;
  std::mutex mutex_;
  Mode mode_ = Mode::Off;
  Check check_;
  unsigned every_ = 1, fences_ = 0, fences_to_cut_ = 0, cuts_ = 0, max_cuts_ = 0;
  uint64_t seed_ = 0;
};

TEST_CASE("a power cut while writeback finds dirty data lost to a media error never lets those sectors read older data",
          "[cache][crash][power-cut][badblocks]") {
  // Writeback cannot read the dirty data of sectors 0..7 (a bad block) and the backing device
  // holds an older version of them. Writeback records them as lost in the control area and
  // then moves the clean horizon past their key: at every cut on the way, the recovered cache
  // must fail their reads (from the replayed key or from the record), and serve the other writes.
  CacheFiles files(kRegionBytes, kBackingBytes);
  write_file_at(files.backing.path(), 0, pattern(99, 0, 8));
  constexpr uint64_t kWrites = 6;  // id i at sectors 64 (i - 1)
  {
    auto cache = open_cache(hold_writeback(files.options(/*format=*/true)));
    auto queue = make_queue(*cache);
    for (uint64_t id = 1; id <= kWrites; ++id) {
      REQUIRE(queue->write(64 * (id - 1), 8, pattern(id, 64 * (id - 1), 8).data()) == 8 * 512);
    }
    queue.reset();
    cache->abandon();
  }
  const std::optional<uint64_t> bad = find_cached_sector(read_file(files.region.path()), 0, 1);
  REQUIRE(bad);
  const std::pair<uint64_t, uint64_t> bad_block{*bad & ~uint64_t{4095}, 4096};

  const format::Superblock superblock = read_superblock(files.region.path());
  const std::unique_ptr<pmem::Region> view = open_view(files.region.path());
  pmem::PersistenceSimulator simulator(*view);
  CutAtGcFences observer(simulator, superblock.segment_offset(0), superblock.segment_size);
  unsigned failures = 0;
  observer.arm(
      CutAtGcFences::Mode::Sample,
      [&](const std::vector<std::byte>& image, uint64_t seed) {
        const RecoveredCopy copy(image, read_file(files.backing.path()));
        cache::CacheOptions options = copy.options("nt");
        options.injected_bad_ranges = {bad_block};  // the media error is still there
        ForcedGranularity cache_line("CACHE_LINE");
        auto recovered = cache::Cache::open(options);
        if (!recovered.ok()) {
          UNSCOPED_INFO("cut " << seed << ": recovery failed: " << recovered.status().message());
          ++failures;
          return;
        }
        {
          auto queue = make_queue(*recovered.value());
          std::vector<std::byte> buffer(8 * kSector);
          if (const int rc = queue->read(0, 8, buffer.data()); rc != -EIO) {
            UNSCOPED_INFO("cut " << seed << ": the lost sectors read " << rc << ", first sector from write "
                                 << decode_sector(buffer.data(), 0));
            ++failures;
          }
          for (uint64_t id = 2; id <= kWrites; ++id) {
            const uint64_t sector = 64 * (id - 1);
            if (queue->read(sector, 8, buffer.data()) != 8 * 512 || decode_sector(buffer.data(), sector) != id) {
              UNSCOPED_INFO("cut " << seed << ": write " << id << " is gone");
              ++failures;
            }
          }
        }
        recovered.value()->abandon();
      },
      /*every=*/1, /*max_cuts=*/200);
  {
    cache::CacheOptions options = files.options();
    options.injected_bad_ranges = {bad_block};
    options.persist_observer = &observer;
    auto cache = open_cache(options);
    REQUIRE(cache->flush_all().ok());
    CHECK(cache->stats().writeback_lost_bytes == 8 * kSector);
    observer.disarm();
    cache->abandon();
  }
  std::printf("power cuts around lost dirty data: %u cuts\n", observer.cuts());
  CHECK(observer.cuts() >= 8);  // the attach, the record of the loss, the writeback, the horizon
  CHECK(failures == 0);
}

TEST_CASE("a power cut while GC moves dirty data and retires its victims, or while a victim is reused, loses nothing",
          "[cache][crash][power-cut][gc]") {
  // The random cuts land in GC's runs now and then; these land in them on purpose: at fences of a
  // GC that can only move dirty data (the backing device fails every write), its data copies, its key sets
  // (moves and retirements) and their publication; then at the fences right after a segment's
  // header is written, which is how a released victim is put to use again, by a queue or by GC.
  // A torn or missing new header must leave the keys of the victim's old generation skipped (they
  // were retired) and its moved data found under the moves' keys.
  //
  // And at every release of a segment, the worst its next user could do at once: a cut that keeps
  // nothing not yet fenced, with the segment overwritten by that user (new header, new data). GC
  // must have moved and retired durably whatever it released. (Real reuse comes too late to show a
  // release made too early: the allocator hands out the longest-free segment first.)
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();
  const format::Superblock superblock = read_superblock(files.region.path());
  const std::unique_ptr<pmem::Region> view = open_view(files.region.path());
  pmem::PersistenceSimulator simulator(*view);
  CutAtGcFences observer(simulator, format::kDataStart, MiB);

  std::mt19937_64 rng(crash_seed(61));
  CrashModel model(kDeviceSectors);
  CrashTotals totals;
  uint64_t next_id = 1;
  // Under the observer's lock, with the model: the write under way, and the newest issued.
  std::vector<OpRecord> in_flight;
  uint64_t newest_issued = 0;
  const std::string policy = "threshold:8K";
  auto check = [&](const std::string& phase) {
    return [&, phase](const std::vector<std::byte>& image, uint64_t seed) {
      const RecoveredCopy copy(image, read_file(files.backing.path()));
      verify_recovery(copy, policy, model, in_flight, newest_issued, totals, phase + ", cut " + std::to_string(seed));
    };
  };
  const unsigned phase_cuts = std::max(4u, crash_points(300) / 5);
  // Under the observer's lock too.
  bool releases_armed = false;
  unsigned release_cuts = 0, journal_release_cuts = 0;

  cache::CacheOptions options = files.options();
  options.tunables.gc_threshold = 90;  // no GC until the workload has filled most segments
  options.copy_policy.spec = pmem::parse_policy_spec(policy).value();
  options.persist_observer = &observer;
  options.segment_released = [&](uint32_t segment) {
    observer.with_lock([&] {
      if (!releases_armed) return;
      const uint64_t seed = 1'000'000 + release_cuts + 1;
      std::vector<std::byte> image = simulator.image_after_power_cut({.keep_unpersisted = 0.0, .seed = seed});
      const std::string where = "segment " + std::to_string(segment) + " reused as soon as released";
      const std::optional<format::SegmentType> was = overwrite_as_reused(image, superblock, segment);
      if (!was) {
        ++totals.wrong;
        totals.fail(where + ": its header was not durable");
        return;
      }
      // Journal segments are few (and released last): every one is checked.
      if (*was == format::SegmentType::Journal) {
        ++journal_release_cuts;
      } else if (release_cuts - journal_release_cuts >= phase_cuts) {
        return;
      }
      ++release_cuts;
      check(where)(image, seed);
    });
  };
  auto cache = open_cache(options);
  REQUIRE(cache->stats().segments_total == 12);
  // Nothing reaches the backing device: the clean horizon stays put, so every victim is dirty and
  // GC must move its data and retire it before it is reused.
  cache->backing_faults().writes.count = -1;
  auto queue = make_queue(*cache);

  auto write = [&](uint32_t max_sectors, uint64_t span) {
    const auto sectors = static_cast<uint32_t>(8 + rng() % (max_sectors - 7));
    const OpRecord record{next_id++, rng() % (span - sectors), sectors, OpKind::Write};
    observer.with_lock([&] {
      in_flight = {record};
      newest_issued = record.id;
    });
    const std::vector<std::byte> data = pattern(record.id, record.sector, record.sectors);
    REQUIRE(queue->write(record.sector, record.sectors, data.data()) == static_cast<int>(record.sectors * kSector));
    observer.with_lock([&] {
      model.apply(record);
      in_flight.clear();
    });
  };

  // 7 MiB of writes over 2 MiB of the device: the segments written first hold little live data,
  // all of it dirty.
  for (uint64_t written = 0; written < 7 * MiB;) {
    write(64, 4096);
    written += 64 * kSector;
  }
  const cache::CacheStats before = cache->stats();
  REQUIRE(before.gc_runs == 0);
  REQUIRE(before.dirty_bytes > 0);

  // GC may now take all but a quarter: it moves the dirty data of the emptiest segments, cut at
  // one fence in three of any thread.
  observer.with_lock([&] { releases_armed = true; });
  observer.arm(CutAtGcFences::Mode::Sample, check("GC moving dirty data"), 3, phase_cuts);
  REQUIRE(cache->set("gc_threshold", "25").ok());
  uint64_t runs = 0;
  auto quiet_for = std::chrono::steady_clock::now();
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t now_runs = cache->stats().gc_runs;
    if (now_runs != runs) {
      runs = now_runs;
      quiet_for = std::chrono::steady_clock::now();
    } else if (runs > 0 && std::chrono::steady_clock::now() - quiet_for > std::chrono::milliseconds(300)) {
      break;
    }
  }
  observer.disarm();
  const unsigned gc_cuts = observer.cuts();
  const cache::CacheStats after_gc = cache->stats();
  INFO(after_gc.gc_runs << " GC runs, " << after_gc.segments_reclaimed << " segments reclaimed, "
                        << after_gc.gc_moved_dirty_bytes << " dirty bytes moved, " << gc_cuts << " cuts");
  REQUIRE(after_gc.gc_moved_dirty_bytes > 0);
  REQUIRE(gc_cuts > 0);

  // More writes: the segments never used yet, then the released victims are put to use, and GC
  // keeps going; each new header is followed by cuts at the next fences.
  observer.arm(CutAtGcFences::Mode::AfterHeaders, check("segment put to use again"), 1, phase_cuts);
  for (uint64_t written = 0; written < 8 * MiB;) {
    write(64, 4096);
    written += 64 * kSector;
  }
  observer.disarm();
  const unsigned reuse_cuts = observer.cuts() - gc_cuts;

  // The device works again: writeback cleans everything, GC's victims are clean, and once the
  // queue is gone, its journal's segments are released too. Those releases are checked as above.
  cache->backing_faults().writes.count = 0;
  for (uint64_t written = 0; written < 2 * MiB;) {
    write(64, 4096);
    written += 64 * kSector;
  }
  REQUIRE(cache->flush_all().ok());
  queue.reset();
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < deadline;) {
    bool seen = false;
    observer.with_lock([&] { seen = journal_release_cuts > 0; });
    if (seen) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  observer.with_lock([&] { releases_armed = false; });
  cache->abandon();

  std::printf("power cuts in GC's dirty moves and victim reuse: %u while GC ran (%lu KiB of dirty data moved), %u "
              "after new segment headers, %u at releases (%u of journal segments); %lu sectors compared, losses=%lu, "
              "wrong=%lu\n",
              gc_cuts, static_cast<unsigned long>(after_gc.gc_moved_dirty_bytes / KiB), reuse_cuts, release_cuts,
              journal_release_cuts,
              static_cast<unsigned long>(totals.sectors), static_cast<unsigned long>(totals.lost),
              static_cast<unsigned long>(totals.wrong));
  INFO(totals.failures_text());
  CHECK(reuse_cuts > 0);
  CHECK(release_cuts > 0);
  CHECK(journal_release_cuts > 0);
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
}

// Forwards to a persistence simulator and keeps the image a power cut would leave at the first
// fence after a store to `offset` (a segment's header: the segment put to use again).
class CutAfterStoreAt final : public pmem::PersistObserver {
 public:
  CutAfterStoreAt(pmem::PersistenceSimulator& simulator, uint64_t offset) : simulator_(simulator), offset_(offset) {}
  void on_store(uint64_t offset, size_t len, pmem::StoreKind kind) override {
    simulator_.on_store(offset, len, kind);
    std::lock_guard lock(mutex_);
    if (offset == offset_) stored_ = true;
  }
  void on_flush(uint64_t offset, size_t len) override { simulator_.on_flush(offset, len); }
  void on_fence() override {
    simulator_.on_fence();
    std::lock_guard lock(mutex_);
    if (stored_ && !image_) image_ = simulator_.image_after_power_cut({});
  }
  std::optional<std::vector<std::byte>> image() {
    std::lock_guard lock(mutex_);
    return image_;
  }

 private:
  pmem::PersistenceSimulator& simulator_;
  const uint64_t offset_;
  std::mutex mutex_;
  bool stored_ = false;
  std::optional<std::vector<std::byte>> image_;
};

TEST_CASE("a key set dropped at replay for torn data stays dropped once its segment is put to use again",
          "[cache][crash][power-cut][recovery]") {
  // Found by the random power cuts, in a cut during the recovery after a cut: that recovery
  // dropped the journal's last key set (its data torn: never acknowledged), found the data's
  // segment empty and gave it to a new journal. The key set was still in the old journal, and
  // the recovery after the next cut, unable to check data in a segment of another generation,
  // took its keys for damage and refused the cache.
  CacheFiles files(kRegionBytes, kBackingBytes);
  {
    cache::CacheOptions options = hold_writeback(files.options(true));
    options.commit_shared_fence_classes = cache::kAllClassesShareFence;
    auto cache = open_cache(options);
    auto queue = make_queue(*cache);
    const auto first = pattern(1, 100, 8);
    REQUIRE(queue->write(100, 8, first.data()) == 8 * 512);
    REQUIRE(cache->flush_all().ok());  // clean: its segment holds nothing live but the last write
    const auto last = pattern(3, 200, 8);
    REQUIRE(queue->write(200, 8, last.data()) == 8 * 512);  // the journal's last key set
    queue.reset();
    cache->abandon();
  }
  // One 8-byte word of the last write's data never reached the media.
  std::vector<std::byte> region = read_file(files.region.path());
  const format::Superblock superblock = read_superblock(files.region.path());
  const std::optional<uint64_t> torn = tear_cached_sector(region, 203, 3);
  REQUIRE(torn);
  const std::optional<uint32_t> segment = superblock.segment_at(*torn);
  write_file(files.region.path(), region);

  // The recovery that drops the key set, cut as soon as the segment's new header is durable.
  std::optional<std::vector<std::byte>> image;
  {
    const std::unique_ptr<pmem::Region> view = open_view(files.region.path());
    pmem::PersistenceSimulator simulator(*view);
    CutAfterStoreAt observer(simulator, superblock.segment_offset(*segment));
    cache::CacheOptions options = files.options();
    options.persist_observer = &observer;
    auto cache = open_cache(options);
    auto queue = make_queue(*cache);  // its journal takes the first free segment: that one
    image = observer.image();
    queue.reset();
    cache->abandon();
  }
  REQUIRE(image);
  CrashModel model(kDeviceSectors);
  model.apply({1, 100, 8, OpKind::Write});
  CrashTotals totals;
  const RecoveredCopy copy(*image, read_file(files.backing.path()));
  CHECK(verify_recovery(copy, "nt", model, {}, 3, totals, "cut after the segment was put to use again"));
  INFO(totals.failures_text());
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
}

TEST_CASE("a power cut in a detach's clean checkpoint, or in the attach that uses it, loses nothing and serves "
          "nothing stale",
          "[cache][crash][power-cut][checkpoint]") {
  const bool forced = GENERATE(false, true);
  INFO((forced ? "forced detach" : "clean detach"));
  constexpr uint64_t kSpan = 8192;  // the first 4 MiB: written, rewritten and read
  CacheFiles files(kRegionBytes, kBackingBytes);
  CrashModel model(kDeviceSectors);
  uint64_t id = 0;
  auto write_some = [&](frontend::SyncQueue& queue, uint64_t seed, int count) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < count; ++i) {
      const uint64_t sector = rng() % (kSpan - 64);
      const auto sectors = static_cast<uint32_t>(1 + rng() % 64);
      const auto data = pattern(++id, sector, sectors);
      REQUIRE(queue.write(sector, sectors, data.data()) == static_cast<int>(sectors * kSector));
      model.apply({id, sector, sectors, OpKind::Write});
    }
  };
  {
    auto cache = open_cache(files.options(/*format=*/true));
    auto queue = make_queue(*cache);
    write_some(*queue, 1, 150);
    REQUIRE(cache->flush_all().ok());
    // Dirty data over part of the clean data: only the journals have it.
    if (forced) cache->backing_faults().writes.count = -1;
    write_some(*queue, 2, 40);
    queue.reset();
    cache->abandon();
  }
  const std::vector<std::byte> image = read_file(files.region.path());
  const std::vector<std::byte> backing = read_file(files.backing.path());

  // The events of: attach, read everything into the cache, detach (writing the checkpoint),
  // attach again (using it, erasing it), read everything. Returns the events at which the detach
  // began and the second attach ended; with a cut armed, the images at the cut.
  struct Marks {
    uint64_t detach = 0, attached_again = 0, total = 0;
  };
  auto run = [&](const RecoveredCopy& copy, pmem::PersistenceSimulator& simulator) {
    Marks marks;
    ForcedGranularity cache_line("CACHE_LINE");
    cache::CacheOptions options = copy.options("nt");
    options.persist_observer = &simulator;
    std::vector<std::byte> buffer(64 * kSector);
    auto read_all = [&](cache::Cache& cache) {
      auto queue = make_queue(cache);
      for (uint64_t sector = 0; sector < kSpan; sector += 64) {
        REQUIRE(queue->read(sector, 64, buffer.data()) == static_cast<int>(64 * kSector));
      }
    };
    {
      auto cache = open_cache(options);
      if (forced) cache->backing_faults().writes.count = -1;
      read_all(*cache);
      marks.detach = simulator.events();
      REQUIRE(cache->detach(forced).ok());
    }
    auto cache = open_cache(options);
    marks.attached_again = simulator.events();
    CHECK((simulator.cut_done() || cache->stats().restored_clean_bytes > 0));
    read_all(*cache);
    cache->abandon();
    marks.total = simulator.events();
    return marks;
  };
  Marks marks;
  {
    const RecoveredCopy copy(image, backing);
    const std::unique_ptr<pmem::Region> view = open_view(copy.files.region.path());
    pmem::PersistenceSimulator simulator(*view);
    marks = run(copy, simulator);
  }
  INFO("detach at event " << marks.detach << ", attached again at " << marks.attached_again << " of " << marks.total);
  // Every event from the detach to the end of the attach that follows it (the checkpoint, the
  // control update it belongs to, its use and erasure), and a sample of the others.
  std::vector<uint64_t> cut_points;
  for (uint64_t at = marks.detach; at <= marks.attached_again + 20 && at <= marks.total; ++at) cut_points.push_back(at);
  std::mt19937_64 rng(crash_seed(77));
  for (unsigned i = 0; i < 20; ++i) cut_points.push_back(1 + rng() % marks.total);

  CrashTotals totals;
  for (uint64_t at : cut_points) {
    const RecoveredCopy copy(image, backing);
    const std::unique_ptr<pmem::Region> view = open_view(copy.files.region.path());
    pmem::PersistenceSimulator simulator(*view);
    pmem::PersistenceSimulator::PowerCut cut;
    cut.keep_unpersisted = (at % 3) / 2.0;  // none, half or all of what was not yet durable
    cut.tear_words = true;
    cut.seed = at;
    std::mutex mutex;
    std::optional<std::pair<std::vector<std::byte>, std::vector<std::byte>>> after;
    simulator.arm_cut(at, cut, [&](std::vector<std::byte> cut_image) {
      std::lock_guard lock(mutex);
      after.emplace(std::move(cut_image), read_file(copy.files.backing.path()));
    });
    run(copy, simulator);
    bool cut_happened = false;
    {
      std::lock_guard lock(mutex);
      cut_happened = after.has_value();
    }
    // The events of a run vary with timing (writeback, GC): a cut point past this run's last
    // event cuts at its end instead. (Not under `mutex`: the simulator takes its own lock, under
    // which the cut handler takes ours. The run is over, so nothing else touches `after`.)
    if (!cut_happened) after.emplace(simulator.image_after_power_cut(cut), read_file(copy.files.backing.path()));
    ++totals.crash_points;
    const RecoveredCopy again(after->first, after->second);
    REQUIRE(verify_recovery(again, "nt", model, {}, id, totals, "cut at event " + std::to_string(at)));
  }
  WARN(totals.summary());
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
}

TEST_CASE("a control slot torn by a power cut is rewritten before the next update tears the other",
          "[cache][crash][power-cut][recovery]") {
  // The control area is written slot 0 then slot 1, each made durable before the next, so a power
  // cut tears at most one. But the attach after such a cut updated slot 0 first while slot 1 was
  // still torn: a second cut in that update left both torn, and the cache was refused ("both
  // slots are damaged") with its dirty data in it.
  CacheFiles files(kRegionBytes, kBackingBytes);
  CrashModel model(kDeviceSectors);
  {
    auto cache = open_cache(files.options(/*format=*/true));
    cache->backing_faults().writes.count = -1;  // everything stays dirty: only pmem has it
    auto queue = make_queue(*cache);
    for (uint64_t id = 1; id <= 8; ++id) {
      const auto data = pattern(id, id * 100, 8);
      REQUIRE(queue->write(id * 100, 8, data.data()) == 8 * 512);
      model.apply({id, id * 100, 8, OpKind::Write});
    }
    queue.reset();
    cache->abandon();
  }
  // The first cut tore slot 1 (as a cut in the middle of its write does).
  std::vector<std::byte> image = read_file(files.region.path());
  image[format::kControlOffsets[1] + 20] ^= std::byte{0x5A};
  const std::vector<std::byte> backing = read_file(files.backing.path());

  // The second cut, at every event of the next attach in turn: recovery, starting a queue's
  // journal, writeback. Every line not yet durable survives torn (each 8-byte word old or new), so
  // an update in progress tears.
  CrashTotals totals;
  uint64_t at = 1;
  for (;; ++at) {
    const RecoveredCopy copy(image, backing);
    const std::unique_ptr<pmem::Region> view = open_view(copy.files.region.path());
    pmem::PersistenceSimulator simulator(*view);
    pmem::PersistenceSimulator::PowerCut cut;
    cut.keep_unpersisted = 1.0;
    cut.tear_words = true;
    cut.seed = at;
    std::mutex mutex;
    std::optional<std::pair<std::vector<std::byte>, std::vector<std::byte>>> second;
    simulator.arm_cut(at, cut, [&](std::vector<std::byte> cut_image) {
      std::lock_guard lock(mutex);
      second.emplace(std::move(cut_image), read_file(copy.files.backing.path()));
    });
    {
      ForcedGranularity cache_line("CACHE_LINE");
      cache::CacheOptions options = copy.options("nt");
      options.persist_observer = &simulator;
      auto cache = open_cache(options);
      make_queue(*cache).reset();
      REQUIRE(cache->flush_all().ok());  // writeback's control updates too
      cache->abandon();
    }
    std::lock_guard lock(mutex);
    if (!second) break;  // the attach was over before event `at`
    const RecoveredCopy again(second->first, second->second);
    REQUIRE(verify_recovery(again, "nt", model, {}, 8, totals, "second cut at event " + std::to_string(at)));
  }
  INFO(totals.failures_text());
  CHECK(at > 10);  // the cuts did land in the attach's control updates
}

namespace {

// What a SIGKILLed child reports, in a shared mapping that survives it: each operation before it
// is submitted, and again once it completed.
struct KillLog {
  static constexpr size_t kCapacity = 1 << 15;
  struct Entry {
    OpRecord op;
    bool acknowledged;
  };
  std::atomic<uint64_t> count{0};
  Entry entries[kCapacity];

  void add(const OpRecord& op, bool acknowledged) {
    const uint64_t at = count.load(std::memory_order_relaxed);
    while (at == kCapacity) ::pause();  // full: wait for the kill
    entries[at] = {op, acknowledged};
    count.store(at + 1, std::memory_order_release);
  }
};

class SharedKillLog {
 public:
  SharedKillLog() {
    void* memory = ::mmap(nullptr, sizeof(KillLog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::runtime_error("mmap of the kill log failed");
    log_ = new (memory) KillLog();
  }
  ~SharedKillLog() { ::munmap(log_, sizeof(KillLog)); }
  SharedKillLog(const SharedKillLog&) = delete;
  SharedKillLog& operator=(const SharedKillLog&) = delete;
  KillLog& operator*() const { return *log_; }
  KillLog* operator->() const { return log_; }

 private:
  KillLog* log_;
};

// The child: attaches (recovering whatever the last kill left), then runs the workload until it
// is killed, logging every operation.
[[noreturn]] void run_until_killed(const cache::CacheOptions& options, uint64_t span, uint64_t first_id, uint64_t seed,
                                   KillLog& log) {
  ForcedGranularity cache_line("CACHE_LINE");
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) ::_exit(3);
  auto queue = frontend::SyncQueue::create(*cache.value());
  if (!queue.ok()) ::_exit(4);
  std::mt19937_64 rng(seed);
  uint64_t next_id = first_id;
  for (;;) {
    const size_t count = rng() % 4 == 0 ? 2 + rng() % 5 : 1;
    Batch batch(rng, count, 64, span, next_id);
    for (const OpRecord& record : batch.records) log.add(record, false);
    const std::vector<int> results = batch.execute(*queue.value());
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i] != expected_result(batch.ops[i])) ::_exit(5);
    }
    for (const OpRecord& record : batch.records) log.add(record, true);
  }
}

}  // namespace

TEST_CASE("SIGKILL at random moments loses no acknowledged operation", "[cache][crash][sigkill]") {
  const unsigned kills = crash_points(200);
  const uint64_t seed = crash_seed(99);
  INFO("seed " << seed);
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();
  CrashModel model(kDeviceSectors);
  CrashTotals totals;
  SharedKillLog log;
  std::mt19937_64 rng(seed);
  uint64_t next_id = 1;
  unsigned before_first_ack = 0, clean_detaches = 0, batches_cut = 0;
  auto window = std::chrono::microseconds(30000);
  struct Logged {
    unsigned round;
    OpRecord op;
    bool acknowledged;
  };
  std::deque<Logged> history;  // what the children of the last 32 rounds logged, to explain a failure

  for (unsigned round = 0; round < kills; ++round) {
    log->count.store(0);
    const uint64_t child_seed = rng();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    // A child in three writes back flat out; one, only as far as GC needs; one, next to nothing
    // (1 byte/s) over 1 MiB of the device, so that GC moves dirty data under keys of its own.
    const uint64_t writeback_rate = round % 3 == 0 ? 0 : round % 3 == 1 ? MiB : 1;
    const uint64_t span = writeback_rate == 1 ? MiB / kSector : kDeviceSectors;
    if (child == 0) run_until_killed(small_cache_options(files, writeback_rate), span, next_id, child_seed, *log);
    // Some kills land while the child is still attaching (a crash during recovery).
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % static_cast<uint64_t>(window.count())));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    const std::string where = "seed " + std::to_string(seed) + ", round " + std::to_string(round);
    INFO(where << ", child status " << status);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));

    while (!history.empty() && history.front().round + 32 < round) history.pop_front();
    // Replay the child's log: acknowledged operations into the model, in order; the rest were
    // under way.
    std::vector<OpRecord> in_flight;
    const uint64_t entries = log->count.load(std::memory_order_acquire);
    bool any_ack = false;
    for (uint64_t i = 0; i < entries; ++i) {
      const KillLog::Entry& entry = log->entries[i];
      history.push_back({round, entry.op, entry.acknowledged});
      next_id = std::max(next_id, entry.op.id + 1);
      if (!entry.acknowledged) {
        in_flight.push_back(entry.op);
        continue;
      }
      std::erase_if(in_flight, [&](const OpRecord& op) { return op.id == entry.op.id; });
      model.apply(entry.op);
      any_ack = true;
    }
    before_first_ack += !any_ack;
    batches_cut += in_flight.size() > 1;

    const bool keep_images = std::getenv("PCACHED_CRASH_DUMP_DIR") != nullptr;
    const auto region_before = keep_images ? read_file(files.region.path()) : std::vector<std::byte>();
    const auto backing_before = keep_images ? read_file(files.backing.path()) : std::vector<std::byte>();
    const auto started = std::chrono::steady_clock::now();
    ForcedGranularity cache_line("CACHE_LINE");
    auto cache = cache::Cache::open(small_cache_options(files, writeback_rate));
    INFO(cache.status().message());
    REQUIRE(cache.ok());
    window = std::chrono::microseconds(30000) +
             2 * std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    {
      auto queue = make_queue(*cache.value());
      // The next child goes on from what recovery made of the operations under way.
      const bool ok = model.verify_device(*queue, in_flight, next_id - 1, /*adopt_in_flight=*/true, totals, where);
      for (const std::string& failure : totals.failures) UNSCOPED_INFO(failure);
      if (!ok) {
        if (keep_images) dump_failure(region_before, backing_before);
        for (const Logged& logged : history) {
          if (totals.failed_sectors.empty() || !logged.op.covers(totals.failed_sectors.front())) continue;
          UNSCOPED_INFO("  round " << logged.round << ": " << (logged.acknowledged ? "acknowledged " : "issued ")
                                   << to_string(logged.op.kind) << " " << logged.op.id << " of " << logged.op.sector
                                   << "+" << logged.op.sectors);
        }
      }
      REQUIRE(ok);
    }
    // Now and then a clean detach: everything written back, the next attach finds no journal.
    if (round % 16 == 15) {
      REQUIRE(cache.value()->detach(false).ok());
      ++clean_detaches;
    } else {
      cache.value()->abandon();
    }
  }
  std::printf("SIGKILL: %s; %u kills before the child's first acknowledgement (during attach and recovery), "
              "%u with a batch under way, %u clean detaches between kills\n",
              totals.summary().c_str(), before_first_ack, batches_cut, clean_detaches);
  CHECK(totals.lost == 0);
  CHECK(totals.wrong == 0);
}


// Crash consistency: every acknowledged write survives a SIGKILL of the process and a power cut
// that drops whatever was not yet flushed and fenced; no sector ever reads back torn or wrong.
// The number of crash points is 200 each by default; PCACHED_CRASH_POINTS sets it (campaigns).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "format/layout.h"
#include "pmem/persistence_simulator.h"
#include "support/cache_fixture.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 12 * MiB;
constexpr uint64_t kBackingBytes = 24 * MiB;
constexpr uint64_t kDeviceSectors = kBackingBytes / kSector;

unsigned crash_points() {
  const char* text = std::getenv("PCACHED_CRASH_POINTS");
  return text != nullptr ? static_cast<unsigned>(std::strtoul(text, nullptr, 10)) : 200;
}

struct WriteRecord {
  uint64_t id;
  uint64_t sector;
  uint32_t sectors;
};

// Checks every sector of a recovered cache: it holds the last acknowledged write of that sector or
// a later write (one that was under way at the crash), and never anything torn or unknown.
std::string verify_recovered(frontend::SyncQueue& queue, const std::vector<WriteRecord>& acknowledged) {
  std::vector<uint64_t> last(kDeviceSectors, 0);
  for (const WriteRecord& write : acknowledged) {
    for (uint32_t i = 0; i < write.sectors; ++i) last[write.sector + i] = std::max(last[write.sector + i], write.id);
  }
  std::vector<std::byte> buffer(256 * kSector);
  for (uint64_t sector = 0; sector < kDeviceSectors; sector += 256) {
    if (int rc = queue.read(sector, 256, buffer.data()); rc != 256 * static_cast<int>(kSector)) {
      return "read at " + std::to_string(sector) + " returned " + std::to_string(rc);
    }
    for (uint64_t i = 0; i < 256; ++i) {
      const uint64_t got = decode_sector(buffer.data() + i * kSector, sector + i);
      if (got == UINT64_MAX || got < last[sector + i]) {
        return "sector " + std::to_string(sector + i) + " holds " +
               (got == UINT64_MAX ? std::string("torn or foreign data") : "write " + std::to_string(got)) +
               ", but write " + std::to_string(last[sector + i]) + " was acknowledged";
      }
    }
  }
  return {};
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string recover_and_verify(const std::vector<std::byte>& image, const std::vector<std::byte>& backing,
                               const std::vector<WriteRecord>& acknowledged) {
  CacheFiles copy(0, 0);
  write_file(copy.region.path(), image);
  write_file(copy.backing.path(), backing);
  cache::CacheOptions options = copy.options();
  options.force = true;  // the copy of the backing file is another inode
  ForcedGranularity cache_line("CACHE_LINE");
  auto cache = cache::Cache::open(options);
  if (!cache.ok()) return "recovery failed: " + cache.status().message();
  std::string failure;
  {
    auto queue = make_queue(*cache.value());
    failure = verify_recovered(*queue, acknowledged);
  }
  cache.value()->abandon();
  return failure;
}

}  // namespace

TEST_CASE("power cuts at random store counts lose no acknowledged write", "[cache][crash][power-cut]") {
  const unsigned cuts = crash_points();
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();

  pmem::RegionOptions region_options;
  region_options.path = files.region.path();
  region_options.min_size = 0;
  std::unique_ptr<pmem::Region> view;
  {
    ForcedGranularity cache_line("CACHE_LINE");
    view = std::move(pmem::Region::open(region_options).value());
  }
  pmem::PersistenceSimulator simulator(*view);
  cache::CacheOptions options = files.options();
  options.persist_observer = &simulator;
  auto cache = open_cache(options);
  auto queue = make_queue(*cache);

  std::mt19937_64 rng(7);
  std::mutex acks_mutex;
  std::vector<std::pair<WriteRecord, uint64_t>> acks;  // with the event count at acknowledgement
  struct Captured {
    std::vector<std::byte> image, backing;
    std::vector<WriteRecord> acknowledged;
    pmem::PersistenceSimulator::PowerCut cut;
  };
  std::optional<Captured> captured;
  unsigned done = 0, checked_lines_kept = 0;
  auto arm = [&] {
    pmem::PersistenceSimulator::PowerCut cut;
    // Rotate: drop every unfenced line; keep a random half of them whole; keep a random half torn
    // at 8-byte granularity; keep them all.
    static constexpr double kKeep[4] = {0.0, 0.5, 0.5, 1.0};
    cut.keep_unpersisted = kKeep[done % 4];
    cut.tear_words = done % 4 == 2;
    cut.seed = done;
    const uint64_t at = simulator.events() + 1 + rng() % 400;
    simulator.arm_cut(at, cut, [&, at, cut](std::vector<std::byte> image) {
      Captured c{std::move(image), read_file(files.backing.path()), {}, cut};
      std::lock_guard lock(acks_mutex);
      for (const auto& [write, events] : acks) {
        if (events < at) c.acknowledged.push_back(write);
      }
      captured = std::move(c);
    });
  };
  arm();
  uint64_t next_id = 1;
  while (done < cuts) {
    // Single writes and batches (as the ublk frontend submits them) alternate.
    const size_t batch = rng() % 2 == 0 ? 1 : 2 + rng() % 5;
    std::vector<WriteRecord> records;
    std::vector<std::vector<std::byte>> buffers;
    std::vector<cache::Request> requests;
    for (size_t i = 0; i < batch; ++i) {
      const uint64_t sector = rng() % kDeviceSectors;
      const auto sectors = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(32, kDeviceSectors - sector));
      records.push_back({next_id++, sector, sectors});
      buffers.push_back(pattern(records.back().id, sector, sectors));
      requests.push_back({cache::Op::Write, sector, sectors, buffers.back().data(), false});
    }
    const std::vector<int> results = batch == 1 ? std::vector<int>{queue->execute(requests[0])}
                                                : queue->execute_batch(requests);
    for (size_t i = 0; i < batch; ++i) REQUIRE(results[i] == static_cast<int>(records[i].sectors * kSector));
    const uint64_t events = simulator.events();
    {
      std::lock_guard lock(acks_mutex);
      for (const WriteRecord& record : records) acks.push_back({record, events});
    }
    if (simulator.cut_done()) {
      std::optional<Captured> cut;
      {
        std::lock_guard lock(acks_mutex);
        cut.swap(captured);
      }
      REQUIRE(cut.has_value());
      INFO("power cut " << done << " keep " << cut->cut.keep_unpersisted << " torn " << cut->cut.tear_words);
      REQUIRE(recover_and_verify(cut->image, cut->backing, cut->acknowledged) == "");
      checked_lines_kept += cut->cut.keep_unpersisted > 0;
      ++done;
      arm();
    }
  }
  queue.reset();
  cache->abandon();
  std::printf("power cuts: %u simulated (%u keeping some unflushed lines), 0 acknowledged writes lost\n", done,
              checked_lines_kept);
}

TEST_CASE("SIGKILL at random moments loses no acknowledged write", "[cache][crash][sigkill]") {
  const unsigned kills = crash_points();
  CacheFiles files(kRegionBytes, kBackingBytes);
  open_cache(files.options(/*format=*/true))->abandon();
  std::vector<WriteRecord> acknowledged;
  std::mt19937_64 rng(99);
  uint64_t next_id = 1;

  for (unsigned round = 0; round < kills; ++round) {
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const uint64_t id_base = next_id;
    const uint64_t child_seed = rng();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      // The child writes until it is killed, reporting each acknowledged write.
      ForcedGranularity cache_line("CACHE_LINE");
      auto cache = cache::Cache::open(files.options());
      if (!cache.ok()) ::_exit(3);
      auto queue = frontend::SyncQueue::create(*cache.value());
      if (!queue.ok()) ::_exit(4);
      std::mt19937_64 child_rng(child_seed);
      for (uint64_t id = id_base;; ++id) {
        const uint64_t sector = child_rng() % kDeviceSectors;
        const auto sectors = static_cast<uint32_t>(1 + child_rng() % std::min<uint64_t>(64, kDeviceSectors - sector));
        const auto data = pattern(id, sector, sectors);
        if (queue.value()->write(sector, sectors, data.data()) != static_cast<int>(sectors * kSector)) ::_exit(5);
        const WriteRecord record{id, sector, sectors};
        if (::write(pipe_fds[1], &record, sizeof record) != sizeof record) ::_exit(6);
      }
    }
    ::close(pipe_fds[1]);
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 30000));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("round " << round << " child status " << status);
    REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    WriteRecord record;
    while (::read(pipe_fds[0], &record, sizeof record) == sizeof record) {
      acknowledged.push_back(record);
      next_id = std::max(next_id, record.id + 1);
    }
    ::close(pipe_fds[0]);
    next_id += 1000;  // ids the child may have begun without reporting

    ForcedGranularity cache_line("CACHE_LINE");
    auto cache = cache::Cache::open(files.options());
    INFO(cache.status().message());
    REQUIRE(cache.ok());
    {
      auto queue = make_queue(*cache.value());
      REQUIRE(verify_recovered(*queue, acknowledged) == "");
    }
    cache.value()->abandon();
  }
  std::printf("SIGKILL crash points: %u, %zu acknowledged writes checked, 0 lost\n", kills, acknowledged.size());
}

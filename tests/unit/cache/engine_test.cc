#include <catch2/catch.hpp>
#include <random>
#include <thread>
#include <vector>

#include "backing/backing_device.h"
#include "cache/commit_protocol.h"
#include "cache/engine.h"
#include "format/layout.h"
#include "io/ring.h"
#include "support/cache_fixture.h"
#include "support/reference_model.h"
#include "support/test_scale.h"

using namespace pcached;
using namespace pcached::testing;

namespace {

constexpr uint64_t kRegionBytes = format::kDataStart + 16 * MiB;  // 16 segments of 1 MiB
constexpr uint64_t kBackingBytes = 32 * MiB;
constexpr uint64_t kBackingSectors = kBackingBytes / kSector;

}  // namespace

TEST_CASE("a formatted cache serves writes from pmem and misses from the backing device", "[cache][engine]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  {
    // Put recognisable data on the backing device first.
    std::FILE* backing = std::fopen(files.backing.path().c_str(), "r+b");
    const auto data = pattern(999, 1000, 64);
    std::fseek(backing, 1000 * kSector, SEEK_SET);
    std::fwrite(data.data(), 1, data.size(), backing);
    std::fclose(backing);
  }
  auto cache = open_cache(files.options(/*format=*/true));
  auto queue = make_queue(*cache);
  Model model(kBackingSectors);
  model.write(1000, 64, 999);

  const auto first = pattern(1, 1010, 8);
  REQUIRE(queue->write(1010, 8, first.data()) == 8 * 512);
  model.write(1010, 8, 1);
  std::vector<std::byte> buffer(64 * kSector);
  REQUIRE(queue->read(1000, 64, buffer.data()) == 64 * 512);  // partial hit merged with the backing data
  model.check(1000, 64, buffer);
  REQUIRE(queue->read(1010, 8, buffer.data()) == 8 * 512);  // full hit
  model.check(1010, 8, buffer);

  const cache::CacheStats stats = cache->stats();
  CHECK(stats.writes == 1);
  CHECK(stats.read_partial_hits == 1);
  CHECK(stats.read_hits >= 1);
  CHECK(stats.device_bytes == kBackingBytes);
  // The partial hit filled the missed sectors: now all of them are cached.
  REQUIRE(queue->read(1000, 64, buffer.data()) == 64 * 512);
  model.check(1000, 64, buffer);
  CHECK(cache->stats().read_hits == stats.read_hits + 1);
  queue.reset();
  REQUIRE(cache->detach(false).ok());
}

TEST_CASE("a format with no segment size picks one for about 64 segments, 1 MiB to 16 MiB", "[cache][engine]") {
  STATIC_REQUIRE(format::default_segment_size(format::kDataStart + 352 * MiB) == 4 * MiB);
  STATIC_REQUIRE(format::default_segment_size(format::kDataStart + 1024 * MiB) == 16 * MiB);
  STATIC_REQUIRE(format::default_segment_size(format::kDataStart + 64 * GiB) == 16 * MiB);
  STATIC_REQUIRE(format::default_segment_size(format::kDataStart + 16 * MiB) == 1 * MiB);
  STATIC_REQUIRE(format::default_segment_size(0) == 1 * MiB);
  // As the engine formats: 88 segments of 4 MiB in 352 MiB.
  CacheFiles files(format::kDataStart + 352 * MiB, kBackingBytes);
  cache::CacheOptions options = files.options(/*format=*/true);
  options.segment_size = 0;
  auto cache = open_cache(options);
  const cache::CacheStats stats = cache->stats();
  CHECK(stats.segment_bytes == 4 * MiB);
  CHECK(stats.segments_total == 88);
}

TEST_CASE("write-zeroes reads back as zeros and discard forgets the cached copy", "[cache][engine]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  const auto data = pattern(5, 100, 16);
  REQUIRE(queue->write(100, 16, data.data()) == 16 * 512);
  REQUIRE(queue->write_zeroes(104, 4) == 0);
  std::vector<std::byte> buffer(16 * kSector);
  REQUIRE(queue->read(100, 16, buffer.data()) == 16 * 512);
  Model model(kBackingSectors);
  model.write(100, 16, 5);
  model.write(104, 4, 0);
  model.check(100, 16, buffer);

  REQUIRE(queue->discard(100, 16) == 0);
  REQUIRE(queue->read(100, 16, buffer.data()) == 16 * 512);
  // Discarded content is undefined, but it is never garbage: the old data (if writeback got it to
  // the backing device before the discard did) or the backing device's zeros.
  for (uint32_t i = 0; i < 16; ++i) {
    const uint64_t id = decode_sector(buffer.data() + i * kSector, 100 + i);
    CHECK((id == 0 || id == 5));
  }
  CHECK(cache->stats().discards == 1);
  CHECK(cache->stats().write_zeroes == 1);
}

TEST_CASE("requests outside the device or not block aligned are refused", "[cache][engine][bad-input]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  std::vector<std::byte> buffer(8 * kSector);
  CHECK(queue->read(kBackingSectors - 4, 8, buffer.data()) == -EINVAL);
  CHECK(queue->write(kBackingSectors, 1, buffer.data()) == -EINVAL);
  CHECK(queue->read(0, 0, buffer.data()) == -EINVAL);
  CHECK(queue->read(UINT64_MAX - 2, 4, buffer.data()) == -EINVAL);
}

TEST_CASE("random workloads match the model while writeback and GC run, and survive detach and reopen",
          "[cache][engine][model]") {
  // Writeback flat out, or (the default's way) at a trickle and as far as GC needs.
  const auto [seed, writeback_rate] =
      GENERATE(table<uint64_t, uint64_t>({{11, 0}, {12, MiB}, {13, 0}, {14, MiB}, {15, 0}, {16, MiB}}));
  INFO("seed " << seed << ", writeback rate " << writeback_rate);
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  {
    cache::CacheOptions options = files.options(true);
    options.tunables.writeback_rate = writeback_rate;
    auto cache = open_cache(options);
    auto queue = make_queue(*cache);
    // Enough data to cycle the 16 MiB cache several times over a 32 MiB device.
    REQUIRE(random_workload(*queue, model, 0, kBackingSectors, seed, 3000, 1) == "");
    check_everything(*queue, model, 0, kBackingSectors);
    const cache::CacheStats stats = cache->stats();
    CHECK(stats.gc_runs > 0);
    CHECK(stats.writeback_batches > 0);
    queue.reset();
    REQUIRE(cache->detach(false).ok());
  }
  // A clean detach leaves every byte on the backing device.
  const auto backing = read_file(files.backing.path());
  for (uint64_t sector = 0; sector < kBackingSectors; ++sector) {
    INFO("backing sector " << sector);
    REQUIRE(decode_sector(backing.data() + sector * kSector, sector) == model.at(sector));
  }
  auto cache = open_cache(files.options());
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
  REQUIRE(random_workload(*queue, model, 0, kBackingSectors, seed + 100, 500, 1'000'000) == "");
  check_everything(*queue, model, 0, kBackingSectors);
}

TEST_CASE("queues on several threads work side by side", "[cache][engine][model]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  Model model(kBackingSectors);
  const uint64_t half = kBackingSectors / 2;
  std::vector<std::thread> threads;
  std::string failures[2];
  for (unsigned t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto queue = make_queue(*cache);
      failures[t] = random_workload(*queue, model, t * half, (t + 1) * half, 40 + t, 2000, (t + 1) * 10'000'000);
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures[0] == "");
  CHECK(failures[1] == "");
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
}

TEST_CASE("an abandoned cache (a crash) reopens with every acknowledged write", "[cache][engine][recovery]") {
  const uint64_t seed = GENERATE(21, 22, 23);
  CacheFiles files(kRegionBytes, kBackingBytes);
  Model model(kBackingSectors);
  {
    auto cache = open_cache(files.options(true));
    auto queue = make_queue(*cache);
    REQUIRE(random_workload(*queue, model, 0, kBackingSectors, seed, 1500, 1) == "");
    // Keep the last writes dirty: writeback fails from here on, so the crash leaves keys to replay.
    cache->backing_faults().writes.count = -1;
    const auto data = pattern(4'000'000, 0, 64);
    REQUIRE(queue->write(0, 64, data.data()) == 64 * 512);
    model.write(0, 64, 4'000'000);
    queue.reset();
    cache->abandon();
  }
  auto cache = open_cache(files.options());
  CHECK(cache->stats().recovered_keys > 0);
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
  REQUIRE(random_workload(*queue, model, 0, kBackingSectors, seed + 7, 500, 5'000'000) == "");
  check_everything(*queue, model, 0, kBackingSectors);
}

TEST_CASE("a write whose data a crash tore under its durable key set is dropped at replay and never written back",
          "[cache][engine][recovery]") {
  // A write's data and its key set share one fence, so a power cut can leave the journal's last key
  // set durable over data not all of which reached the media: that write was never acknowledged.
  // Replay checks the last key set's data against its digest and drops it; earlier key sets were
  // durable, data and all, before the next one was begun.
  CacheFiles files(kRegionBytes, kBackingBytes);
  {
    cache::CacheOptions options = hold_writeback(files.options(true));  // the writes stay dirty
    options.commit_shared_fence_classes = cache::kAllClassesShareFence;
    auto cache = open_cache(options);
    auto queue = make_queue(*cache);
    const auto first = pattern(1, 100, 8);
    REQUIRE(queue->write(100, 8, first.data()) == 8 * 512);
    REQUIRE(cache->flush_all().ok());  // write 1 on the backing device
    const auto second = pattern(2, 100, 8);
    REQUIRE(queue->write(100, 8, second.data()) == 8 * 512);
    const auto last = pattern(3, 200, 8);
    REQUIRE(queue->write(200, 8, last.data()) == 8 * 512);  // the journal's last key set
    queue.reset();
    cache->abandon();
  }
  const bool torn = GENERATE(true, false);
  INFO((torn ? "the last write's data torn" : "intact"));
  if (torn) {
    // One 8-byte word of the last write's data never reached the media.
    auto region = read_file(files.region.path());
    REQUIRE(tear_cached_sector(region, 203, 3));
    write_file(files.region.path(), region);
  }
  const uint64_t expected_last = torn ? 0 : 3;  // the backing device never held sectors 200..207
  std::vector<std::byte> buffer(8 * kSector);
  for (int attach = 0; attach < 2; ++attach) {
    INFO("attach " << attach);
    auto cache = open_cache(files.options());
    auto queue = make_queue(*cache);
    REQUIRE(queue->read(100, 8, buffer.data()) == 8 * 512);
    for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 100 + i) == 2);
    REQUIRE(queue->read(200, 8, buffer.data()) == 8 * 512);
    for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 200 + i) == expected_last);
    // Writeback passes the earlier writes and stops before the dropped key set.
    REQUIRE(cache->flush_all().ok());
    const auto backing = read_file(files.backing.path());
    for (uint32_t i = 0; i < 8; ++i) {
      CHECK(decode_sector(backing.data() + (100 + i) * kSector, 100 + i) == 2);
      CHECK(decode_sector(backing.data() + (200 + i) * kSector, 200 + i) == expected_last);
    }
    queue.reset();
    cache->abandon();  // the next attach replays the same journal again
  }
}

TEST_CASE("settings change at run time and bad values are refused", "[cache][engine][settings]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  REQUIRE(cache->set("read_miss_fill", "off").ok());
  CHECK_FALSE(cache->tunables().read_miss_fill);
  std::vector<std::byte> buffer(8 * kSector);
  REQUIRE(queue->read(0, 8, buffer.data()) == 8 * 512);
  CHECK(cache->stats().fills == 0);
  REQUIRE(cache->set("read_miss_fill", "on").ok());
  REQUIRE(queue->read(0, 8, buffer.data()) == 8 * 512);
  CHECK(cache->stats().fills == 1);

  REQUIRE(cache->set("gc_threshold", "40").ok());
  CHECK(cache->tunables().gc_threshold == 40);
  REQUIRE(cache->set("copy_policy", "clwb").ok());
  CHECK(cache->copy_policy_description().rfind("fixed clwb:", 0) == 0);
  const auto data = pattern(3, 64, 8);
  REQUIRE(queue->write(64, 8, data.data()) == 8 * 512);  // writes go on under the new policy

  struct Bad {
    const char* key;
    const char* value;
    const char* reason;
  };
  for (const Bad& bad : {Bad{"gc_threshold", "91", "not a percentage from 0 to 90"},
                         Bad{"gc_threshold", "-1", "not a percentage"}, Bad{"gc_threshold", "", "not a percentage"},
                         Bad{"read_miss_fill", "maybe", "is not on or off"},
                         Bad{"mode", "writesideways", "not writeback, writethrough or writearound"},
                         Bad{"sequential_cutoff", "-4M", "is not a size"},
                         Bad{"promote_after", "0", "not a miss count from 1 to 255"},
                         Bad{"writeback_low", "50", "must not exceed writeback_high"},
                         Bad{"writeback_high", "101", "not a percentage from 0 to 100"},
                         Bad{"writeback_rate", "fast", "not a rate in bytes per second"},
                         Bad{"copy_policy", "warp", "invalid copy policy"}, Bad{"colour", "blue", "unknown setting"}}) {
    INFO(bad.key << "=" << bad.value);
    const Status status = cache->set(bad.key, bad.value);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message().find(bad.reason) != std::string::npos);
  }
  CHECK(cache->tunables().gc_threshold == 40);
  CHECK(cache->tunables().writeback_low == cache::Tunables{}.writeback_low);
}

TEST_CASE("a batch of writes completes together and behaves like the same writes one by one", "[cache][engine][batch]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  Model model(kBackingSectors);
  std::vector<std::vector<std::byte>> buffers;
  std::vector<cache::Request> batch;
  // Overlapping writes: the later one in the batch wins; a read in the middle sees the earlier ones.
  const uint64_t sectors[] = {100, 104, 100, 5000, 2047};  // the last one crosses a 1 MiB stripe
  for (uint64_t i = 0; i < 5; ++i) {
    buffers.push_back(pattern(i + 1, sectors[i], 8));
    batch.push_back({cache::Op::Write, sectors[i], 8, buffers.back().data(), false});
    model.write(sectors[i], 8, i + 1);
  }
  std::vector<std::byte> middle(8 * kSector);
  batch.insert(batch.begin() + 2, cache::Request{cache::Op::Read, 100, 8, middle.data(), false});
  const std::vector<int> results = queue->execute_batch(batch);
  for (size_t i = 0; i < results.size(); ++i) CHECK(results[i] == 8 * 512);
  CHECK(decode_sector(middle.data(), 100) == 1);
  CHECK(decode_sector(middle.data() + 4 * kSector, 104) == 2);
  check_everything(*queue, model, 0, 6000);
  CHECK(cache->stats().writes == 5);
  // And it survives a crash like any acknowledged write.
  queue.reset();
  cache->abandon();
  cache.reset();
  auto reopened = open_cache(files.options());
  auto again = make_queue(*reopened);
  check_everything(*again, model, 0, 6000);
}

TEST_CASE("batches of more keys than a key set holds, over journal segments, with data checksums, survive a crash",
          "[cache][engine][batch][recovery]") {
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.tunables.data_crc = true;  // two keys per write: its data and its checksum
  Model model(kBackingSectors);
  std::mt19937_64 rng(41);
  constexpr int kBatches = 500, kDirtyBatches = 20;
  {
    auto cache = open_cache(options);
    auto queue = make_queue(*cache);
    uint64_t next_id = 1;
    // 140-179 one-sector writes a batch: 280-358 keys, three key sets (at most 127 keys each) of
    // ~9-11 KB. 500 of them fill several 1 MiB journal segments, and batches of varied sizes make
    // some segment fill in the middle of a batch's key sets. Writeback and GC keep room; the last
    // batches stay dirty.
    for (int batch = 0; batch < kBatches; ++batch) {
      if (batch == kBatches - kDirtyBatches) {
        // Everything so far written back first: with the device refusing writes from here on, the
        // last batches must fit in the room left, whatever writeback had managed by then (on a
        // busy machine it could lag enough for the cache to fill, and the writer waited for room
        // that never came).
        REQUIRE(cache->flush_all().ok());
        cache->backing_faults().writes.count = -1;
      }
      std::vector<std::vector<std::byte>> buffers;
      std::vector<cache::Request> requests;
      const auto writes = static_cast<int>(140 + rng() % 40);
      buffers.reserve(writes);
      for (int i = 0; i < writes; ++i) {
        const uint64_t sector = rng() % kBackingSectors;
        const uint64_t id = next_id++;
        buffers.push_back(pattern(id, sector, 1));
        requests.push_back({cache::Op::Write, sector, 1, buffers.back().data(), false});
        model.write(sector, 1, id);
      }
      for (const int result : queue->execute_batch(requests)) REQUIRE(result == static_cast<int>(kSector));
    }
    check_everything(*queue, model, 0, kBackingSectors);
    CHECK(cache->stats().data_crc_errors == 0);
    queue.reset();
    cache->abandon();
  }
  options.format = false;
  auto cache = open_cache(options);
  CHECK(cache->stats().recovered_keys >= 2 * kDirtyBatches * 140);
  auto queue = make_queue(*cache);
  check_everything(*queue, model, 0, kBackingSectors);
  // Every checksum key was journaled with its data's CRC, not the placeholder it started with.
  CHECK(cache->stats().data_crc_errors == 0);
}

TEST_CASE("random batches (as the ublk frontend submits them) match the model", "[cache][engine][batch][model]") {
  const uint64_t seed = GENERATE(31, 32, 33, 34);
  INFO("seed " << seed);
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto queue = make_queue(*cache);
  Model model(kBackingSectors);
  std::mt19937_64 rng(seed);
  uint64_t next_id = 1;
  // Small device range so that writes in one batch often overlap each other and reads.
  const uint64_t span = 4096;
  for (int round = 0; round < 1500; ++round) {
    const size_t count = 1 + rng() % 8;
    std::vector<cache::Request> requests;
    std::vector<std::vector<std::byte>> buffers;
    struct Check {
      size_t request;
      uint64_t sector;
      uint32_t sectors;
      std::vector<uint64_t> expected;
    };
    std::vector<Check> checks;
    std::vector<uint64_t> ids;  // what each request writes: a write's id, 0 for zeros
    buffers.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const uint64_t sector = rng() % span;
      const auto sectors = static_cast<uint32_t>(1 + rng() % 16);
      const unsigned kind = static_cast<unsigned>(rng() % 10);
      ids.push_back(0);
      if (kind < 6) {
        const uint64_t id = next_id++;
        ids.back() = id;
        buffers.push_back(pattern(id, sector, sectors));
        requests.push_back({cache::Op::Write, sector, sectors, buffers.back().data(), false});
        model.write(sector, sectors, id);
      } else if (kind < 9) {
        buffers.emplace_back(sectors * kSector);
        requests.push_back({cache::Op::Read, sector, sectors, buffers.back().data(), false});
        Check check{requests.size() - 1, sector, sectors, {}};
        for (uint32_t s = 0; s < sectors; ++s) check.expected.push_back(model.at(sector + s));
        checks.push_back(std::move(check));
      } else {
        buffers.emplace_back();
        requests.push_back({cache::Op::WriteZeroes, sector, sectors, nullptr, false});
        model.write(sector, sectors, 0);
      }
    }
    const std::vector<int> results = queue->execute_batch(requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      const int expected = requests[i].op == cache::Op::WriteZeroes ? 0 : static_cast<int>(requests[i].sectors * kSector);
      REQUIRE(results[i] == expected);
    }
    for (const Check& check : checks) {
      const std::byte* data = requests[check.request].buffer;
      for (uint32_t s = 0; s < check.sectors; ++s) {
        INFO("round " << round << " read of " << check.sector << "+" << check.sectors << " at sector " << check.sector + s);
        const uint64_t sector = check.sector + s;
        const uint64_t got = decode_sector(data + s * kSector, sector);
        // The requests after the read in its batch are concurrent with it: it may show their
        // data (a miss can reach the backing device after writeback stored a later write).
        bool later = false;
        for (size_t j = check.request + 1; j < requests.size(); ++j) {
          later |= requests[j].op != cache::Op::Read && sector >= requests[j].sector &&
                   sector < requests[j].sector + requests[j].sectors && got == ids[j];
        }
        REQUIRE((got == check.expected[s] || later));
      }
    }
  }
  check_everything(*queue, model, 0, span + 16);
  queue.reset();
  cache->abandon();
  cache.reset();
  auto reopened = open_cache(files.options());
  auto again = make_queue(*reopened);
  check_everything(*again, model, 0, span + 16);
}

TEST_CASE("a queue journals each key once: its next batch does not repeat the last request's keys",
          "[cache][engine][batch]") {
  // A queue kept the keys of its last single request (a write, write-zeroes or discard) among the
  // keys it stages, and its next batch of writes journaled them again with new sequence numbers:
  // sectors another queue had written in between read back as the older data, or as zeros. A
  // repeated write key also named a segment GC could already have reclaimed (its newest key
  // there was the old number), which recovery then refused.
  const cache::Op op = GENERATE(cache::Op::Write, cache::Op::WriteZeroes, cache::Op::Discard);
  INFO("first request: " << (op == cache::Op::Write ? "write" : op == cache::Op::WriteZeroes ? "write-zeroes" : "discard"));
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto first = make_queue(*cache);
  auto second = make_queue(*cache);
  const auto older = pattern(6, 100, 8);
  REQUIRE(first->execute({op, 100, 8, const_cast<std::byte*>(older.data()), false}) ==
          (op == cache::Op::Write ? 8 * 512 : 0));
  const auto data = pattern(7, 100, 8);
  REQUIRE(second->write(100, 8, data.data()) == 8 * 512);
  // Elsewhere, as a batch on the first queue.
  const auto other = pattern(8, 5000, 8);
  const std::vector<int> results =
      first->execute_batch({{cache::Op::Write, 5000, 8, const_cast<std::byte*>(other.data()), false},
                            {cache::Op::Write, 5000, 8, const_cast<std::byte*>(other.data()), false}});
  CHECK(results == std::vector<int>{8 * 512, 8 * 512});
  CHECK(cache->stats().next_seq == 5);  // four keys: the first request's, the write, the batch's two
  std::vector<std::byte> buffer(8 * kSector);
  REQUIRE(second->read(100, 8, buffer.data()) == 8 * 512);
  for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 100 + i) == 7);
  // And so after a crash.
  first.reset();
  second.reset();
  cache->abandon();
  cache.reset();
  auto reopened = open_cache(files.options());
  auto queue = make_queue(*reopened);
  REQUIRE(queue->read(100, 8, buffer.data()) == 8 * 512);
  for (uint32_t i = 0; i < 8; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 100 + i) == 7);
}

TEST_CASE("a discard reaches the backing device in journal order and never erases a newer write there",
          "[cache][engine]") {
  // A discard used to be passed down by its queue right after it was journaled, completing when
  // the backing device was done. A newer write of the same sectors (later in the same batch, or
  // from another queue meanwhile) could be written back first; the hole punched afterwards erased
  // it on the backing device, and once GC reclaimed its segment, or after a crash, the sectors
  // read back as zeros. (Holding writeback back while a discard was under way fixed that but could
  // deadlock a queue waiting for a free segment before it dispatched the discard's completion.)
  // Now writeback passes each discard down in journal order, only where no newer key wrote.
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  // Journal slots 0 and 1. (Writeback used to read slot 0 first; it now merges the journals by
  // key number, but key sets of two journals can still interleave their numbers.)
  auto first = make_queue(*cache);
  auto second = make_queue(*cache);
  const auto old = pattern(1, 96, 16);
  REQUIRE(first->write(96, 16, old.data()) == 16 * 512);
  REQUIRE(cache->flush_all().ok());  // on the backing device
  // The discard and a write of part of it in one batch; a newer write of another part from the
  // other queue.
  const auto in_batch = pattern(2, 100, 4);
  const std::vector<int> results =
      second->execute_batch({{cache::Op::Discard, 96, 16, nullptr, false},
                             {cache::Op::Write, 100, 4, const_cast<std::byte*>(in_batch.data()), false}});
  CHECK(results == std::vector<int>{0, 4 * 512});
  const auto newer = pattern(3, 108, 4);
  REQUIRE(first->write(108, 4, newer.data()) == 4 * 512);
  REQUIRE(cache->flush_all().ok());
  // The discarded sectors nobody wrote again are gone from the backing device too; the writes are there.
  const std::vector<uint64_t> expected = {0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0, 3, 3, 3, 3};
  auto backing = read_file(files.backing.path());
  for (uint32_t i = 0; i < 16; ++i) CHECK(decode_sector(backing.data() + (96 + i) * kSector, 96 + i) == expected[i]);
  std::vector<std::byte> buffer(16 * kSector);
  REQUIRE(first->read(96, 16, buffer.data()) == 16 * 512);
  for (uint32_t i = 0; i < 16; ++i) CHECK(decode_sector(buffer.data() + i * kSector, 96 + i) == expected[i]);
  first.reset();
  second.reset();
  REQUIRE(cache->detach(false).ok());
  backing = read_file(files.backing.path());
  for (uint32_t i = 0; i < 16; ++i) CHECK(decode_sector(backing.data() + (96 + i) * kSector, 96 + i) == expected[i]);
}

TEST_CASE("a discard completes once journaled and never holds up writers waiting for space", "[cache][engine]") {
  // The queue's ring is never driven here, as when a queue thread is stuck waiting for a free
  // segment: nothing may then depend on it. (Writeback once held back data behind a discard until
  // the discard's completion was dispatched on its queue's ring; with the cache full, the queue
  // waited for GC, GC for writeback, writeback for the queue.)
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(files.options(true));
  auto ring = std::move(io::Ring::create(64).value());
  auto queue = std::move(cache->create_queue(*ring).value());
  struct Done final : cache::RequestCompletion {
    int result = 1;
    void complete(int value) override { result = value; }
  };
  Done discarded;
  queue->submit({cache::Op::Discard, 0, 64, nullptr, false}, &discarded);
  REQUIRE(discarded.result == 0);
  // Three times the cache's size, starting over the discarded sectors.
  const uint32_t sectors = 256;
  std::vector<std::byte> data(sectors * kSector, std::byte{0x6B});
  for (uint64_t i = 0; i < 3 * (kRegionBytes - format::kDataStart) / (sectors * kSector); ++i) {
    Done written;
    queue->submit({cache::Op::Write, (i * sectors) % kBackingSectors, sectors, data.data(), false}, &written);
    REQUIRE(written.result == static_cast<int>(sectors * kSector));
  }
  CHECK(cache->stats().segments_reclaimed > 0);
  CHECK(ring->in_flight() == 0);  // the queue submitted no backing I/O of its own
}

TEST_CASE("a discarded range reads as zeros until writeback has passed the discard down", "[cache][engine][discard]") {
  // Reads of discarded sectors used to go to the backing device while writeback punched the hole
  // there. A hole that does not cover whole pages (or blocks) is zeroed in place, and a read racing
  // with that saw a sector half old data, half zeros: data no write ever put there. A pending
  // discard's sectors now read as zeros without asking the backing device.
  CacheFiles files(kRegionBytes, kBackingBytes);
  auto cache = open_cache(hold_writeback(files.options(true)));  // the discard stays pending
  auto queue = make_queue(*cache);
  const auto old = pattern(1, 96, 16);
  REQUIRE(queue->write(96, 16, old.data()) == 16 * 512);
  REQUIRE(cache->flush_all().ok());  // clean: on the backing device, still cached
  // Not aligned to pages at either end.
  REQUIRE(queue->discard(97, 10) == 0);
  // Every backing read fails from here: a read that asks the backing device gets EIO.
  cache->backing_faults().reads.count = -1;
  std::vector<std::byte> buffer(16 * kSector);
  REQUIRE(queue->read(96, 16, buffer.data()) == 16 * 512);
  for (uint32_t i = 0; i < 16; ++i) {
    CHECK(decode_sector(buffer.data() + i * kSector, 96 + i) == (i >= 1 && i < 11 ? 0 : 1));
  }
  cache->backing_faults().reads.count = 0;
  REQUIRE(cache->flush_all().ok());  // passed down: the tombstones go, reads go to the device
  cache->backing_faults().reads.count = -1;
  CHECK(queue->read(97, 10, buffer.data()) == -EIO);
  cache->backing_faults().reads.count = 0;
  REQUIRE(queue->read(96, 16, buffer.data()) == 16 * 512);
  for (uint32_t i = 0; i < 16; ++i) {
    CHECK(decode_sector(buffer.data() + i * kSector, 96 + i) == (i >= 1 && i < 11 ? 0 : 1));
  }

}

TEST_CASE("reads racing with a discard's pass-down see old data or zeros and never a mix", "[cache][engine][discard]") {
  // The race the test above rules out, run for real: a reader of the range while writeback punches
  // holes that split pages, one per page. (Before reads of pending discards stopped going to the
  // device, this saw torn sectors within a few rounds.)
  constexpr uint64_t kFirst = 2048;  // 1 MiB: page-aligned
  constexpr uint32_t kPages = 32;
  constexpr uint32_t kSectors = kPages * 8;
  CacheFiles files(kRegionBytes, kBackingBytes);
  cache::CacheOptions options = files.options(true);
  options.tunables.read_miss_fill = false;  // every read of a gap goes to the device
  auto cache = open_cache(options);
  auto queue = make_queue(*cache);
  auto reader_queue = make_queue(*cache);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0};
  std::atomic<uint64_t> reads{0};
  // A read that overlaps a write of the range may see that write's data mixed with older data:
  // it can reach the backing file while writeback copies the new data into it (a file gives no
  // sector atomicity between a read and a write at the same time). Only reads that overlap no
  // write are checked; the discards and their pass-down are long acknowledged by then.
  std::atomic<uint64_t> writes_begun{0}, writes_done{0};
  std::thread reader([&] {
    std::vector<std::byte> data(kSectors * kSector);
    while (!stop.load()) {
      const uint64_t done_before = writes_done.load();
      const int result = reader_queue->read(kFirst, kSectors, data.data());
      if (writes_begun.load() != done_before) continue;
      if (result != static_cast<int>(kSectors * kSector)) ++wrong;
      for (uint32_t i = 0; i < kSectors; ++i) {
        if (decode_sector(data.data() + i * kSector, kFirst + i) == UINT64_MAX) ++wrong;
      }
      ++reads;
    }
  });
  uint64_t round = 1;
  for (const unsigned rounds = scaled(1000); round <= rounds && wrong.load() == 0; ++round) {
    const auto data = pattern(round, kFirst, kSectors);
    ++writes_begun;
    REQUIRE(queue->write(kFirst, kSectors, data.data()) == static_cast<int>(kSectors * kSector));
    ++writes_done;
    REQUIRE(cache->flush_all().ok());
    // Part of every page, a separate discard each: as many holes punched in place.
    for (uint32_t page = 0; page < kPages; ++page) REQUIRE(queue->discard(kFirst + page * 8 + 1 + round % 3, 4) == 0);
    REQUIRE(cache->flush_all().ok());
  }
  stop = true;
  reader.join();
  INFO(reads.load() << " reads checked in " << round - 1 << " rounds");
  CHECK(reads.load() > 0);
  CHECK(wrong.load() == 0);
}

TEST_CASE("a request's latency is counted in the first bucket whose bound it does not pass", "[cache][metrics]") {
  using std::chrono::nanoseconds;
  using cache::LatencyHistogram;
  // Bucket i holds spans up to 2^i us; the bounds themselves belong to the bucket below them.
  CHECK(LatencyHistogram::bucket_of(nanoseconds(0)) == 0);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(1)) == 0);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(1000)) == 0);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(1001)) == 1);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(2000)) == 1);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(2001)) == 2);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(7999)) == 3);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(8000)) == 3);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(8001)) == 4);
  const uint64_t last_bound_ns = uint64_t{1000} << (cache::kLatencyBuckets - 1);  // about 1 s
  CHECK(LatencyHistogram::bucket_of(nanoseconds(last_bound_ns)) == cache::kLatencyBuckets - 1);
  // Slower than every bound: the overflow bucket, however slow.
  CHECK(LatencyHistogram::bucket_of(nanoseconds(last_bound_ns + 1)) == cache::kLatencyBuckets);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(INT64_MAX)) == cache::kLatencyBuckets);
  CHECK(LatencyHistogram::bucket_of(nanoseconds(-5)) == 0);  // (a clock read out of order)
  // Against the bounds the metrics expose: each span lands where a bound-by-bound search puts it.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const int64_t ns = static_cast<int64_t>(rng() >> (rng() % 64));
    size_t expected = 0;
    double bound = cache::kLatencyBucketBase;
    while (expected < cache::kLatencyBuckets && static_cast<double>(ns) * 1e-9 > bound * (1 + 1e-12)) {
      ++expected;
      bound *= 2;
    }
    INFO("span " << ns << " ns");
    REQUIRE(LatencyHistogram::bucket_of(nanoseconds(ns)) == expected);
  }

  LatencyHistogram histogram;
  histogram.record(nanoseconds(1500));
  histogram.record(nanoseconds(1600));
  histogram.record(nanoseconds(3'000'000'000));
  cache::LatencySnapshot snapshot;
  histogram.add_to(snapshot);
  CHECK(snapshot.counts[1] == 2);
  CHECK(snapshot.counts[cache::kLatencyBuckets] == 1);
  CHECK(snapshot.count == 3);
  CHECK(snapshot.sum_seconds == Approx(3.0000031));
}

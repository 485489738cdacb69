#include <catch2/catch.hpp>
#include <fstream>

#include "daemon/cache_config.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::daemon;

TEST_CASE("the state file round-trips and a missing one is empty", "[daemon][state]") {
  pcached::testing::ScratchFile file(0);
  CacheConfig a;
  a.name = "fast";
  a.region = "/dev/dax0.0";
  a.backing = "/dev/sdb";
  a.queues = 4;
  a.device_id = 3;
  a.copy_policy = "threshold:4K";
  a.tunables.mode = cache::CacheMode::Writearound;
  a.tunables.sequential_cutoff = 0;
  a.tunables.writeback_rate = 64ull << 20;
  CacheConfig b = a;
  b.name = "slow.1";
  b.region = "/mnt/pmem/cache";
  b.allow_volatile_region = true;
  b.queue_affinity = QueueAffinity::None;
  CacheConfig c = a;
  c.name = "pinned";
  c.queue_affinity = QueueAffinity::Kernel;
  c.queue_poll_us = 0;
  REQUIRE(save_state(file.path(), {a, b, c}).ok());
  auto loaded = load_state(file.path());
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == 3);
  CHECK(to_json(loaded->at(0)) == to_json(a));
  CHECK(to_json(loaded->at(1)) == to_json(b));
  CHECK(loaded->at(0).tunables == a.tunables);
  CHECK(loaded->at(0).queue_affinity == QueueAffinity::Auto);
  CHECK(loaded->at(1).queue_affinity == QueueAffinity::None);
  CHECK(loaded->at(2).queue_affinity == QueueAffinity::Kernel);
  CHECK(loaded->at(0).queue_poll_us == 50);
  CHECK(loaded->at(2).queue_poll_us == 0);
  CHECK(load_state(file.path() + ".absent")->empty());
}

TEST_CASE("a damaged state file is refused with the reason", "[daemon][state][bad-input]") {
  pcached::testing::ScratchFile file(0);
  auto write = [&](const std::string& text) { std::ofstream(file.path()) << text; };
  write("{not json");
  CHECK(load_state(file.path()).status().message().find("not valid JSON") != std::string::npos);
  write(R"({"version":9,"caches":[]})");
  CHECK(load_state(file.path()).status().message().find("unsupported version") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"x"}]})");
  CHECK(load_state(file.path()).status().message().find("missing argument 'region'") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"../etc","region":"/a","backing":"/b"}]})");
  CHECK(load_state(file.path()).status().message().find("invalid cache name") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","depth":0}]})");
  CHECK(load_state(file.path()).status().message().find("between 1 and 4096") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","queue_affinity":"numa"}]})");
  CHECK(load_state(file.path()).status().message().find("queue_affinity 'numa': expected 'auto', 'kernel' or 'none'") !=
        std::string::npos);
  // A segment size the format would refuse is refused here, before any region is touched.
  for (const char* size : {"3145728", "524288", "1073741823"}) {
    INFO(size);
    write(std::string(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","segment_size":)") + size + "}]}");
    CHECK(load_state(file.path()).status().message().find(
              "it must be 0 (chosen from the region's size) or a power of two between 1 MiB and 1 GiB") !=
          std::string::npos);
  }
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","queue_poll_us":10001}]})");
  CHECK(load_state(file.path()).status().message().find("'queue_poll_us' is 10001; it must be between 0 and 10000") !=
        std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","queue_poll_us":"fast"}]})");
  CHECK(load_state(file.path()).status().message().find("queue_poll_us") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","settings":{"mode":"fast"}}]})");
  CHECK(load_state(file.path()).status().message().find("'fast' is not writeback") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","settings":{"colour":"red"}}]})");
  CHECK(load_state(file.path()).status().message().find("unknown setting 'colour'") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","settings":[1]}]})");
  CHECK(load_state(file.path()).status().message().find("expected an object") != std::string::npos);
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","gc_threshold":-3}]})");
  CHECK(load_state(file.path()).status().message().find("gc_threshold: expected a string") != std::string::npos);
  // Found by the state-file fuzzer: 4294967296 used to become device 0, someone else's device.
  for (const char* id : {"4294967296", "2147483648", "-2", "-9223372036854775808", "18446744073709551615"}) {
    INFO(id);
    write(std::string(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","device_id":)") + id + "}]}");
    CHECK(load_state(file.path()).status().message().find("neither -1 nor a ublk device number") != std::string::npos);
  }
  write(R"({"version":1,"caches":[{"name":"a","region":"/a","backing":"/b","device_id":2147483647}]})");
  CHECK(load_state(file.path())->at(0).device_id == 2147483647);
}

TEST_CASE("settings come from the add request's keys and from older state files", "[daemon][state]") {
  // The previous state format kept gc_threshold and read_miss_fill as top-level values.
  auto old = config_from_json(nlohmann::json::parse(
      R"({"name":"a","region":"/a","backing":"/b","gc_threshold":55,"read_miss_fill":false})"));
  REQUIRE(old.ok());
  CHECK(old->tunables.gc_threshold == 55);
  CHECK(old->queue_affinity == QueueAffinity::Auto);  // state files from before the setting: the default
  CHECK(old->queue_poll_us == 50);
  CHECK_FALSE(old->tunables.read_miss_fill);
  auto added = config_from_json(nlohmann::json::parse(
      R"({"name":"a","region":"/a","backing":"/b","settings":{"mode":"writethrough","sequential_cutoff":"8M"}})"));
  REQUIRE(added.ok());
  CHECK(added->tunables.mode == cache::CacheMode::Writethrough);
  CHECK(added->tunables.sequential_cutoff == 8ull << 20);
}

TEST_CASE("cache names are checked", "[daemon][bad-input]") {
  for (const char* good : {"cache0", "db_cache", "a.b-c", "X"}) CHECK(check_cache_name(good).ok());
  for (const char* bad : {"", ".hidden", "-rf", "a/b", "a b", "tab\t", "ünï"}) {
    INFO(bad);
    CHECK_FALSE(check_cache_name(bad).ok());
  }
  CHECK_FALSE(check_cache_name(std::string(65, 'a')).ok());
}

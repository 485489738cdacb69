// A real Daemon on the in-process frontend (no kernel, no ublk driver), driven through its control
// socket as the CLI drives it (ControlServer + control::call) and through Daemon::handle: every
// command, its errors, and a restart on the same state directory.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "backing/backing_device.h"
#include "cli/status_view.h"
#include "control/protocol.h"
#include "daemon/control_server.h"
#include "daemon/daemon.h"
#include "support/cache_fixture.h"

using namespace pcached;
using namespace pcached::testing;
using nlohmann::json;

namespace {

constexpr uint64_t kRegionBytes = 32 * MiB;
constexpr uint64_t kBackingBytes = 16 * MiB;

// A directory under /tmp, removed with everything in it when the object goes away.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = "/tmp/pcached-daemon-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a directory in /tmp");
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What `pcached add --format` sends, for a cache on small test files: 1 MiB segments, the nt copy
// policy (no calibration), writeback on a /dev/shm region allowed, no sequential cutoff.
json add_args(const CacheFiles& files, const std::string& name) {
  return {{"cache", files.region.path()},
          {"backing", files.backing.path()},
          {"name", name},
          {"queues", 1},
          {"depth", 64},
          {"copy_policy", "nt"},
          {"segment_size", 1 * MiB},
          {"format", true},
          {"force", false},
          {"allow_volatile_region", false},
          {"allow_volatile_writeback", true},
          {"settings", {{"mode", "writeback"}, {"sequential_cutoff", "0"}}}};
}

// A daemon and its control socket on a state directory that outlives restarts.
class DaemonUnderTest {
 public:
  DaemonUnderTest() { start(); }
  ~DaemonUnderTest() { stop(); }

  void start() {
    daemon::DaemonOptions options;
    options.state_dir = state_.path() + "/state";
    options.frontend = daemon::FrontendKind::InProcess;
    // Would fail the start if the in-process frontend touched ublk at all.
    options.ublk_control = state_.path() + "/no-ublk-control";
    auto started = daemon::Daemon::start(options);
    if (!started.ok()) FAIL(started.status().message());
    daemon_ = std::move(started.value());
    auto server = daemon::ControlServer::listen(socket_path(), [this](const std::string& request, const auto& progress) {
      return daemon_->handle(request, progress);
    });
    if (!server.ok()) FAIL(server.status().message());
    server_ = std::move(server.value());
  }

  // As the daemon goes when it is killed or exits: nothing is written on the way out.
  void stop() {
    server_.reset();
    daemon_.reset();
  }

  Result<json> call(const std::string& command, const json& args = json::object(),
                    const control::ProgressHandler& on_progress = {}) const {
    return control::call(socket_path(), {command, args}, on_progress);
  }

  json ok(const std::string& command, const json& args = json::object()) const {
    auto result = call(command, args);
    INFO(command << " " << args.dump());
    if (!result.ok()) FAIL(result.status().message());
    return result.value();
  }

  daemon::Daemon& daemon() { return *daemon_; }
  std::string socket_path() const { return state_.path() + "/control.sock"; }
  std::string state_file() const { return state_.path() + "/state/state.json"; }

  std::shared_ptr<frontend::SyncQueue> queue(const std::string& cache) {
    auto queue = daemon_->open_queue(cache);
    if (!queue.ok()) FAIL(queue.status().message());
    return queue.value();
  }

 private:
  // The /dev/shm regions take the real cache-line flush paths, as in the engine's tests.
  ForcedGranularity cache_line_{"CACHE_LINE"};
  TemporaryDirectory state_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::unique_ptr<daemon::ControlServer> server_;
};

// Writes `sectors` sectors of write `id`'s pattern at `sector` through the queue.
void write_pattern(frontend::SyncQueue& queue, uint64_t id, uint64_t sector, uint32_t sectors) {
  const std::vector<std::byte> data = pattern(id, sector, sectors);
  REQUIRE(queue.write(sector, sectors, data.data()) == static_cast<int>(sectors * kSector));
}

// Whether every sector of the range holds write `id`'s pattern, read through the queue.
bool reads_back(frontend::SyncQueue& queue, uint64_t id, uint64_t sector, uint32_t sectors) {
  std::vector<std::byte> data(sectors * kSector);
  if (queue.read(sector, sectors, data.data()) != static_cast<int>(sectors * kSector)) return false;
  for (uint32_t i = 0; i < sectors; ++i) {
    if (decode_sector(data.data() + i * kSector, sector + i) != id) return false;
  }
  return true;
}

// Whether the backing file holds write `id`'s pattern over the range.
bool backing_holds(const CacheFiles& files, uint64_t id, uint64_t sector, uint32_t sectors) {
  const std::vector<std::byte> bytes = read_file(files.backing.path(), sector * kSector, size_t{sectors} * kSector);
  if (bytes.size() != size_t{sectors} * kSector) return false;
  for (uint32_t i = 0; i < sectors; ++i) {
    if (decode_sector(bytes.data() + size_t{i} * kSector, sector + i) != id) return false;
  }
  return true;
}

// Background writeback as slow as it gets (1 byte/s, never idle): data written stays dirty until
// a flush or a remove writes it back.
json held_dirty(json args) {
  args["settings"]["writeback_rate"] = "1";
  args["settings"]["writeback_idle_ms"] = "0";
  return args;
}

// Writes `writes` runs of 128 KiB (patterns first_id, first_id + 1, ... 1 MiB apart) into a cache
// and makes its backing device hold up every writeback submission for delay_us.
Result<backing::FaultInjection*> dirty_on_slow_device(DaemonUnderTest& d, const std::string& cache, uint64_t first_id,
                                                      unsigned writes, uint32_t delay_us) {
  {
    auto queue = d.queue(cache);
    for (uint64_t i = 0; i < writes; ++i) write_pattern(*queue, first_id + i, i * 2048, 256);
  }
  auto faults = d.daemon().backing_faults(cache);
  REQUIRE(faults.ok());
  faults.value()->writes.delay_us = delay_us;
  return faults;
}

// Starts a flush of `cache` that asks for progress reports, and returns once the first report has
// come (the flush is writing back); the future holds its answer.
std::future<Result<json>> flush_under_way(DaemonUnderTest& d, const std::string& cache) {
  auto reported = std::make_shared<std::promise<void>>();
  auto first = std::make_shared<std::atomic<bool>>(true);
  std::future<void> report = reported->get_future();
  auto flushing = std::async(std::launch::async, [&d, cache, reported, first] {
    return d.call("flush", {{"name", cache}, {"progress", true}}, [reported, first](const json&) {
      if (first->exchange(false)) reported->set_value();
    });
  });
  REQUIRE(report.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  return flushing;
}

template <typename T>
int error_of(const Result<T>& result) {
  return result.ok() ? 0 : result.status().code();
}
std::string message_of(const Result<json>& result) { return result.ok() ? "" : result.status().message(); }

}  // namespace

TEST_CASE("the default frontend is ublk: without its control device the daemon does not start", "[daemon]") {
  TemporaryDirectory state;
  daemon::DaemonOptions options;
  options.state_dir = state.path() + "/state";
  options.ublk_control = state.path() + "/no-ublk-control";
  auto started = daemon::Daemon::start(options);
  REQUIRE_FALSE(started.ok());
  CHECK_THAT(started.status().message(), Catch::Contains("cannot open " + options.ublk_control));
}

TEST_CASE("add exports a cache as inprocN; list and status describe it", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes), db(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;

  const json added = d.ok("add", add_args(web, "web"));
  CHECK(added["name"] == "web");
  CHECK(added["device"] == "inproc0");
  CHECK(added["state"] == "running");
  json second = add_args(db, "ignored");
  second.erase("name");  // the daemon names it cacheN
  second["settings"]["mode"] = "writethrough";
  second["queues"] = 2;
  const json db_added = d.ok("add", second);
  CHECK(db_added["name"] == "cache0");
  CHECK(db_added["device"] == "inproc1");
  CHECK(db_added["mode"] == "writethrough");

  const json list = d.ok("list");
  REQUIRE(list["caches"].size() == 2);
  CHECK(list["caches"][0]["name"] == "cache0");
  CHECK(list["caches"][1]["name"] == "web");
  CHECK(list["caches"][1]["region"] == web.region.path());
  CHECK(list["caches"][1]["backing"] == web.backing.path());
  CHECK(list["caches"][1]["device_bytes"] == kBackingBytes);

  // By name or by device, as the CLI accepts either.
  const json status = d.ok("status", {{"name", "inproc0"}});
  CHECK(status["name"] == "web");
  CHECK(status["mode"] == "writeback");
  CHECK(status["frontend"] == json{{"kind", "in-process"}, {"id", 0}, {"queues", 1}, {"depth", 64}, {"open_queues", 0}});
  CHECK(status["queues"] == 1);
  CHECK(status["depth"] == 64);
  CHECK(status["dirty_bytes"] == 0);
  CHECK(status["settings"]["sequential_cutoff"] == "0");
  for (const char* field : {"segments", "reads", "writes", "writeback", "gc", "fills", "bypass", "direct_writes",
                            "errors", "copy_policy", "recovery", "persistence_domain", "capacity_bytes"}) {
    INFO(field);
    CHECK(status.contains(field));
  }
  CHECK(d.ok("status", {{"name", "cache0"}})["frontend"]["queues"] == 2);

  // The state file keeps each device's number for the next daemon.
  std::ifstream state(d.state_file());
  const json saved = json::parse(state);
  REQUIRE(saved["caches"].size() == 2);
  CHECK(saved["caches"][1]["device_id"] == 0);
  CHECK(saved["caches"][0]["device_id"] == 1);
}

TEST_CASE("add refuses what is in use, taken, blank or already formatted, with the reason", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes), other(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;

  SECTION("a blank region needs --format") {
    json args = add_args(web, "web");
    args["format"] = false;
    const auto refused = d.call("add", args);
    CHECK(error_of(refused) == ENODATA);
    CHECK_THAT(message_of(refused), Catch::Contains("is blank"));
    CHECK(d.ok("list")["caches"].empty());
  }

  SECTION("a region or backing device another cache uses, or a name taken") {
    d.ok("add", add_args(web, "web"));
    json same_region = add_args(other, "again");
    same_region["cache"] = web.region.path();
    const auto region_busy = d.call("add", same_region);
    CHECK(error_of(region_busy) == EBUSY);
    CHECK(message_of(region_busy) == "cache 'web' already uses " + web.region.path());
    json same_backing = add_args(other, "again");
    same_backing["backing"] = web.backing.path();
    CHECK(message_of(d.call("add", same_backing)) == "cache 'web' already uses " + web.backing.path());
    CHECK(error_of(d.call("add", add_args(other, "web"))) == EEXIST);
    CHECK(error_of(d.call("add", add_args(other, "no/slash"))) == EINVAL);
    CHECK(d.ok("list")["caches"].size() == 1);
  }

  SECTION("a region holding a cache is attached without --format, and formatted over only with --force") {
    d.ok("add", add_args(web, "web"));
    d.ok("remove", {{"name", "web"}});
    const auto refused = d.call("add", add_args(web, "web"));
    CHECK(error_of(refused) != 0);
    CHECK_THAT(message_of(refused), Catch::Contains("--force"));
    json attach = add_args(web, "web");
    attach["format"] = false;
    CHECK(d.ok("add", attach)["device"] == "inproc0");
    d.ok("remove", {{"name", "web"}});
    json forced = add_args(web, "web");
    forced["force"] = true;
    CHECK(d.ok("add", forced)["state"] == "running");
  }

  SECTION("bad arguments") {
    CHECK_THAT(message_of(d.call("add", {{"backing", web.backing.path()}})), Catch::Contains("missing argument 'cache'"));
    json deep = add_args(web, "web");
    deep["depth"] = 0;
    CHECK_THAT(message_of(d.call("add", deep)), Catch::Contains("'depth' is 0"));
    json bad_setting = add_args(web, "web");
    bad_setting["settings"]["colour"] = "blue";
    CHECK(error_of(d.call("add", bad_setting)) == EINVAL);
    CHECK(d.ok("list")["caches"].empty());
  }
}

TEST_CASE("I/O through the in-process device moves the status counters", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", add_args(web, "web"));
  const json before = d.ok("status", {{"name", "web"}});

  auto queue = d.queue("web");
  CHECK(d.ok("status", {{"name", "web"}})["frontend"]["open_queues"] == 1);
  // One queue, as the device was added with --queues 1.
  CHECK(error_of(d.daemon().open_queue("inproc0")) == EBUSY);
  write_pattern(*queue, 1, 0, 128);
  write_pattern(*queue, 2, 1024, 64);
  CHECK(reads_back(*queue, 1, 0, 128));
  CHECK(reads_back(*queue, 2, 1024, 64));

  const json after = d.ok("status", {{"name", "web"}});
  CHECK(after["writes"]["total"].get<uint64_t>() == before["writes"]["total"].get<uint64_t>() + 2);
  CHECK(after["writes"]["bytes"].get<uint64_t>() == before["writes"]["bytes"].get<uint64_t>() + 192 * kSector);
  CHECK(after["reads"]["hits"].get<uint64_t>() >= before["reads"]["hits"].get<uint64_t>() + 2);
  CHECK(after["cached_bytes"].get<uint64_t>() >= 192 * kSector);
  CHECK(after["extents"].get<uint64_t>() >= 2);
  CHECK(after["index_bytes"].get<uint64_t>() > 0);
  // A bit per sector of the data area, and a word per segment for its trace mark.
  const uint64_t segments = after["segments"]["total"].get<uint64_t>();
  const uint64_t data_sectors = segments * after["segments"]["size_bytes"].get<uint64_t>() / kSector;
  CHECK(after["live_map_bytes"].get<uint64_t>() == ((data_sectors + 63) / 64 + segments) * 8);
  // Writeback runs in the background: dirty now, or already written back.
  CHECK(after["dirty_bytes"].get<uint64_t>() + after["writeback"]["bytes"].get<uint64_t>() >= 192 * kSector);
}

// The lines of text, each without its newline.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line_starting(const std::vector<std::string>& lines, const std::string& start) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) { return line.rfind(start, 0) == 0; });
}

TEST_CASE("pcached list and status render the daemon's answers: every line, trouble only when there is some",
          "[daemon][in-process][cli]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", add_args(web, "web"));
  auto queue = d.queue("web");
  write_pattern(*queue, 1, 0, 128);

  const std::vector<std::string> list = lines_of(pcached::cli::render_list(d.ok("list")));
  REQUIRE(list.size() == 2);  // the header and the cache
  CHECK(list[0].rfind("NAME", 0) == 0);
  CHECK(list[1].rfind("web ", 0) == 0);
  CHECK(list[1].find("inproc0") != std::string::npos);
  CHECK(list[1].find(web.region.path() + " -> " + web.backing.path()) != std::string::npos);

  json status = d.ok("status", {{"name", "web"}});
  std::vector<std::string> lines = lines_of(pcached::cli::render_status(status));
  REQUIRE(!lines.empty());
  CHECK(lines[0] == "web: inproc0 (running)");
  for (const char* start : {"  mode        writeback", "  persistence ", "  cache       ", "  backing     ",
                            "  cached      ", "  memory      index ", "  segments    ", "  reads       ",
                            "  writes      ", "  writeback   ", "  fills       ", "  bypass      ", "  to backing  ",
                            "  gc          ", "  errors      ", "  copy policy ", "  queues      1 x depth 64",
                            "  settings   "}) {
    INFO(start);
    CHECK(has_line_starting(lines, start));
  }
  // Neither lost data nor GC runs that waited: no line for them.
  CHECK(!has_line_starting(lines, "  LOST"));
  CHECK(!has_line_starting(lines, "  gc waited"));
  CHECK(status["gc"]["commit_waits"] == 0);

  // The daemon's answer as it is when GC waited (a state no test can bring about in the daemon:
  // docs/pmem.md) and when dirty data was lost.
  status["gc"]["commit_waits"] = 2;
  status["lost"] = {{"ranges", 1}, {"bytes", 4096}};
  lines = lines_of(pcached::cli::render_status(status));
  CHECK(has_line_starting(lines, "  gc waited   2 runs could not make their moves durable at once"));
  CHECK(has_line_starting(lines, "  LOST        4 KiB of dirty data in 1 range(s)"));
}

TEST_CASE("set changes a setting and refuses unknown keys and bad values with the reason", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", add_args(web, "web"));

  CHECK(d.ok("set", {{"name", "web"}, {"key", "gc_threshold"}, {"value", "50"}}) ==
        json{{"name", "web"}, {"key", "gc_threshold"}, {"value", "50"}});
  CHECK(d.ok("status", {{"name", "web"}})["gc"]["threshold_percent"] == 50);
  d.ok("set", {{"name", "inproc0"}, {"key", "mode"}, {"value", "writethrough"}});
  CHECK(d.ok("status", {{"name", "web"}})["mode"] == "writethrough");

  const auto unknown_key = d.call("set", {{"name", "web"}, {"key", "colour"}, {"value", "blue"}});
  CHECK(error_of(unknown_key) == EINVAL);
  CHECK_THAT(message_of(unknown_key), Catch::Contains("colour"));
  const auto bad_value = d.call("set", {{"name", "web"}, {"key", "gc_threshold"}, {"value", "95"}});
  CHECK(error_of(bad_value) == EINVAL);
  CHECK_THAT(message_of(bad_value), Catch::Contains("not a percentage from 0 to 90"));
  CHECK_THAT(message_of(d.call("set", {{"name", "web"}, {"key", "writeback_low"}, {"value", "99"}})),
             Catch::Contains("must not exceed writeback_high"));
  CHECK_THAT(message_of(d.call("set", {{"name", "web"}, {"key", "mode"}})), Catch::Contains("missing argument 'value'"));
  // Nothing refused was applied.
  CHECK(d.ok("status", {{"name", "web"}})["gc"]["threshold_percent"] == 50);

  std::ifstream state(d.state_file());
  const json saved = json::parse(state);
  CHECK(saved["caches"][0]["settings"]["gc_threshold"] == "50");
  CHECK(saved["caches"][0]["settings"]["mode"] == "writethrough");
}

TEST_CASE("flush writes everything back and reports its progress on the way", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  // A slow backing device: each writeback submission waits 300 ms, longer than the 250 ms between
  // progress reports, so the flush must report at least once.
  auto faults = dirty_on_slow_device(d, "web", 10, 8, 300'000);

  std::vector<json> reports;
  const auto flushed = d.call("flush", {{"name", "web"}, {"progress", true}}, [&](const json& report) {
    reports.push_back(report);
  });
  faults.value()->writes.delay_us = 0;
  REQUIRE(flushed.ok());
  CHECK(flushed.value()["name"] == "web");
  CHECK(flushed.value()["dirty_bytes"] == 0);
  CHECK(flushed.value()["written_back_bytes"].get<uint64_t>() > 0);
  REQUIRE_FALSE(reports.empty());
  for (const json& report : reports) {
    CHECK(report["dirty_bytes"].is_number_unsigned());
    CHECK(report["written_back_bytes"].is_number_unsigned());
    CHECK(report["elapsed_seconds"].get<double>() > 0);
  }
  for (uint64_t i = 0; i < 8; ++i) CHECK(backing_holds(web, 10 + i, i * 2048, 256));

  // Without "progress" there are no progress lines.
  reports.clear();
  REQUIRE(d.call("flush", {{"name", "web"}}, [&](const json& report) { reports.push_back(report); }).ok());
  CHECK(reports.empty());
}

TEST_CASE("a flush does not hold up status, list, metrics or the other caches; the same cache is busy meanwhile",
          "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes), db(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  d.ok("add", held_dirty(add_args(db, "db")));
  // Every writeback submission to web's backing file waits 3 s: the flush takes at least that.
  auto faults = dirty_on_slow_device(d, "web", 20, 4, 3'000'000);
  auto flushing = flush_under_way(d, "web");

  const json status = d.ok("status", {{"name", "web"}});
  CHECK(status["operation"] == "flush");
  CHECK(status["dirty_bytes"].get<uint64_t>() > 0);
  CHECK(d.ok("list")["caches"].size() == 2);
  CHECK(d.daemon().samples().size() == 2);
  CHECK(d.ok("set", {{"name", "db"}, {"key", "gc_threshold"}, {"value", "60"}})["value"] == "60");
  CHECK(d.ok("flush", {{"name", "db"}})["dirty_bytes"] == 0);
  for (const char* command : {"flush", "remove", "set"}) {
    INFO(command);
    const auto refused = d.call(command, {{"name", "web"}, {"key", "gc_threshold"}, {"value", "50"}});
    CHECK(error_of(refused) == EBUSY);
    CHECK_THAT(message_of(refused), Catch::Contains("cache 'web' is busy: a flush is writing its dirty data back"));
  }
  // All of that was answered while the flush was still waiting for the slow device.
  CHECK(flushing.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);

  faults.value()->writes.delay_us = 0;
  const auto flushed = flushing.get();
  REQUIRE(flushed.ok());
  CHECK(flushed.value()["dirty_bytes"] == 0);
  for (uint64_t i = 0; i < 4; ++i) CHECK(backing_holds(web, 20 + i, i * 2048, 256));
  CHECK_FALSE(d.ok("status", {{"name", "web"}}).contains("operation"));
  CHECK(d.ok("remove", {{"name", "web"}})["written_back"] == true);
}

TEST_CASE("a remove does not hold up status, list or metrics while it detaches the cache and writes back what came meanwhile",
          "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes), db(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  d.ok("add", add_args(db, "db"));
  // Every writeback submission to web's backing file waits 1.5 s.
  REQUIRE(dirty_on_slow_device(d, "web", 40, 4, 1'500'000).ok());  // (they go with the cache)
  // At the first progress report the remove is writing back (the device still serves): a write
  // arrives then, after what the write-back waits for, so that detaching writes it back, as slowly.
  // Every report asks for the status on the way.
  bool wrote = false;
  int refusals = 0;
  std::vector<json> seen;
  const auto removed = d.call("remove", {{"name", "web"}, {"progress", true}}, [&](const json&) {
    if (!wrote) {
      write_pattern(*d.queue("web"), 50, 8192, 256);  // the queue is released at once
      wrote = true;
    }
    // Reports queue up on the way to us: a late one may find the remove done, and the cache gone.
    auto status = d.call("status", {{"name", "web"}});
    if (!status.ok()) {
      CHECK(error_of(status) == ENOENT);
      return;
    }
    seen.push_back(status.value());
    if (status.value()["state"] == "removing") {
      const auto refused = d.call("flush", {{"name", "web"}});
      const auto listed = d.ok("list")["caches"].size();
      CHECK(d.daemon().samples().size() == 1);  // db's; web's cache is being detached (or gone)
      if (!d.call("status", {{"name", "web"}}).ok()) {
        // The remove ended between the two statuses: the flush may have come after it.
        CHECK((error_of(refused) == EBUSY || error_of(refused) == ENOENT));
        return;
      }
      // The cache still exists after both answers, so both came while it was being removed.
      CHECK(listed == 2);
      CHECK(error_of(refused) == EBUSY);
      CHECK_THAT(message_of(refused), Catch::Contains("cache 'web' is busy: a remove"));
      ++refusals;
    }
  });
  REQUIRE(removed.ok());
  CHECK(refusals >= 1);
  CHECK(removed.value()["written_back"] == true);
  REQUIRE(wrote);
  const auto removing = std::find_if(seen.begin(), seen.end(), [](const json& s) { return s["state"] == "removing"; });
  REQUIRE(removing != seen.end());
  CHECK((*removing)["device"] == "inproc0");
  CHECK((*removing)["operation"] == "remove");
  for (uint64_t i = 0; i < 4; ++i) CHECK(backing_holds(web, 40 + i, i * 2048, 256));
  CHECK(backing_holds(web, 50, 8192, 256));
  CHECK(d.ok("list")["caches"].size() == 1);
}

TEST_CASE("a daemon that is exiting interrupts the flush in progress and refuses new ones; the data stays on pmem",
          "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  // Every writeback submission waits 3 s: a flush that returns before is one that gave up.
  auto faults = dirty_on_slow_device(d, "web", 30, 4, 3'000'000);
  auto flushing = flush_under_way(d, "web");
  d.daemon().interrupt_write_backs();  // what SIGTERM does first
  const auto flushed = flushing.get();
  CHECK(error_of(flushed) == ECANCELED);
  CHECK_THAT(message_of(flushed), Catch::Contains("interrupted before every dirty byte was written back"));
  const auto again = d.call("flush", {{"name", "web"}});
  CHECK(error_of(again) == ECANCELED);
  CHECK_THAT(message_of(again), Catch::Contains("interrupted before every dirty byte was written back"));
  const auto removed = d.call("remove", {{"name", "web"}});
  CHECK(error_of(removed) == ECANCELED);
  CHECK_THAT(message_of(removed), Catch::Contains("cache web not removed: the daemon is exiting; inproc0 stays"));
  CHECK(d.ok("status", {{"name", "web"}})["state"] == "running");
  faults.value()->writes.delay_us = 0;

  // The next daemon finds every write (written back or still dirty on pmem).
  d.stop();
  d.start();
  auto queue = d.queue("web");
  for (uint64_t i = 0; i < 4; ++i) CHECK(reads_back(*queue, 30 + i, i * 2048, 256));
}

TEST_CASE("a daemon that is exiting interrupts a remove that is detaching the cache; the data stays on pmem",
          "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  // Every writeback submission waits 1.5 s.
  auto faults = dirty_on_slow_device(d, "web", 40, 4, 1'500'000);
  REQUIRE(faults.ok());
  // A write arrives while the remove writes back with the device still there, so that detaching
  // (the device gone, the cache in the remove's hands) has data to write back, as slowly. SIGTERM
  // comes then: the detach must give up instead of writing all of it back first.
  bool wrote = false;
  bool interrupted = false;
  const auto removed = d.call("remove", {{"name", "web"}, {"progress", true}}, [&](const json&) {
    if (!wrote) {
      write_pattern(*d.queue("web"), 50, 8192, 256);
      wrote = true;
    }
    if (interrupted) return;
    const auto status = d.call("status", {{"name", "web"}});
    if (status.ok() && status.value()["state"] == "removing") {
      d.daemon().interrupt_write_backs();  // what SIGTERM does first
      interrupted = true;
    }
  });
  REQUIRE(interrupted);
  CHECK(error_of(removed) == ECANCELED);
  CHECK_THAT(message_of(removed), Catch::Contains("cache web not removed: the daemon is exiting; inproc0 is gone, the "
                                                  "dirty data stays on pmem and the next start brings it back"));
  // The cache is still the daemon's, without its device.
  CHECK(d.ok("status", {{"name", "web"}})["state"] == "failed");
  faults.value()->writes.delay_us = 0;

  // The next daemon exports it again and finds every write (written back or still dirty on pmem).
  d.stop();
  d.start();
  CHECK(d.ok("status", {{"name", "web"}})["state"] == "running");
  auto queue = d.queue("web");
  for (uint64_t i = 0; i < 4; ++i) CHECK(reads_back(*queue, 40 + i, i * 2048, 256));
  CHECK(reads_back(*queue, 50, 8192, 256));
}

TEST_CASE("remove writes back first unless told not to, and waits until the device is unused", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));
  auto queue = d.queue("web");
  // A queue still open is a user of the device. (Asked before the writes below: a remove that
  // writes back does so before it finds the device busy.)
  const auto busy = d.call("remove", {{"name", "web"}});
  CHECK(error_of(busy) == EBUSY);
  CHECK_THAT(message_of(busy), Catch::Contains("inproc0 is in use"));
  CHECK(d.ok("status", {{"name", "web"}})["state"] == "running");
  write_pattern(*queue, 7, 0, 512);
  write_pattern(*queue, 8, 4096, 64);
  queue.reset();

  SECTION("with write-back: the backing file holds every write") {
    const json removed = d.ok("remove", {{"name", "inproc0"}});
    CHECK(removed == json{{"name", "web"}, {"device", "inproc0"}, {"written_back", true}, {"dirty_bytes_left", 0}});
    CHECK(backing_holds(web, 7, 0, 512));
    CHECK(backing_holds(web, 8, 4096, 64));
    CHECK(d.ok("list")["caches"].empty());
    CHECK(error_of(d.call("status", {{"name", "web"}})) == ENOENT);
  }

  SECTION("--no-flush (and --force, which the CLI sends the same): dirty data stays on pmem for the next attach") {
    const json removed = d.ok("remove", {{"name", "web"}, {"no_flush", true}});
    CHECK(removed["written_back"] == false);
    CHECK(removed["dirty_bytes_left"].get<uint64_t>() > 0);
    json attach = add_args(web, "web");
    attach["format"] = false;
    d.ok("add", attach);
    auto again = d.queue("web");
    CHECK(reads_back(*again, 7, 0, 512));
    CHECK(reads_back(*again, 8, 4096, 64));
  }
}

TEST_CASE("errors: unknown caches and commands, bad JSON, other protocol versions", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", add_args(web, "web"));

  for (const char* command : {"status", "flush", "remove"}) {
    const auto missing = d.call(command, {{"name", "nosuch"}});
    CHECK(error_of(missing) == ENOENT);
    CHECK(message_of(missing) == "no cache named 'nosuch'");
  }
  CHECK(error_of(d.call("set", {{"name", "nosuch"}, {"key", "mode"}, {"value", "writeback"}})) == ENOENT);
  CHECK(error_of(d.daemon().open_queue("nosuch")) == ENOENT);
  CHECK_THAT(message_of(d.call("status")), Catch::Contains("missing argument 'name'"));
  CHECK_THAT(message_of(d.call("resize", {{"name", "web"}})), Catch::Contains("unknown command 'resize'"));

  // What only a client other than ours would send, straight to the handler.
  const auto answer = [&](const std::string& text) { return control::parse_response(d.daemon().handle(text)); };
  CHECK_THAT(message_of(answer("{\"version\": 1, \"command\": ")), Catch::Contains("not valid JSON"));
  CHECK_THAT(message_of(answer("[1, 2]")), Catch::Contains("not a JSON object"));
  const auto version = answer(R"({"version": 2, "command": "list"})");
  CHECK(error_of(version) == EPROTO);
  CHECK_THAT(message_of(version), Catch::Contains("this daemon speaks version 1"));
  CHECK_THAT(message_of(answer(R"({"version": 1, "command": "list", "args": []})")),
             Catch::Contains("args must be an object"));
  CHECK(answer(R"({"version": 1, "command": "list"})").ok());
  // None of it disturbed the cache.
  CHECK(d.ok("status", {{"name", "web"}})["state"] == "running");
}

TEST_CASE("a new daemon on the same state directory brings every cache back with its data", "[daemon][in-process]") {
  CacheFiles web(kRegionBytes, kBackingBytes), db(kRegionBytes, kBackingBytes), lost(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));  // still dirty at the restart
  d.ok("add", add_args(db, "db"));
  d.ok("add", add_args(lost, "lost"));
  d.ok("set", {{"name", "db"}, {"key", "gc_threshold"}, {"value", "40"}});
  {
    auto web_queue = d.queue("web");
    auto db_queue = d.queue("db");
    write_pattern(*web_queue, 21, 0, 256);
    write_pattern(*db_queue, 22, 8192, 128);
  }

  d.stop();
  // A cache whose region is gone cannot come back; it must not keep the others down.
  REQUIRE(::unlink(lost.region.path().c_str()) == 0);
  d.start();

  const json list = d.ok("list");
  REQUIRE(list["caches"].size() == 3);
  CHECK(d.ok("status", {{"name", "web"}})["device"] == "inproc0");
  CHECK(d.ok("status", {{"name", "db"}})["device"] == "inproc1");
  CHECK(d.ok("status", {{"name", "db"}})["gc"]["threshold_percent"] == 40);
  const json failed = d.ok("status", {{"name", "lost"}});
  CHECK(failed["state"] == "failed");
  CHECK(failed["device"] == "");
  CHECK(error_of(d.daemon().open_queue("lost")) == EIO);

  auto web_queue = d.queue("inproc0");
  auto db_queue = d.queue("db");
  CHECK(reads_back(*web_queue, 21, 0, 256));
  CHECK(reads_back(*db_queue, 22, 8192, 128));
  web_queue.reset();
  db_queue.reset();

  // A new cache gets the lowest number no running device has.
  CacheFiles fresh(kRegionBytes, kBackingBytes);
  CHECK(d.ok("add", add_args(fresh, "fresh"))["device"] == "inproc2");
  CHECK(d.ok("remove", {{"name", "web"}})["written_back"] == true);
  CHECK(backing_holds(web, 21, 0, 256));
}

TEST_CASE("a daemon that exits parks its caches: the next one starts with the clean data cached and the dirty data "
          "replayed",
          "[daemon][in-process][checkpoint]") {
  CacheFiles web(kRegionBytes, kBackingBytes), db(kRegionBytes, kBackingBytes), busy(kRegionBytes, kBackingBytes);
  DaemonUnderTest d;
  d.ok("add", held_dirty(add_args(web, "web")));  // still dirty at the exit
  d.ok("add", add_args(db, "db"));
  d.ok("add", add_args(busy, "busy"));
  {
    auto web_queue = d.queue("web");
    auto db_queue = d.queue("db");
    write_pattern(*web_queue, 31, 0, 256);
    write_pattern(*db_queue, 32, 8192, 128);
  }
  d.ok("flush", {{"name", "db"}});
  const uint64_t db_cached = d.ok("status", {{"name", "db"}})["cached_bytes"].get<uint64_t>();
  REQUIRE(db_cached == 128 * 512);
  {
    // A queue still open: that cache cannot be parked, and is left as after a crash.
    auto busy_queue = d.queue("busy");
    write_pattern(*busy_queue, 33, 0, 64);
    CHECK(d.daemon().leave_all() == 1);
  }
  d.stop();
  d.start();

  const json db_status = d.ok("status", {{"name", "db"}});
  CHECK(db_status["recovery"]["clean_bytes"] == db_cached);
  CHECK(db_status["cached_bytes"] == db_cached);
  // Held back to 1 B/s, writeback still takes a key set a second: a slow run (TSan) can have
  // written some or all of web's data back before the exit. What is still dirty was replayed.
  const json web_status = d.ok("status", {{"name", "web"}});
  const uint64_t web_dirty = web_status["dirty_bytes"].get<uint64_t>();
  CHECK(web_dirty <= 256 * 512);
  if (web_dirty > 0) CHECK(web_status["recovery"]["keys"].get<uint64_t>() > 0);
  CHECK(d.ok("status", {{"name", "busy"}})["recovery"]["clean_bytes"] == 0);
  auto web_queue = d.queue("web");
  auto db_queue = d.queue("db");
  auto busy_queue = d.queue("busy");
  CHECK(reads_back(*web_queue, 31, 0, 256));
  CHECK(reads_back(*db_queue, 32, 8192, 128));
  CHECK(reads_back(*busy_queue, 33, 0, 64));
  // Every read of the clean data was a hit.
  CHECK(d.ok("status", {{"name", "db"}})["reads"]["misses"] == 0);
}

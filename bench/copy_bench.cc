// Copy benchmark of the pmem access layer: for every size class and for random and sequential
// offsets, the MiB/s of each copy method (copy + flush + fence, as a write request does it) next
// to plain memcpy into the same region (no flush: the raw bandwidth reference), and whether the
// calibrated choice is within 5% of the best method.
//
//   pcached-copy-bench [--region PATH] [--size 256M] [--json] [--quick]
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/unique_fd.h"
#include "pcached/calibration.h"
#include "pcached/pmem_region.h"
#include "pcached/pmem_writer.h"
#include "pmem/cpu_features.h"
#include "pmem/throughput_meter.h"

using namespace pcached;
using namespace pcached::pmem;

namespace {

constexpr double kTolerance = 0.05;  // the calibrated choice must be within 5% of the best

struct Row {
  size_t size;
  OffsetPattern pattern;
  double memcpy_mib_s;
  std::array<double, kCopyMethodCount> mib_s{};  // 0 = method not supported
  CopyMethod chosen;

  CopyMethod best() const {
    size_t best = 0;
    for (size_t m = 1; m < kCopyMethodCount; ++m) {
      if (mib_s[m] > mib_s[best]) best = m;
    }
    return static_cast<CopyMethod>(best);
  }
  double chosen_vs_best() const { return mib_s[static_cast<size_t>(chosen)] / mib_s[static_cast<size_t>(best())]; }
};

// The file the benchmark runs on when no region is named: a /dev/shm file forced to cache-line
// granularity, so the real flush instructions run (DRAM stands in for pmem).
class DefaultRegionFile {
 public:
  DefaultRegionFile(uint64_t size, bool eadr) : path_("/dev/shm/pcached-copy-bench-" + std::to_string(::getpid())) {
    UniqueFd fd(::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid() || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
      throw std::runtime_error("cannot create " + path_ + ": " + std::strerror(errno));
    }
    ::setenv("PMEM2_FORCE_GRANULARITY", eadr ? "BYTE" : "CACHE_LINE", 1);
  }
  ~DefaultRegionFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string method_cell(const Row& row, CopyMethod method) {
  const double value = row.mib_s[static_cast<size_t>(method)];
  if (value <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

void print_table(const std::vector<Row>& rows, const Region& region, const CalibrationReport& calibration) {
  std::printf("pcached copy benchmark: %s (%s, %s granularity, %s), CPU %s\n", region.path().c_str(),
              to_string(region.identity().kind), to_string(region.granularity()), format_size(region.size()).c_str(),
              cpu_features().brand.c_str());
  std::printf("calibration: %.0f ms, %zu/%zu size classes\n",
              std::chrono::duration<double, std::milli>(calibration.elapsed).count(), calibration.classes_measured,
              kSizeClassCount);
  std::printf("MiB/s; memcpy = plain copy into the region without flush (reference)\n\n");
  std::printf("%8s %-10s %9s %9s %11s %9s %9s  %-10s %-10s %10s %11s\n", "size", "pattern", "memcpy", "nt",
              "clflushopt", "clwb", "cached", "best", "chosen", "chosen/best", "chosen/memcpy");
  size_t within = 0;
  for (const Row& row : rows) {
    const double vs_best = row.chosen_vs_best();
    const double vs_memcpy = row.mib_s[static_cast<size_t>(row.chosen)] / row.memcpy_mib_s;
    std::printf("%8s %-10s %9.0f %9s %11s %9s %9s  %-10s %-10s %10.2f%s %11.2f\n", format_size(row.size).c_str(),
                to_string(row.pattern), row.memcpy_mib_s, method_cell(row, CopyMethod::NonTemporal).c_str(),
                method_cell(row, CopyMethod::Clflushopt).c_str(), method_cell(row, CopyMethod::Clwb).c_str(),
                method_cell(row, CopyMethod::Cached).c_str(),
                std::string(to_string(row.best())).c_str(), std::string(to_string(row.chosen)).c_str(), vs_best,
                vs_best >= 1.0 - kTolerance ? " " : "!", vs_memcpy);
    if (vs_best >= 1.0 - kTolerance) ++within;
  }
  std::printf("\ncalibrated choice within %.0f%% of the best method: %zu of %zu rows ('!' marks the others)\n",
              kTolerance * 100, within, rows.size());
}

nlohmann::json to_json(const std::vector<Row>& rows, const Region& region, const CalibrationReport& calibration) {
  nlohmann::json records = nlohmann::json::array();
  for (const Row& row : rows) {
    records.push_back({{"size", row.size}, {"pattern", to_string(row.pattern)}, {"method", "memcpy"},
                       {"mib_per_s", row.memcpy_mib_s}});
    for (CopyMethod method : kAllCopyMethods) {
      const double value = row.mib_s[static_cast<size_t>(method)];
      if (value <= 0) continue;
      records.push_back({{"size", row.size}, {"pattern", to_string(row.pattern)},
                         {"method", std::string(to_string(method))}, {"mib_per_s", value}});
    }
  }
  nlohmann::json chosen = nlohmann::json::array();
  for (const Row& row : rows) {
    if (row.pattern != OffsetPattern::Random) continue;
    chosen.push_back({{"size", row.size},
                      {"method", std::string(to_string(row.chosen))},
                      {"best", std::string(to_string(row.best()))},
                      {"chosen_vs_best", row.chosen_vs_best()},
                      {"within_tolerance", row.chosen_vs_best() >= 1.0 - kTolerance}});
  }
  return {{"benchmark", "copy"},
          {"reference", "memcpy"},
          {"region", {{"path", region.path()}, {"granularity", to_string(region.granularity())}, {"size", region.size()}}},
          {"cpu", cpu_features().brand},
          {"calibration_ms", std::chrono::duration<double, std::milli>(calibration.elapsed).count()},
          {"records", records},
          {"calibration", chosen}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcached copy benchmark: copy methods per size class against plain memcpy"};
  std::string region_path;
  std::string size_text = "256M";
  bool json = false;
  bool quick = false;
  bool eadr = false;
  app.add_option("--region", region_path, "pmem region to measure (default: a /dev/shm file, forced cache-line granularity)");
  app.add_option("--size", size_text, "size of the default region file")->capture_default_str();
  app.add_flag("--json", json, "print the figures as JSON instead of a table");
  app.add_flag("--quick", quick, "fewer, shorter rounds (a smoke run)");
  app.add_flag("--eadr", eadr, "force the default region to byte granularity (eADR): the flushless cached copy competes");
  CLI11_PARSE(app, argc, argv);
  // Figures go to stdout (tables, JSON); the log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("pcached"));
  spdlog::set_level(spdlog::level::warn);

  Result<uint64_t> size = parse_size(size_text);
  if (!size.ok()) {
    std::fprintf(stderr, "pcached-copy-bench: %s\n", size.status().message().c_str());
    return 2;
  }
  std::unique_ptr<DefaultRegionFile> default_file;
  if (region_path.empty()) {
    default_file = std::make_unique<DefaultRegionFile>(size.value(), eadr);
    region_path = default_file->path();
  }
  RegionOptions region_options;
  region_options.path = region_path;
  region_options.min_size = 16 * MiB;
  auto region = Region::open(region_options);
  if (!region.ok()) {
    std::fprintf(stderr, "pcached-copy-bench: %s\n", region.status().message().c_str());
    return 1;
  }

  CopyPolicy policy(PolicyTable{}, "bench");
  PmemWriter writer(*region.value(), policy);
  CalibrationOptions calibration_options;
  calibration_options.scratch_length = region.value()->size();
  const CalibrationReport calibration = calibrate_region(writer, calibration_options);

  std::vector<std::byte> source(kLargestSizeClass);
  std::mt19937_64 rng(7);
  for (std::byte& b : source) b = static_cast<std::byte>(rng());

  std::vector<CopyMethod> methods;
  std::vector<CopyRoutine> routines;
  std::byte* base = region.value()->base();
  routines.push_back([base](uint64_t offset, const void* src, size_t len) { std::memcpy(base + offset, src, len); });
  for (CopyMethod method : kAllCopyMethods) {
    if (!usable_on(*region.value(), method)) continue;  // the flushless copy only on eADR
    methods.push_back(method);
    routines.push_back([&writer, method](uint64_t offset, const void* src, size_t len) {
      writer.copy_nodrain(offset, src, len, method);
      writer.drain();
    });
  }

  MeterOptions meter;
  meter.area_length = region.value()->size();
  meter.rounds = quick ? 3 : 7;
  meter.min_batch_bytes = quick ? 1 * MiB : 16 * MiB;
  std::vector<Row> rows;
  for (size_t size_class = 0; size_class < kSizeClassCount; ++size_class) {
    for (OffsetPattern pattern : {OffsetPattern::Random, OffsetPattern::Sequential}) {
      meter.pattern = pattern;
      const size_t len = size_class_bytes(size_class);
      const std::vector<double> measured = measure_copy_throughput(routines, source.data(), len, meter).value();
      Row row{len, pattern, measured[0], {}, calibration.chosen[size_class]};
      for (size_t m = 0; m < methods.size(); ++m) row.mib_s[static_cast<size_t>(methods[m])] = measured[m + 1];
      rows.push_back(row);
    }
  }

  if (json) {
    std::printf("%s\n", to_json(rows, *region.value(), calibration).dump(2).c_str());
  } else {
    print_table(rows, *region.value(), calibration);
  }
  return 0;
}

#include "cli/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pcached/units.h"

namespace pcached::cli {

namespace {

uint64_t number(const nlohmann::json& report, const char* key) {
  if (!report.contains(key) || !report[key].is_number_integer() || report[key].get<int64_t>() < 0) return 0;
  return report[key].get<uint64_t>();
}

}  // namespace

std::string progress_line(const nlohmann::json& report, uint64_t initial_dirty, unsigned width) {
  const uint64_t dirty = number(report, "dirty_bytes");
  const uint64_t written = number(report, "written_back_bytes");
  const double elapsed = report.contains("elapsed_seconds") && report["elapsed_seconds"].is_number()
                             ? report["elapsed_seconds"].get<double>()
                             : 0.0;
  // New writes can add dirty data while it drains: the bar never goes backwards past empty.
  const double done = initial_dirty == 0 ? 1.0 : 1.0 - std::min(1.0, static_cast<double>(dirty) / initial_dirty);
  const auto filled = static_cast<unsigned>(std::lround(done * width));
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  const double rate = elapsed > 0 ? static_cast<double>(written) / elapsed : 0.0;
  std::string eta = "ETA -";
  if (rate > 0) {
    const auto seconds = static_cast<uint64_t>(std::ceil(static_cast<double>(dirty) / rate));
    eta = "ETA " + (seconds >= 60 ? std::to_string(seconds / 60) + "m" + std::to_string(seconds % 60) + "s"
                                  : std::to_string(seconds) + "s");
  }
  return bar + " " + format_size(dirty) + " dirty left, " + format_size(static_cast<uint64_t>(rate)) + "/s, " + eta;
}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::update(const nlohmann::json& report) {
  if (!drawn_) initial_dirty_ = std::max<uint64_t>(number(report, "dirty_bytes"), 1);
  std::fprintf(stderr, "\r\033[K%s", progress_line(report, initial_dirty_, 30).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace pcached::cli

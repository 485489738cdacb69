// The progress of a flush or remove on a terminal: how much dirty data is left, the write-back
// rate, and when it should be done, redrawn in place on stderr.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace pcached::cli {

// One line for a progress report ({"dirty_bytes", "written_back_bytes", "elapsed_seconds"}), given
// the dirty bytes of the first report (the 100% of the bar).
std::string progress_line(const nlohmann::json& report, uint64_t initial_dirty, unsigned width);

class ProgressBar {
 public:
  ~ProgressBar();  // clears the line it drew
  void update(const nlohmann::json& report);

 private:
  bool drawn_ = false;
  uint64_t initial_dirty_ = 0;
};

}  // namespace pcached::cli

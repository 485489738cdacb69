#include "ublk/queue_affinity.h"

#include <algorithm>
#include <iterator>

namespace pcached::ublk {

namespace {
constexpr std::array<QueueAffinity, 3> kValues = {QueueAffinity::Auto, QueueAffinity::Kernel, QueueAffinity::None};
}  // namespace

std::string_view to_string(QueueAffinity affinity) {
  for (size_t i = 0; i < kValues.size(); ++i) {
    if (kValues[i] == affinity) return kQueueAffinityNames[i];
  }
  return kQueueAffinityNames[0];
}

std::optional<QueueAffinity> parse_queue_affinity(std::string_view text) {
  for (size_t i = 0; i < kValues.size(); ++i) {
    if (kQueueAffinityNames[i] == text) return kValues[i];
  }
  return std::nullopt;
}

std::vector<std::string> queue_affinity_names() {
  return {kQueueAffinityNames.begin(), kQueueAffinityNames.end()};
}

std::string queue_affinity_choices() {
  std::string text;
  for (size_t i = 0; i < kQueueAffinityNames.size(); ++i) {
    if (i > 0) text += i + 1 == kQueueAffinityNames.size() ? " or " : ", ";
    text += "'" + std::string(kQueueAffinityNames[i]) + "'";
  }
  return text;
}

std::vector<int> queue_thread_cpus(QueueAffinity affinity, const std::vector<int>& queue_cpus,
                                   const std::vector<int>& allowed_cpus) {
  if (affinity == QueueAffinity::None) return {};
  if (affinity == QueueAffinity::Kernel || queue_cpus.size() != 1) return queue_cpus;
  // Auto, a queue of one CPU: every other CPU the daemon may use (none: not bound).
  std::vector<int> others;
  std::ranges::copy_if(allowed_cpus, std::back_inserter(others), [&](int cpu) { return cpu != queue_cpus.front(); });
  return others;
}

}  // namespace pcached::ublk

#include "ublk/queue_affinity.h"

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

}  // namespace pcached::ublk

// Waiting in tests for something another thread does.
#pragma once

#include <chrono>
#include <thread>

namespace pcached::testing {

// Polls until the predicate holds (true) or the timeout passes (false).
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace pcached::testing

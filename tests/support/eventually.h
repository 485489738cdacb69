// Waiting in tests for something another thread does.
#pragma once

#include <chrono>
#include <thread>

namespace pcached::testing {

// Polls until the predicate holds (true) or the timeout passes (false). The default is long:
// background writeback runs at nice 19, and a sanitizer build beside another test on two busy
// cores gives it little CPU. Where the time taken is what a test checks, it passes its own.
template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace pcached::testing

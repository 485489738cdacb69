// How long a queue thread spins for its next request before it sleeps (`pcached add
// --queue-poll-us`). Sleeping and being woken costs two context switches and, on an idle CPU, the
// CPU's own wake-up: at a high request rate, more than the wait for the next request.
#pragma once

#include <chrono>

namespace pcached::ublk {

// In the test VM (2 CPUs under TCG), 4 KiB random writes at QD 16 went from ~19 k to 22-28 k IOPS
// with a spin of 10-100 us, and the null device from 22-49 k to 30-55 k. An idle queue spins once
// after its last request; a queue served every few hundred microseconds spends up to this much
// CPU per request, which is what 0 (never spin) saves.
inline constexpr std::chrono::microseconds kDefaultQueuePoll{50};
inline constexpr std::chrono::microseconds kMaxQueuePoll{10'000};

}  // namespace pcached::ublk

#include "cache/reclaim_cost.h"

#include <catch2/catch.hpp>

using pcached::cache::reclaim_cost;

TEST_CASE("GC's cost of reclaiming a segment: its live data, and the hits of what it would evict",
          "[cache][gc]") {
  // An empty segment (whose nothing moves) is the cheapest, hot or not.
  CHECK(reclaim_cost(0.0, 1000, true) < reclaim_cost(0.01, 0, true));
  // Data that moves stays cached: the emptier segment is cheaper however often its data was read.
  for (const uint32_t heat : {0u, 1u, 5u, 4000u}) {
    INFO("heat " << heat);
    CHECK(reclaim_cost(0.1, heat, true) < reclaim_cost(0.4, 0, true));
    CHECK(reclaim_cost(0.1, heat, true) == reclaim_cost(0.1, 0, true));
  }
  // Data that would be evicted takes its hits with it: a cold full segment goes before a hot one.
  CHECK(reclaim_cost(0.9, 0, false) < reclaim_cost(0.9, 3, false));
  CHECK(reclaim_cost(1.0, 0, false) < reclaim_cost(0.6, 2, false));
  // Without heat the two kinds rank by live data alone.
  CHECK(reclaim_cost(0.4, 0, true) < reclaim_cost(0.6, 0, false));
}

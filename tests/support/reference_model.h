// The reference model of the randomised engine tests: what every sector should read as, and a
// random workload that checks every read against it.
#pragma once

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "frontend/sync_queue.h"
#include "support/cache_fixture.h"

namespace pcached::testing {

// What every sector should read as: the id of the write that last wrote it (0: zeros).
class Model {
 public:
  explicit Model(uint64_t sectors) : ids_(sectors, 0) {}
  void write(uint64_t sector, uint32_t sectors, uint64_t id) { std::fill_n(ids_.begin() + sector, sectors, id); }
  uint64_t at(uint64_t sector) const { return ids_[sector]; }

  // Where buffer differs from what the model says; empty when it does not.
  std::string mismatch(uint64_t sector, uint32_t sectors, const std::vector<std::byte>& buffer) const {
    for (uint32_t i = 0; i < sectors; ++i) {
      const uint64_t got = decode_sector(buffer.data() + i * kSector, sector + i);
      if (got != ids_[sector + i]) {
        return "sector " + std::to_string(sector + i) + " holds write " + std::to_string(got) + ", expected " +
               std::to_string(ids_[sector + i]);
      }
    }
    return {};
  }
  void check(uint64_t sector, uint32_t sectors, const std::vector<std::byte>& buffer) const {
    REQUIRE(mismatch(sector, sectors, buffer).empty());
  }

 private:
  std::vector<uint64_t> ids_;
};

inline void check_everything(frontend::SyncQueue& queue, const Model& model, uint64_t from, uint64_t to) {
  std::vector<std::byte> buffer(256 * kSector);
  for (uint64_t sector = from; sector < to; sector += 256) {
    const auto sectors = static_cast<uint32_t>(std::min<uint64_t>(256, to - sector));
    REQUIRE(queue.read(sector, sectors, buffer.data()) == static_cast<int>(sectors * kSector));
    model.check(sector, sectors, buffer);
  }
}

// A random mix of writes, reads, discards, write-zeroes and flushes over [from, to), every read
// compared with the model. Discarded sectors may read as old data or as the backing device's, so
// after a discard the workload writes the range again. Returns the first failure (no Catch
// assertions: it also runs on several threads).
inline std::string random_workload(frontend::SyncQueue& queue, Model& model, uint64_t from, uint64_t to, uint64_t seed,
                            int operations, uint64_t id_base) {
  std::mt19937_64 rng(seed);
  uint64_t next_id = id_base;
  std::vector<std::byte> buffer;
  for (int op = 0; op < operations; ++op) {
    const uint64_t sector = from + rng() % (to - from);
    const auto sectors = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(rng() % 4 == 0 ? 512 : 16, to - sector));
    const unsigned kind = static_cast<unsigned>(rng() % 100);
    const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op) + " (" +
                              std::to_string(sector) + "+" + std::to_string(sectors) + "): ";
    const int bytes = static_cast<int>(sectors * kSector);
    auto write = [&] {
      const uint64_t id = next_id++;
      const auto data = pattern(id, sector, sectors);
      if (int rc = queue.write(sector, sectors, data.data()); rc != bytes) return where + "write returned " + std::to_string(rc);
      model.write(sector, sectors, id);
      return std::string();
    };
    std::string failure;
    if (kind < 50) {
      failure = write();
    } else if (kind < 88) {
      buffer.assign(sectors * kSector, std::byte{0xCD});
      if (int rc = queue.read(sector, sectors, buffer.data()); rc != bytes) {
        failure = where + "read returned " + std::to_string(rc);
      } else if (std::string m = model.mismatch(sector, sectors, buffer); !m.empty()) {
        failure = where + "read: " + m;
      }
    } else if (kind < 93) {
      if (int rc = queue.write_zeroes(sector, sectors); rc != 0) failure = where + "write-zeroes returned " + std::to_string(rc);
      model.write(sector, sectors, 0);
    } else if (kind < 97) {
      if (int rc = queue.discard(sector, sectors); rc != 0) failure = where + "discard returned " + std::to_string(rc);
      if (failure.empty()) failure = write();
    } else if (int rc = queue.flush(); rc != 0) {
      failure = where + "flush returned " + std::to_string(rc);
    }
    if (!failure.empty()) return failure;
  }
  return {};
}

}  // namespace pcached::testing

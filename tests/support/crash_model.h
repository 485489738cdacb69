// The reference model of the crash tests: what each sector of a recovered cache may hold, given
// the operations acknowledged before the crash and those still under way when it came.
//
// A write fills its sectors with pattern(id, sector), so every sector names the write that put it
// there (decode_sector), and anything else (torn, foreign, shifted) is caught. Per sector:
//  - after an acknowledged write W: exactly W's data;
//  - after an acknowledged write-zeroes: zeros;
//  - after an acknowledged discard D: zeros, or the data of a write issued before D that covered
//    this sector (a discarded sector's content is unspecified, but never torn, never invented);
//  - before any operation: zeros (the backing device starts zeroed).
// An operation under way at the crash may have taken effect or not, independently per sector
// (the engine splits a write into keys at segment boundaries, never inside a sector), but only an
// operation newer than the sector's acknowledged one, and only one that was issued.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "frontend/sync_queue.h"
#include "support/cache_fixture.h"

namespace pcached::testing {

enum class OpKind : uint8_t { Write, Zero, Discard };

inline const char* to_string(OpKind kind) {
  static constexpr const char* kNames[] = {"write", "write-zeroes", "discard"};
  return kNames[static_cast<size_t>(kind)];
}

struct OpRecord {
  uint64_t id = 0;  // issue order, from 1; a write's data names it
  uint64_t sector = 0;
  uint32_t sectors = 0;
  OpKind kind = OpKind::Write;
  bool covers(uint64_t s) const { return s >= sector && s < sector + sectors; }
};

// What the checks found, summed over crash points.
struct CrashTotals {
  uint64_t crash_points = 0;
  uint64_t acknowledged = 0;  // acknowledged operations in the model at the last check
  std::array<uint64_t, 3> acknowledged_by_kind{};  // by OpKind
  uint64_t sectors = 0;               // sectors compared, all 512 bytes of each
  uint64_t lost = 0;                  // sectors holding older data than an acknowledged operation left
  uint64_t wrong = 0;                 // sectors holding bytes no issued operation wrote there
  std::vector<std::string> failures;  // the first few, described
  std::vector<uint64_t> failed_sectors;  // the first few

  uint64_t bytes() const { return sectors * kSector; }
  void fail(const std::string& what) {
    if (failures.size() < 8) failures.push_back(what);
    std::fprintf(stderr, "crash check failed: %s\n", what.c_str());  // in the log as it happens
  }
  std::string failures_text() const {
    std::string text;
    for (const std::string& failure : failures) text += failure + "\n";
    return text;
  }
  std::string summary() const {
    return std::to_string(crash_points) + " crash points, " + std::to_string(acknowledged) +
           " acknowledged operations checked at each later one (" + std::to_string(acknowledged_by_kind[0]) +
           " writes, " + std::to_string(acknowledged_by_kind[1]) + " write-zeroes, " +
           std::to_string(acknowledged_by_kind[2]) + " discards), " + std::to_string(bytes()) + " bytes compared (" +
           std::to_string(sectors) + " sectors), losses=" + std::to_string(lost) + ", wrong=" + std::to_string(wrong);
  }
};

class CrashModel {
 public:
  enum class Verdict { Ok, Lost, Wrong };

  explicit CrashModel(uint64_t device_sectors) : sectors_(device_sectors) {}

  // An acknowledged operation; in issue order.
  void apply(const OpRecord& op) {
    for (uint64_t s = op.sector; s < op.sector + op.sectors; ++s) sectors_[s] = {op.id, op.kind};
    ++applied_[static_cast<size_t>(op.kind)];
  }

  // got: decode_sector's reading of what the device holds at sector.
  Verdict check(uint64_t sector, uint64_t got, std::span<const OpRecord> in_flight, uint64_t newest_issued) const {
    if (got == UINT64_MAX || (got != 0 && got > newest_issued)) return Verdict::Wrong;
    const State state = sectors_[sector];
    if (matches(state, got)) return Verdict::Ok;
    for (const OpRecord& op : in_flight) {
      if (op.covers(sector) && op.id > state.id && matches({op.id, op.kind}, got)) return Verdict::Ok;
    }
    return got == 0 || got < state.id ? Verdict::Lost : Verdict::Wrong;
  }

  // Where an operation under way at the crash took effect, it becomes the sector's state: the
  // device goes on from what recovery made of it (SIGKILL rounds). got passed check(). A discard
  // under way is taken as done whenever what the sector holds allows it: it may still reach the
  // backing device after this look (a killed process's last I/O can complete after it died).
  void adopt(uint64_t sector, uint64_t got, std::span<const OpRecord> in_flight) {
    State& state = sectors_[sector];
    const OpRecord* taken = nullptr;
    for (const OpRecord& op : in_flight) {
      if (!op.covers(sector) || op.id <= state.id || !matches({op.id, op.kind}, got)) continue;
      if (op.kind == OpKind::Discard || (taken == nullptr && !matches(state, got))) taken = &op;
    }
    if (taken != nullptr) state = {taken->id, taken->kind};
  }

  // Checks `sectors` sectors read at `sector` into data; adds to totals. Returns false on the
  // first failure (described in totals, with `where`).
  bool verify(const std::byte* data, uint64_t sector, uint32_t sectors, std::span<const OpRecord> in_flight,
              uint64_t newest_issued, bool adopt_in_flight, CrashTotals& totals, const std::string& where) {
    bool ok = true;
    for (uint32_t i = 0; i < sectors; ++i) {
      const uint64_t s = sector + i;
      const uint64_t got = decode_sector(data + i * kSector, s);
      ++totals.sectors;
      const Verdict verdict = check(s, got, in_flight, newest_issued);
      if (verdict == Verdict::Ok) {
        if (adopt_in_flight) adopt(s, got, in_flight);
        continue;
      }
      (verdict == Verdict::Lost ? totals.lost : totals.wrong) += 1;
      if (ok) {
        if (totals.failed_sectors.size() < 8) totals.failed_sectors.push_back(s);
        totals.fail(where + ": sector " + std::to_string(s) + " holds " + describe_content(got) + ", expected " +
                    describe_state(sectors_[s]) + describe_in_flight(s, in_flight));
      }
      ok = false;
    }
    return ok;
  }

  // Reads the whole device through queue and checks every sector.
  bool verify_device(frontend::SyncQueue& queue, std::span<const OpRecord> in_flight, uint64_t newest_issued,
                     bool adopt_in_flight, CrashTotals& totals, const std::string& where) {
    constexpr uint32_t kChunk = 256;
    std::vector<std::byte> buffer(kChunk * kSector);
    bool ok = true;
    for (uint64_t sector = 0; sector < sectors_.size(); sector += kChunk) {
      const auto count = static_cast<uint32_t>(std::min<uint64_t>(kChunk, sectors_.size() - sector));
      if (int rc = queue.read(sector, count, buffer.data()); rc != static_cast<int>(count * kSector)) {
        totals.wrong += count;
        totals.fail(where + ": read at sector " + std::to_string(sector) + " returned " + std::to_string(rc));
        ok = false;
        continue;
      }
      ok = verify(buffer.data(), sector, count, in_flight, newest_issued, adopt_in_flight, totals, where) && ok;
    }
    totals.acknowledged_by_kind = applied_;
    totals.acknowledged = applied_[0] + applied_[1] + applied_[2];
    ++totals.crash_points;
    return ok;
  }

 private:
  struct State {
    uint64_t id = 0;  // 0: no operation yet
    OpKind kind = OpKind::Zero;
  };

  static bool matches(const State& state, uint64_t got) {
    switch (state.kind) {
      case OpKind::Write:
        return got == state.id;
      case OpKind::Zero:
        return got == 0;
      case OpKind::Discard:
        return got == 0 || got < state.id;
    }
    return false;
  }

  static std::string describe_content(uint64_t got) {
    if (got == UINT64_MAX) return "torn or foreign data";
    return got == 0 ? std::string("zeros") : "the data of write " + std::to_string(got);
  }
  static std::string describe_state(const State& state) {
    if (state.id == 0) return "zeros (never written)";
    switch (state.kind) {
      case OpKind::Write:
        return "write " + std::to_string(state.id) + " (acknowledged)";
      case OpKind::Zero:
        return "zeros of write-zeroes " + std::to_string(state.id) + " (acknowledged)";
      case OpKind::Discard:
        return "zeros or older data after discard " + std::to_string(state.id) + " (acknowledged)";
    }
    return "?";
  }
  static std::string describe_in_flight(uint64_t sector, std::span<const OpRecord> in_flight) {
    std::string text;
    for (const OpRecord& op : in_flight) {
      if (!op.covers(sector)) continue;
      text += (text.empty() ? " or the effect of " : ", ") + std::string(to_string(op.kind)) + " " + std::to_string(op.id);
    }
    return text.empty() ? text : text + " (under way)";
  }

  std::vector<State> sectors_;
  std::array<uint64_t, 3> applied_{};  // by OpKind
};

}  // namespace pcached::testing

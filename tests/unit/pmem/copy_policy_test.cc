#include <catch2/catch.hpp>
#include <fstream>

#include "pcached/calibration.h"
#include "pcached/copy_policy.h"
#include "pmem/cpu_features.h"
#include "support/scratch_file.h"

using namespace pcached;
using namespace pcached::pmem;
using pcached::testing::EmulatedPmem;
using pcached::testing::ScratchFile;

TEST_CASE("requests map to the largest size class not above them", "[pmem][policy]") {
  CHECK(size_class_of(0) == 0);
  CHECK(size_class_of(1) == 0);
  CHECK(size_class_of(512) == 0);
  CHECK(size_class_of(1023) == 0);
  CHECK(size_class_of(1024) == 1);
  CHECK(size_class_of(4096) == 3);
  CHECK(size_class_of(6 * 1024) == 3);
  CHECK(size_class_of(1 * MiB) == kSizeClassCount - 1);
  CHECK(size_class_of(32 * MiB) == kSizeClassCount - 1);
  CHECK(size_class_bytes(kSizeClassCount - 1) == 1 * MiB);
}

TEST_CASE("policy specs parse and print", "[pmem][policy]") {
  CHECK(parse_policy_spec("auto").value().kind == PolicySpec::Kind::Auto);
  const PolicySpec nt = parse_policy_spec("nt").value();
  CHECK(nt.kind == PolicySpec::Kind::Fixed);
  CHECK(nt.method == CopyMethod::NonTemporal);
  CHECK(parse_policy_spec("clwb").value().method == CopyMethod::Clwb);
  CHECK(parse_policy_spec("clflushopt").value().method == CopyMethod::Clflushopt);
  const PolicySpec threshold = parse_policy_spec("threshold:4K").value();
  CHECK(threshold.kind == PolicySpec::Kind::Threshold);
  CHECK(threshold.threshold == 4096);
  CHECK(to_string(threshold) == "threshold:4 KiB");
  CHECK(to_string(nt) == "nt");
}

TEST_CASE("bad policy specs are refused with a message that lists the choices", "[pmem][policy][bad-input]") {
  for (const char* bad : {"", "NT", "fast", "threshold:", "threshold:-4K", "threshold:4Q", "auto "}) {
    INFO(bad);
    auto spec = parse_policy_spec(bad);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == EINVAL);
    CHECK(spec.status().message().find("invalid copy policy") != std::string::npos);
  }
  CHECK(parse_policy_spec("fast").status().message().find("auto, nt, clflushopt, clwb, cached (eADR only) or threshold:<size>") !=
        std::string::npos);
}

TEST_CASE("a threshold spec streams below the threshold and flushes from it up", "[pmem][policy]") {
  REQUIRE((cpu_features().clwb || cpu_features().clflushopt));
  const CopyMethod cached = cpu_features().clwb ? CopyMethod::Clwb : CopyMethod::Clflushopt;
  const PolicyTable table = table_for_spec(parse_policy_spec("threshold:4K").value()).value();
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    INFO(size_class_bytes(i));
    CHECK(table[i] == (size_class_bytes(i) >= 4096 ? cached : CopyMethod::NonTemporal));
  }
  const PolicyTable fixed = table_for_spec(parse_policy_spec("clflushopt").value()).value();
  for (CopyMethod method : fixed) CHECK(method == CopyMethod::Clflushopt);
}

TEST_CASE("a saved calibration round-trips through JSON", "[pmem][policy]") {
  SavedCalibration saved;
  saved.cpu = "Test CPU";
  saved.granularity = "cache-line";
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    saved.table[i] = i % 2 ? CopyMethod::Clwb : CopyMethod::NonTemporal;
    saved.mib_per_s[i][0] = 1000.0 + static_cast<double>(i);
    saved.mib_per_s[i][2] = 500.5;
  }
  auto back = calibration_from_json(calibration_to_json(saved));
  REQUIRE(back.ok());
  CHECK(back->cpu == saved.cpu);
  CHECK(back->granularity == saved.granularity);
  CHECK(back->table == saved.table);
  CHECK(back->mib_per_s == saved.mib_per_s);
}

TEST_CASE("a damaged or foreign calibration file is rejected", "[pmem][policy][bad-input]") {
  SavedCalibration saved;
  saved.cpu = "x";
  saved.granularity = "cache-line";
  const std::string good = calibration_to_json(saved);
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  CHECK_FALSE(calibration_from_json("{").ok());
  CHECK_FALSE(calibration_from_json("[]").ok());
  CHECK_FALSE(calibration_from_json("{\"format\":\"other\"}").ok());
  CHECK(calibration_from_json(replace("\"version\": 1", "\"version\": 2")).status().message().find("version") !=
        std::string::npos);
  CHECK_FALSE(calibration_from_json(replace("\"size\": 512", "\"size\": 513")).ok());
  CHECK_FALSE(calibration_from_json(replace("\"method\": \"nt\"", "\"method\": \"warp\"")).ok());
  CHECK_FALSE(calibration_from_json(replace("\"cpu\": \"x\"", "\"cpu\": 5")).ok());
}

TEST_CASE("a fixed spec gives its table without calibrating", "[pmem][policy]") {
  EmulatedPmem pmem(16 * MiB);
  CopyPolicySettings settings;
  settings.spec = parse_policy_spec("clwb").value();
  auto policy = make_copy_policy(*pmem.region, settings);
  REQUIRE(policy.ok());
  CHECK(policy.value()->origin() == "fixed clwb");
  for (CopyMethod method : policy.value()->table()) CHECK(method == CopyMethod::Clwb);
}

TEST_CASE("the flushless cached copy is only for eADR regions", "[pmem][policy][eadr]") {
  CopyPolicySettings settings;
  settings.spec = parse_policy_spec("cached").value();
  {
    EmulatedPmem adr(16 * MiB, "CACHE_LINE");
    auto refused = make_copy_policy(*adr.region, settings);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message().find("only an eADR region (byte store granularity)") != std::string::npos);
    CHECK(refused.status().message().find("cache-line granularity") != std::string::npos);
  }
  EmulatedPmem eadr(16 * MiB, "BYTE");
  auto policy = make_copy_policy(*eadr.region, settings);
  REQUIRE(policy.ok());
  for (CopyMethod method : policy.value()->table()) CHECK(method == CopyMethod::Cached);
}

TEST_CASE("auto uses a saved calibration of this CPU and recalibrates over a foreign one", "[pmem][policy]") {
  EmulatedPmem pmem(16 * MiB);
  ScratchFile saved_file(0);
  SavedCalibration saved;
  saved.cpu = cpu_features().brand;
  saved.granularity = "cache-line";
  saved.table.fill(CopyMethod::Clflushopt);
  saved.table[0] = CopyMethod::NonTemporal;
  REQUIRE(save_calibration(saved_file.path(), saved).ok());

  CopyPolicySettings settings;
  settings.saved_table_path = saved_file.path();
  // Only a complete calibration is saved: give it all the time it needs (slow under sanitizers).
  settings.calibration_budget = std::chrono::seconds(60);
  auto reused = make_copy_policy(*pmem.region, settings);
  REQUIRE(reused.ok());
  CHECK(reused.value()->table() == saved.table);
  CHECK(reused.value()->origin() == "saved " + saved_file.path());

  saved.cpu = "Some Other CPU";
  REQUIRE(save_calibration(saved_file.path(), saved).ok());
  auto recalibrated = make_copy_policy(*pmem.region, settings);
  REQUIRE(recalibrated.ok());
  CHECK(recalibrated.value()->origin() == "calibrated");
  // The fresh calibration replaced the foreign file.
  auto rewritten = load_calibration(saved_file.path());
  REQUIRE(rewritten.ok());
  CHECK(rewritten->cpu == cpu_features().brand);
  CHECK(rewritten->table == recalibrated.value()->table());
}

TEST_CASE("a scratch area that does not fit is refused", "[pmem][policy][bad-input]") {
  EmulatedPmem pmem(16 * MiB);
  CopyPolicySettings settings;
  settings.scratch_offset = 15 * MiB + 512 * KiB;
  settings.scratch_length = 1 * MiB;
  auto policy = make_copy_policy(*pmem.region, settings);
  REQUIRE_FALSE(policy.ok());
  CHECK(policy.status().message().find("calibration scratch area") != std::string::npos);
}

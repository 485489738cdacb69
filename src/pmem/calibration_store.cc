#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/unique_fd.h"
#include "pcached/calibration.h"

namespace pcached::pmem {

namespace {

constexpr std::string_view kFormatName = "pcached-copy-calibration";
constexpr int kFormatVersion = 1;

}  // namespace

std::string calibration_to_json(const SavedCalibration& saved) {
  nlohmann::json classes = nlohmann::json::array();
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    nlohmann::json throughput = nlohmann::json::object();
    for (CopyMethod method : kAllCopyMethods) {
      const double mib_s = saved.mib_per_s[i][static_cast<size_t>(method)];
      if (mib_s > 0) throughput[std::string(to_string(method))] = mib_s;
    }
    classes.push_back({{"size", size_class_bytes(i)},
                       {"method", std::string(to_string(saved.table[i]))},
                       {"mib_per_s", throughput}});
  }
  nlohmann::json doc = {{"format", kFormatName},
                        {"version", kFormatVersion},
                        {"cpu", saved.cpu},
                        {"granularity", saved.granularity},
                        {"classes", classes}};
  return doc.dump(2) + "\n";
}

Result<SavedCalibration> calibration_from_json(const std::string& text) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Status::error(EINVAL, "not valid JSON");
  if (doc.value("format", "") != kFormatName) return Status::error(EINVAL, "not a pcached copy calibration");
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"] != kFormatVersion) {
    return Status::error(EINVAL, "unsupported calibration version (this build reads version " +
                                     std::to_string(kFormatVersion) + ")");
  }
  if (!doc.contains("cpu") || !doc["cpu"].is_string() || !doc.contains("granularity") ||
      !doc["granularity"].is_string()) {
    return Status::error(EINVAL, "calibration lacks cpu or granularity");
  }
  const nlohmann::json& classes = doc.contains("classes") ? doc["classes"] : nlohmann::json();
  if (!classes.is_array() || classes.size() != kSizeClassCount) {
    return Status::error(EINVAL, "calibration must list exactly " + std::to_string(kSizeClassCount) + " size classes");
  }
  SavedCalibration saved;
  saved.cpu = doc["cpu"].get<std::string>();
  saved.granularity = doc["granularity"].get<std::string>();
  for (size_t i = 0; i < kSizeClassCount; ++i) {
    const nlohmann::json& entry = classes[i];
    if (!entry.is_object() || !entry.contains("size") || !entry["size"].is_number_unsigned() ||
        entry["size"].get<uint64_t>() != size_class_bytes(i)) {
      return Status::error(EINVAL, "size class " + std::to_string(i) + " must have size " +
                                       std::to_string(size_class_bytes(i)));
    }
    const auto method = entry.contains("method") && entry["method"].is_string()
                            ? parse_copy_method(entry["method"].get<std::string>())
                            : std::nullopt;
    if (!method) return Status::error(EINVAL, "size class " + std::to_string(size_class_bytes(i)) + ": unknown method");
    saved.table[i] = *method;
    if (entry.contains("mib_per_s") && entry["mib_per_s"].is_object()) {
      for (CopyMethod m : kAllCopyMethods) {
        const auto it = entry["mib_per_s"].find(std::string(to_string(m)));
        if (it != entry["mib_per_s"].end() && it->is_number()) saved.mib_per_s[i][static_cast<size_t>(m)] = it->get<double>();
      }
    }
  }
  return saved;
}

Status save_calibration(const std::string& path, const SavedCalibration& saved) {
  // Write a temporary file, fsync, rename: a crash leaves the old table or the new one, never half.
  const std::string temporary = path + ".tmp";
  const std::string text = calibration_to_json(saved);
  UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::error(errno, "cannot write calibration " + temporary + ": " + std::strerror(errno));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::error(errno, "cannot write calibration " + temporary + ": " + std::strerror(errno));
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return Status::error(errno, "cannot sync calibration " + temporary + ": " + std::strerror(errno));
  fd.reset();
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return Status::error(errno, "cannot replace calibration " + path + ": " + std::strerror(errno));
  }
  return Status();
}

Result<SavedCalibration> load_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error(ENOENT, "cannot read calibration " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  Result<SavedCalibration> saved = calibration_from_json(text.str());
  if (!saved.ok()) return saved.status().with_context("calibration " + path);
  return saved;
}

}  // namespace pcached::pmem

// What `pcached list` and `pcached status` print: the daemon's JSON answers as text for people
// (`--json` prints the answers themselves). Apart from main so that tests can render the daemon's
// real answers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pcached::cli {

// A field of doc as text, "-" where it is missing or not a string.
std::string field_text(const nlohmann::json& doc, const char* key);
// A byte count of doc in units (format_size), "-" where it is missing or not a count.
std::string field_bytes(const nlohmann::json& doc, const char* key);

// The table of `pcached list`, one line per cache, from the answer to "list".
std::string render_list(const nlohmann::json& result);
// The report of `pcached status`, from the answer to "status". Lines about trouble (lost data,
// GC runs that waited) appear only when there is some.
std::string render_status(const nlohmann::json& status);

}  // namespace pcached::cli

// Names the calling thread (what top -H, ps -L, perf and gdb show): at most 15 characters, the
// rest is cut off.
#pragma once

#include <string>

namespace pcached {

void name_this_thread(const std::string& name);

}  // namespace pcached

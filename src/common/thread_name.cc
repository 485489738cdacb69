#include "common/thread_name.h"

#include <pthread.h>

namespace pcached {

void name_this_thread(const std::string& name) {
  // The kernel keeps 16 bytes with the terminating NUL; a longer name is refused, not cut.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace pcached

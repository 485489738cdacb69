// Early memory-failure reports (BUS_MCEERR_AO, src/pmem/memory_failure.h) sent by a test to its own
// process, as the kernel sends them to an early-kill process: si_addr the failed page as the
// process maps it, si_addr_lsb the size of the mapping's page. The kernel lets a process send
// itself a SIGBUS with any si_code, from its main thread only (rt_tgsigqueueinfo).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

namespace pcached::testing {

// False if the process may not send it (not the main thread) or the system call failed.
inline bool report_memory_failure_to_self(const void* address, short address_lsb = 12) {
  if (::getpid() != static_cast<pid_t>(::syscall(SYS_gettid))) return false;
  siginfo_t info{};
  info.si_signo = SIGBUS;
  info.si_code = BUS_MCEERR_AO;
  info.si_addr = const_cast<void*>(address);
  info.si_addr_lsb = address_lsb;
  return ::syscall(SYS_rt_tgsigqueueinfo, ::getpid(), ::getpid(), SIGBUS, &info) == 0;
}

}  // namespace pcached::testing

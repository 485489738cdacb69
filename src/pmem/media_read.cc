#include "pmem/media_read.h"

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include <pthread.h>
#include <ucontext.h>

#include "pmem/memory_failure.h"

namespace pcached::pmem {

namespace {

// Per-thread state of the copy in progress. Plain pointers only: the handler reads them, and they
// must be usable from signal context.
thread_local sigjmp_buf* t_recovery = nullptr;
thread_local const char* t_guard_begin = nullptr;
thread_local const char* t_guard_end = nullptr;
thread_local const void* t_fault = nullptr;
thread_local sigset_t t_mask_before_fault;

struct sigaction g_previous_action;

void on_sigbus(int signo, siginfo_t* info, void* context) {
  // An early report names a page that went bad, not a load that faulted: whatever this thread
  // is copying is not involved.
  if (info->si_code == BUS_MCEERR_AO) {
    const int saved_errno = errno;
    const bool queued = queue_memory_failure_report(info->si_addr, info->si_addr_lsb);
    errno = saved_errno;
    if (queued) return;
  }
  const char* address = static_cast<const char*>(info->si_addr);
  if (t_recovery != nullptr && address >= t_guard_begin && address < t_guard_end) {
    t_fault = address;
    // The mask the thread had before the signal: the jump below does not restore it, and an
    // interposed handler (ThreadSanitizer's) blocks every signal while ours runs.
    t_mask_before_fault = static_cast<const ucontext_t*>(context)->uc_sigmask;
    siglongjmp(*t_recovery, 1);
  }
  // Not a guarded pmem read: behave as if we had never been installed.
  if (g_previous_action.sa_flags & SA_SIGINFO) {
    g_previous_action.sa_sigaction(signo, info, context);
    return;
  }
  if (g_previous_action.sa_handler != SIG_DFL && g_previous_action.sa_handler != SIG_IGN) {
    g_previous_action.sa_handler(signo);
    return;
  }
  signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

}  // namespace

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    sigemptyset(&action.sa_mask);
    // The jump buffer does not save the signal mask (sigsetjmp(.., 0) costs no syscall per read):
    // a fault restores the mask from the signal's context instead, the only path that needs it.
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigaction(SIGBUS, &action, &g_previous_action);
  });
}

bool guarded_copy(void* dst, const void* src, size_t len, const void** fault_address) {
  install_sigbus_handler();
  sigjmp_buf recovery;
  if (sigsetjmp(recovery, 0) != 0) {
    t_recovery = nullptr;
    pthread_sigmask(SIG_SETMASK, &t_mask_before_fault, nullptr);
    *fault_address = t_fault;
    return false;
  }
  t_guard_begin = static_cast<const char*>(src);
  t_guard_end = t_guard_begin + len;
  t_recovery = &recovery;
  // The fences keep the compiler from moving the copy outside the window the handler watches.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, len);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_recovery = nullptr;
  return true;
}

}  // namespace pcached::pmem

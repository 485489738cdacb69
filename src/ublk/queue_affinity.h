// Where each ublk queue's thread may run, from the CPUs the kernel maps to its queue
// (GET_QUEUE_AFFINITY). One setting for the daemon's state file and control protocol, the CLI's
// --queue-affinity and the null device of the benchmarks.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pcached::ublk {

enum class QueueAffinity {
  // Bound to them when they are more than one CPU. A queue mapped to a single CPU (as many queues
  // as CPUs) is served from the other CPUs: bound to its own, its thread would share that CPU
  // with every program submitting through the queue, two context switches per request while
  // other CPUs idle (measured in the VM on a device that does nothing: 6x fewer 4 KiB requests);
  // left to the scheduler, it is woken where its submitter runs, and the two take turns on one
  // CPU all the same (one fio job in the VM, 4 KiB random writes at QD16: 1.29x the IOPS of
  // unbound, the median of 9 rounds over two boots, 7 of them ahead).
  Auto,
  Kernel,  // always bound to them, as ublksrv does
  None,    // never bound
};

inline constexpr std::array<std::string_view, 3> kQueueAffinityNames = {"auto", "kernel", "none"};

std::string_view to_string(QueueAffinity affinity);
// nullopt for anything but one of kQueueAffinityNames.
std::optional<QueueAffinity> parse_queue_affinity(std::string_view text);
// The names as a list for CLI11's IsMember, and as "'auto', 'kernel' or 'none'" for an error.
std::vector<std::string> queue_affinity_names();
std::string queue_affinity_choices();

// The CPUs a queue's thread is bound to (empty: not bound), from the setting, the CPUs the kernel
// maps to the queue (GET_QUEUE_AFFINITY) and those the daemon may run on (its own affinity).
std::vector<int> queue_thread_cpus(QueueAffinity affinity, const std::vector<int>& queue_cpus,
                                   const std::vector<int>& allowed_cpus);

}  // namespace pcached::ublk

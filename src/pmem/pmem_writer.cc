#include "pcached/pmem_writer.h"

#include <libpmem2.h>

#include <cassert>
#include <cstring>

#include "pmem/cpu_features.h"
#include "pmem/flush_loops.h"

namespace pcached::pmem {

namespace {

// The flush used for persist(): clwb keeps the line cached (a later read of a key or a header we
// just wrote stays fast); clflushopt evicts it; clflush is the serialising last resort.
CopyMethod preferred_flush() {
  const CpuFeatures& cpu = cpu_features();
  if (cpu.clwb) return CopyMethod::Clwb;
  if (cpu.clflushopt) return CopyMethod::Clflushopt;
  return CopyMethod::NonTemporal;  // stands for "clflush" in flush_range
}

constexpr unsigned kNonTemporalNoDrain = PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN;

}  // namespace

PmemWriter::PmemWriter(const Region& region, const CopyPolicy& policy, PersistObserver* observer)
    : region_(region),
      policy_(policy),
      memcpy_fn_(pmem2_get_memcpy_fn(region.native_map())),
      memset_fn_(pmem2_get_memset_fn(region.native_map())),
      persist_fn_(pmem2_get_persist_fn(region.native_map())),
      observer_(observer),
      default_flush_(preferred_flush()) {}

void PmemWriter::flush_range(void* address, size_t len, CopyMethod method) {
  if (region_.is_volatile()) {
    // Page granularity: msync (through libpmem2, which rounds to pages) is the only durable path.
    persist_fn_(address, len);
    return;
  }
  switch (method) {
    case CopyMethod::Clwb:
      flush_clwb(address, len);
      return;
    case CopyMethod::Clflushopt:
      flush_clflushopt(address, len);
      return;
    case CopyMethod::NonTemporal:
    case CopyMethod::Cached:  // only reached off eADR (a policy never picks it there): flush anyway
      flush_clflush(address, len);
      return;
  }
}

void PmemWriter::count(CopyMethod method, size_t len) {
  const size_t size_class = size_class_of(len);
  const auto m = static_cast<size_t>(method);
  CopyCounters::add(counters_.copies[m][size_class], 1);
  CopyCounters::add(counters_.bytes[m][size_class], len);
}

template <typename StreamingStore, typename CachedStore>
void PmemWriter::store(uint64_t offset, size_t len, CopyMethod method, StreamingStore streaming, CachedStore cached) {
  assert(offset <= region_.size() && len <= region_.size() - offset);
  if (len == 0) return;
  std::byte* dst = region_.base() + offset;
  if (method == CopyMethod::NonTemporal && !region_.is_volatile()) {
    // libpmem2 streams the aligned body and flushes the partial head and tail lines itself.
    streaming(dst);
    if (observer_ != nullptr) observer_->on_store(offset, len, StoreKind::NonTemporal);
  } else if (method == CopyMethod::Cached && region_.granularity() == Granularity::Byte) {
    // eADR: the CPU caches are persistent; the caller's fence is all the ordering it needs.
    cached(dst);
    if (observer_ != nullptr) observer_->on_store(offset, len, StoreKind::Cached);
  } else {
    cached(dst);
    if (observer_ != nullptr) observer_->on_store(offset, len, StoreKind::Cached);
    flush_range(dst, len, method == CopyMethod::NonTemporal ? default_flush_ : method);
    if (observer_ != nullptr) observer_->on_flush(offset, len);
  }
  count(method, len);
}

void PmemWriter::copy_nodrain(uint64_t offset, const void* src, size_t len, CopyMethod method) {
  store(
      offset, len, method,
      [&](std::byte* dst) { memcpy_fn_(dst, src, len, kNonTemporalNoDrain); },
      [&](std::byte* dst) { std::memcpy(dst, src, len); });
}

Status PmemWriter::copy_within_nodrain(uint64_t offset, uint64_t source, size_t len) {
  Status status;
  const auto read = [&](std::byte* dst) { status = region_.read(source, dst, len); };
  const CopyMethod policy_method = policy_.method_for(len);
  const CopyMethod method = policy_method == CopyMethod::NonTemporal ? default_flush_ : policy_method;
  store(offset, len, method,
        [&](std::byte* dst) {
          // No clwb nor clflushopt (default_flush_ stands for clflush): read, then clflush.
          read(dst);
          flush_range(dst, len, CopyMethod::NonTemporal);
        },
        read);
  return status;
}

void PmemWriter::fill_nodrain(uint64_t offset, uint8_t value, size_t len) {
  store(
      offset, len, policy_.method_for(len),
      [&](std::byte* dst) { memset_fn_(dst, value, len, kNonTemporalNoDrain); },
      [&](std::byte* dst) { std::memset(dst, value, len); });
}

void PmemWriter::flush(uint64_t offset, size_t len) {
  assert(offset <= region_.size() && len <= region_.size() - offset);
  // eADR: what is in the CPU caches is already in the persistence domain.
  if (len == 0 || region_.granularity() == Granularity::Byte) return;
  flush_range(region_.base() + offset, len, default_flush_);
  if (observer_ != nullptr) observer_->on_flush(offset, len);
}

void PmemWriter::drain() {
  // sfence orders the preceding clflushopt/clwb and streaming stores: once it retires they have
  // reached the persistence domain (ADR). On a page-granularity region msync already waited.
  store_fence();
  CopyCounters::add(counters_.fences, 1);
  if (observer_ != nullptr) observer_->on_fence();
}

}  // namespace pcached::pmem

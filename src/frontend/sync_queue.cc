#include "frontend/sync_queue.h"

#include <chrono>

namespace pcached::frontend {

namespace {

struct Waiter final : cache::RequestCompletion {
  bool done = false;
  int result = 0;
  void complete(int value) override {
    result = value;
    done = true;
  }
};

}  // namespace

Result<std::unique_ptr<SyncQueue>> SyncQueue::create(cache::Cache& cache) {
  auto queue = std::unique_ptr<SyncQueue>(new SyncQueue());
  auto ring = io::Ring::create(64);
  if (!ring.ok()) return ring.status();
  queue->ring_ = std::move(ring.value());
  auto engine_queue = cache.create_queue(*queue->ring_);
  if (!engine_queue.ok()) return engine_queue.status();
  queue->queue_ = std::move(engine_queue.value());
  return queue;
}

int SyncQueue::execute(const cache::Request& request) {
  Waiter waiter;
  queue_->submit(request, &waiter);
  while (!waiter.done) ring_->wait_and_dispatch(std::chrono::milliseconds(100));
  return waiter.result;
}

std::vector<int> SyncQueue::execute_batch(const std::vector<cache::Request>& requests) {
  std::vector<Waiter> waiters(requests.size());
  queue_->begin_batch();
  for (size_t i = 0; i < requests.size(); ++i) queue_->submit(requests[i], &waiters[i]);
  queue_->end_batch();
  std::vector<int> results;
  for (Waiter& waiter : waiters) {
    while (!waiter.done) ring_->wait_and_dispatch(std::chrono::milliseconds(100));
    results.push_back(waiter.result);
  }
  return results;
}

int SyncQueue::read(uint64_t sector, uint32_t sectors, std::byte* buffer) {
  return execute({cache::Op::Read, sector, sectors, buffer, false});
}

int SyncQueue::write(uint64_t sector, uint32_t sectors, const std::byte* buffer) {
  return execute({cache::Op::Write, sector, sectors, const_cast<std::byte*>(buffer), false});
}

int SyncQueue::discard(uint64_t sector, uint32_t sectors) {
  return execute({cache::Op::Discard, sector, sectors, nullptr, false});
}

int SyncQueue::write_zeroes(uint64_t sector, uint32_t sectors) {
  return execute({cache::Op::WriteZeroes, sector, sectors, nullptr, false});
}

int SyncQueue::flush() { return execute({cache::Op::Flush, 0, 0, nullptr, false}); }

}  // namespace pcached::frontend

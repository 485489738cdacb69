// Writes that reach the backing device in the foreground: writethrough and writearound modes,
// and sequential streams that bypass the cache; and the flushes they make necessary. The device write comes first; only once it is
// done (and flushed, for FUA) does the cache take the data as clean or forget the range, so the
// cache never holds data newer than the device's for a range it considers clean.
#include <spdlog/spdlog.h>

#include <cstring>

#include "cache/queue.h"
#include "format/layout.h"

namespace pcached::cache {

using format::kSectorSize;

class EngineQueue::DirectWrite final : public io::CompletionHandler, public PendingRequest {
 public:
  DirectWrite(EngineQueue& queue, const Request& request, RequestCompletion* completion, const Timing& timing,
              WriteRoute route)
      : PendingRequest(completion, timing), queue_(queue), request_(request), route_(route) {}

  void submit() {
    queue_.engine_.backing_->write(queue_.ring_, request_.buffer, request_.sector * kSectorSize, bytes(), this);
  }

  void on_completion(int result) override {
    Engine& engine = queue_.engine_;
    if (!flushing_) {
      if (result != static_cast<int>(bytes())) {
        fail(result, "write");
        return;
      }
      engine.backing_unflushed_.store(true);
      if (request_.fua) {
        // Forced unit access: the data must be on stable media before the write completes.
        flushing_ = true;
        QueueCounters::bump(queue_.counters_.backing_flushes);
        engine.backing_->flush(queue_.ring_, this);
        return;
      }
    } else if (result != 0) {
      fail(result, "flush");
      return;
    }
    finish(queue_.finish_direct_write(request_, route_));
  }

 private:
  uint32_t bytes() const { return request_.sectors * static_cast<uint32_t>(kSectorSize); }

  void fail(int result, const char* what) {
    const int error = result < 0 ? result : -EIO;
    spdlog::debug("backing {} of sectors {}+{} failed: {}", what, request_.sector, request_.sectors,
                  std::strerror(-error));
    QueueCounters::bump(queue_.counters_.direct_write_errors);
    if (route_ == WriteRoute::Bypass && queue_.tunables_.get().mode == CacheMode::Writeback) {
      // Only the sequential cutoff sent it to the device; in writeback mode the cache can take
      // it as dirty data instead, so a failing or missing backing device does not fail it.
      queue_.commit_staged_writes();
      finish(queue_.write(request_));
      return;
    }
    // What the device holds for the range is unknown now: cached clean copies may be stale.
    queue_.forget_clean(request_);
    finish(error);
  }

  EngineQueue& queue_;
  Request request_;
  WriteRoute route_;
  bool flushing_ = false;
};

// A flush forwarded to the backing device because foreground writes reached it.
class EngineQueue::ForwardedFlush final : public io::CompletionHandler, public PendingRequest {
 public:
  ForwardedFlush(EngineQueue& queue, RequestCompletion* completion, const Timing& timing)
      : PendingRequest(completion, timing), queue_(queue) {}

  void on_completion(int result) override {
    if (result != 0) {
      // The writes it should have covered are still unflushed: the next flush tries again.
      queue_.engine_.backing_unflushed_.store(true);
      spdlog::warn("flush of backing device {} failed: {}", queue_.engine_.backing_->path(),
                   std::strerror(result < 0 ? -result : EIO));
    }
    finish(result == 0 ? 0 : -EIO);
  }

 private:
  EngineQueue& queue_;
};

void EngineQueue::write_direct(const Request& request, RequestCompletion* completion, const Timing& timing,
                               WriteRoute route) {
  QueueCounters::bump(counters_.direct_writes);
  (new DirectWrite(*this, request, completion, timing, route))->submit();
}


void EngineQueue::flush(RequestCompletion* completion, const Timing& timing) {
  QueueCounters::bump(counters_.flushes);
  // Data in the cache is durable on pmem already; data written to the device in the foreground
  // (writethrough, writearound, bypass) needs the device flushed.
  if (!engine_.backing_unflushed_.exchange(false)) {
    timing.record();
    completion->complete(0);
    return;
  }
  QueueCounters::bump(counters_.backing_flushes);
  engine_.backing_->flush(ring_, new ForwardedFlush(*this, completion, timing));
}

}  // namespace pcached::cache

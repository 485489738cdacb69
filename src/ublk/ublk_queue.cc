#include "ublk/ublk_queue.h"

#include <pthread.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include "common/thread_name.h"
#include "ublk/uapi_compat.h"

namespace pcached::ublk {

// One tag: a request slot of the queue. It is the handler of its ublk command's completion and
// the engine's completion of the request the driver put in it.
class UblkQueue::Tag final : public io::CompletionHandler, public cache::RequestCompletion {
 public:
  Tag(UblkQueue& queue, uint16_t tag, std::byte* buffer) : queue_(queue), tag_(tag), buffer_(buffer) {}

  uint16_t tag() const { return tag_; }
  std::byte* buffer() const { return buffer_; }

  // The driver answered our FETCH/COMMIT_AND_FETCH: a request is waiting, or the tag is aborted.
  void on_completion(int result) override {
    if (result == UBLK_IO_RES_OK) {
      if (queue_.parking_.load(std::memory_order_relaxed)) {
        ++queue_.held_;  // not started: the driver re-issues it to the next server
        return;
      }
      serve();
      return;
    }
    if (result != UBLK_IO_RES_ABORT) {
      spdlog::error("ublk queue {} tag {}: command failed: {}", queue_.settings_.queue, tag_, std::strerror(-result));
    }
    --queue_.live_tags_;  // ENODEV: stopping (or recovering); the tag is not re-armed
  }

  // The engine finished the request: commit its result and fetch the next one in one command.
  void complete(int result) override {
    --queue_.serving_;
    queue_.submit_command(*this, io_opcode(kCommitAndFetchRequest, queue_.settings_.ioctl_encoded), result);
  }

 private:
  void serve() {
    ++queue_.serving_;
    const ublksrv_io_desc& desc = queue_.descriptors_[tag_];
    cache::Request request;
    request.sector = desc.start_sector;
    request.sectors = desc.nr_sectors;
    request.buffer = buffer_;
    request.fua = (desc.op_flags & UBLK_IO_F_FUA) != 0;
    switch (ublksrv_get_op(&desc)) {
      case UBLK_IO_OP_READ:
        request.op = cache::Op::Read;
        break;
      case UBLK_IO_OP_WRITE:
        request.op = cache::Op::Write;
        break;
      case UBLK_IO_OP_FLUSH:
        request.op = cache::Op::Flush;
        break;
      case UBLK_IO_OP_DISCARD:
        request.op = cache::Op::Discard;
        break;
      case UBLK_IO_OP_WRITE_ZEROES:
        request.op = cache::Op::WriteZeroes;
        break;
      default:
        complete(-EOPNOTSUPP);
        return;
    }
    queue_.engine_queue_->submit(request, this);
  }

  UblkQueue& queue_;
  uint16_t tag_;
  std::byte* buffer_;
};

UblkQueue::UblkQueue(cache::QueueTarget& target, const QueueSettings& settings) : target_(target), settings_(settings) {}

UblkQueue::~UblkQueue() {
  join();
  engine_queue_.reset();
  ring_.reset();  // drops the ring's reference to /dev/ublkcN before the mappings go
  if (descriptors_ != nullptr) ::munmap(const_cast<ublksrv_io_desc*>(descriptors_), descriptors_length_);
  if (buffers_ != nullptr) ::munmap(buffers_, buffers_length_);
}

void UblkQueue::submit_command(Tag& tag, uint32_t opcode, int32_t result) {
  io_uring_sqe* sqe = ring_->prepare(&tag);
  sqe->opcode = IORING_OP_URING_CMD;
  if (char_fd_fixed_) {
    sqe->fd = 0;
    sqe->flags |= IOSQE_FIXED_FILE;
  } else {
    sqe->fd = settings_.char_fd;
  }
  sqe->cmd_op = opcode;
  ublksrv_io_cmd cmd{};
  cmd.q_id = settings_.queue;
  cmd.tag = tag.tag();
  cmd.result = result;
  cmd.addr = reinterpret_cast<uint64_t>(tag.buffer());
  std::memcpy(io::Ring::command_area(sqe), &cmd, sizeof cmd);
}

Status UblkQueue::set_up() {
  const std::string where = "ublk queue " + std::to_string(settings_.queue);
  name_this_thread("pcached-q" + std::to_string(settings_.queue));
  if (!settings_.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : settings_.cpus) CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  // This thread's writes must not be throttled behind the dirty pages of its own device.
  prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0);

  // Task work (the driver handing this queue a request, a backing I/O completing) runs when this
  // thread enters the ring to wait rather than by interrupting it (COOP_TASKRUN), and only this
  // thread submits, so the kernel may keep that work on the ring until then (DEFER_TASKRUN), as
  // the kernel's own ublk server does. The kernel flags pending task work in the ring
  // (TASKRUN_FLAG), which is what the thread's spin before sleeping watches. Kernels before 6.1
  // lack some of these.
  constexpr unsigned kDeferred = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  Result<std::unique_ptr<io::Ring>> ring = Status::error(EINVAL, "no io_uring set-up tried");
  for (unsigned extra : {kDeferred | IORING_SETUP_TASKRUN_FLAG, kDeferred,
                         IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, unsigned{IORING_SETUP_COOP_TASKRUN}, 0u}) {
    ring = io::Ring::create(2u * settings_.depth + 16, IORING_SETUP_SQE128 | extra);
    if (ring.ok()) {
      // Without the flag a spin would not see the next request coming, only completions.
      if (extra & IORING_SETUP_TASKRUN_FLAG) ring.value()->set_poll(settings_.poll);
      break;
    }
    if (ring.status().code() != EINVAL) break;
  }
  if (!ring.ok()) return ring.status().with_context(where);
  ring_ = std::move(ring.value());
  // Every request costs this thread a command or two on /dev/ublkcN and an io_uring_enter: with
  // both fds registered the kernel looks neither up each time. Neither is needed to serve.
  ring_->register_fd_for_this_thread();
  char_fd_fixed_ = ring_->register_fixed_file(settings_.char_fd).ok();

  const long page = ::sysconf(_SC_PAGESIZE);
  descriptors_length_ = (settings_.depth * sizeof(ublksrv_io_desc) + page - 1) / page * page;
  void* descriptors = ::mmap(nullptr, descriptors_length_, PROT_READ, MAP_SHARED | MAP_POPULATE, settings_.char_fd,
                             static_cast<off_t>(UBLKSRV_CMD_BUF_OFFSET + settings_.queue * kDescriptorStride(page)));
  if (descriptors == MAP_FAILED) {
    descriptors_ = nullptr;
    return Status::error(errno, where + ": cannot map the descriptor array: " + std::strerror(errno));
  }
  descriptors_ = static_cast<const ublksrv_io_desc*>(descriptors);

  buffers_length_ = size_t{settings_.depth} * settings_.max_io_bytes;
  void* buffers = ::mmap(nullptr, buffers_length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffers == MAP_FAILED) return Status::error(errno, where + ": cannot allocate I/O buffers");
  buffers_ = static_cast<std::byte*>(buffers);

  auto engine_queue = target_.create_queue(*ring_);
  if (!engine_queue.ok()) return engine_queue.status().with_context(where);
  engine_queue_ = std::move(engine_queue.value());

  for (uint16_t tag = 0; tag < settings_.depth; ++tag) {
    tags_.push_back(std::make_unique<Tag>(*this, tag, buffers_ + size_t{tag} * settings_.max_io_bytes));
    submit_command(*tags_.back(), io_opcode(kFetchRequest, settings_.ioctl_encoded), -1);
  }
  live_tags_ = settings_.depth;
  ring_->submit();
  return Status();
}

void UblkQueue::run() {
  setup_status_ = set_up();
  setup_state_.store(setup_status_.ok() ? 1 : -1);
  setup_state_.notify_all();
  if (setup_status_.ok()) serve();
  if (ring_) ring_->unregister_fd_for_this_thread();  // before the thread ends (io::Ring)
  {
    std::lock_guard lock(finished_mutex_);
    finished_ = true;
  }
  finished_changed_.notify_all();
}

void UblkQueue::serve() {
  // Serve until the driver has aborted every tag; engine I/O completes on the same ring. The
  // requests of one wake-up form a batch: their writes share one data fence, one key set and one
  // key fence, and complete together at end_batch (their COMMIT_AND_FETCH commands go out with
  // the next wait).
  while (live_tags_ > 0 || ring_->in_flight() > 0) {
    if (parking_.load(std::memory_order_relaxed) && serving_ == 0) {
      // Every request started is complete: its commit goes out now, and the queue of the cache
      // goes (its open segments sealed), so that the cache can detach. The ring and its pending
      // fetches stay until the process exits, as after a crash.
      ring_->submit();
      engine_queue_.reset();
      return;
    }
    engine_queue_->begin_batch();
    ring_->wait_and_dispatch(std::chrono::seconds(1));
    engine_queue_->end_batch();
  }
}

Status UblkQueue::start() {
  thread_ = std::thread([this] { run(); });
  setup_state_.wait(0);
  return setup_status_;
}

bool UblkQueue::wait_finished(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(finished_mutex_);
  return finished_changed_.wait_until(lock, deadline, [this] { return finished_; });
}

void UblkQueue::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace pcached::ublk

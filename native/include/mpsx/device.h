// MTLDevice: one backend instance, its caching allocator and default queue.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mpsx/pool.h"

namespace mpsx {

class Backend;
class CommandQueue;

namespace detail {
// Incremented in the child of each fork(): devices remember the value they
// were made with, so that the child can tell its parent's objects.
extern std::atomic<uint64_t> process_generation;
// Held by the runtime's threads (queue workers) while they run native code:
// fork() waits until no thread holds it (pthread_atfork), so that none is
// inside an allocator or a library's lock that the child could then never
// take (children of processes under gcc's AddressSanitizer hung so). A
// holding thread steps out with RuntimeWorkPause while it waits for work or
// for what fork()'s caller may hold (Python's GIL). Holds nest per thread.
class RuntimeWork {
 public:
  RuntimeWork();
  ~RuntimeWork();
  RuntimeWork(const RuntimeWork&) = delete;
  RuntimeWork& operator=(const RuntimeWork&) = delete;
};
class RuntimeWorkPause {
 public:
  RuntimeWorkPause();
  ~RuntimeWorkPause();
  RuntimeWorkPause(const RuntimeWorkPause&) = delete;
  RuntimeWorkPause& operator=(const RuntimeWorkPause&) = delete;

 private:
  int depth_;  // the thread's holds before the pause
};
// Threads the runtime gave up waiting for (an NCCL join past its timeout).
// One may still be inside a library when the process exits, so the exit then
// ends the process before the libraries' destructors (mpsx/_callbacks.h).
extern std::atomic<int> abandoned_threads;
}  // namespace detail

class Device : public std::enable_shared_from_this<Device> {
 public:
  explicit Device(std::unique_ptr<Backend> backend);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Every usable device, best first (metal, cuda, then cpu). In the child of
  // a fork(), new devices: those of the parent stay with the parent.
  static const std::vector<std::shared_ptr<Device>>& all();
  // "cpu", "cuda", "cuda:1", "metal"; empty for the best one (MPSX_DEVICE
  // overrides). Throws ArgumentError naming the devices present.
  static std::shared_ptr<Device> named(const std::string& name);

  const std::string& name() const { return name_; }
  // Whether the device was made in this process, not before a fork() in a
  // parent: its queues' threads, its GPU context and memory are the parent's.
  bool made_in_this_process() const {
    return generation_ == detail::process_generation.load(std::memory_order_relaxed);
  }
  // Throws StateError unless made_in_this_process(): every call that runs,
  // waits for or allocates anything on the device checks it.
  void check_process() const {
    if (!made_in_this_process()) fail_forked();
  }
  const char* backend_name() const;
  Backend& backend() const { return *backend_; }
  bool host_addressable() const;
  // Backend::deterministic.
  bool deterministic() const;
  void set_deterministic(bool value);

  const std::shared_ptr<CommandQueue>& command_queue();
  std::shared_ptr<CommandQueue> new_command_queue();

  // The largest allocation: 256 TiB, beyond the address space of any device
  // and where every size class still fits size_t.
  static constexpr size_t kMaxAllocation = size_t{1} << 48;

  // Caching allocator: freed blocks are kept by size class and handed out
  // again, so steady-state training allocates nothing from the backend.
  // Blocks of up to kSlabBlockLimit bytes are cut from kSlabBytes slabs of
  // one size class: the images and states a small encode makes (a
  // one-neuron graph's result, a normalization state's vectors) cost no
  // backend allocation (cudaMalloc) each.
  // Throws OutOfMemoryError above kMaxAllocation, before asking the backend.
  static constexpr size_t kSlabBlockLimit = size_t{64} << 10, kSlabBytes = size_t{2} << 20;
  void* allocate(size_t bytes, size_t* capacity);
  void release(void* data, size_t capacity);
  // Blocks released while a command buffer finishes on its queue's thread,
  // at a time the program can not tell, are cached only once the program
  // sees that command buffer complete (its wait_until_completed, the
  // queue's wait_until_idle) or commits the second command buffer after it
  // on the queue: each step of a training loop then gets the same memory as
  // the step before the last, whatever the device's timing, so that its
  // command buffers capture themselves (CommandQueue::
  // captures_command_buffers). `sequence` is the command buffer's place in
  // its queue's commits.
  class DeferringReleases {
   public:
    DeferringReleases(const CommandQueue& queue, uint64_t sequence);
    ~DeferringReleases();
    DeferringReleases(const DeferringReleases&) = delete;
    DeferringReleases& operator=(const DeferringReleases&) = delete;

   private:
    const void* previous_queue_;
    const Device* previous_device_;
    uint64_t previous_sequence_;
  };
  // Caches the blocks deferred by `queue`'s command buffers up to `sequence`.
  void release_deferred(const CommandQueue& queue, uint64_t sequence);
  // Returns every cached block to the backend, and every slab none of whose
  // blocks is in use.
  void trim();
  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  // The most bytes_in_use has been since the device was made or the last
  // reset (which sets it to bytes_in_use).
  size_t peak_bytes_in_use() const;
  void reset_peak_bytes_in_use();

 private:
  [[noreturn]] void fail_forked() const;

  std::unique_ptr<Backend> backend_;
  std::string name_;
  uint64_t generation_;
  std::once_flag queue_once_;
  std::shared_ptr<CommandQueue> queue_;
  mutable detail::SpinLock cache_lock_;
  struct Slab {
    char* base;
    size_t blocks_cut = 0;
    size_t blocks_cached = 0;  // counted by trim
  };
  struct CachedClass {
    size_t bytes = 0;
    size_t count = 0;  // blocks of this class, live or cached
    // Cached blocks, a min-heap by address: the lowest goes first, so that a
    // loop that frees and makes the same sizes each step gets the same
    // memory each step (command buffers that capture themselves match it).
    std::vector<void*> blocks;
    // The slab blocks are being cut from, and its bytes left.
    Slab* slab = nullptr;
    size_t slab_left = 0;
  };
  std::vector<CachedClass> cache_;  // by size class
  struct Deferred {
    const void* queue;
    uint64_t sequence;
    void* data;
    size_t capacity;
  };
  std::vector<Deferred> deferred_;
  size_t block_count_ = 0;  // of every class, live or cached: a bound on those deferred
  void reserve_deferred();
  void cache_block(void* data, size_t capacity);
  std::vector<std::unique_ptr<Slab>> slabs_;
  void* cut_from_slab(CachedClass& cached);
  void trim_slabs(std::vector<std::pair<void*, size_t>>& freed);
  size_t bytes_in_use_ = 0;
  size_t peak_bytes_in_use_ = 0;
  size_t bytes_cached_ = 0;
};

}  // namespace mpsx

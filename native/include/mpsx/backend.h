// The interface every backend (cpu, cuda, metal) implements. Core code
// validates, sizes and records; a backend allocates, moves bytes, runs
// command buffers and builds the primitive of each kernel family.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpsx/device.h"
#include "mpsx/dlpack.h"
#include "mpsx/image.h"

namespace mpsx {

class CommandBuffer;
class ExecutionContext;

// Runs the command buffers of one CommandQueue, in commit order.
class Executor {
 public:
  virtual ~Executor() = default;
  // Takes a committed command buffer; it runs, then finish() is called on it.
  virtual void submit(std::shared_ptr<CommandBuffer> command_buffer) = 0;
  // Waits at most `at_most` until everything submitted has finished; returns
  // whether it has. Core calls it in slices (wait_in_slices).
  virtual bool wait_until_idle(std::chrono::milliseconds at_most) = 0;
  // Waits at most `at_most` until the device has run a submitted command
  // buffer, where the waiting thread can tell sooner than finish() would wake
  // it; returns false while it has not.
  virtual bool wait_for_device(const CommandBuffer&, std::chrono::milliseconds /*at_most*/) { return true; }
  // Makes another library's `stream` (a handle of the device's API, as
  // DLPack passes it) wait for the command buffers submitted so far. False
  // where the backend has no streams: the caller waits on the host.
  virtual bool order_stream_after_submitted(int64_t /*stream*/) { return false; }
  // Whether a command buffer may run as an earlier one's recording when
  // their command keys are equal (CommandQueue::captures_command_buffers).
  virtual bool runs_command_buffers_by_key() const { return false; }
};

// What an executor's thread takes, in submission order, and what the
// executor waits on (the cpu executor's command buffers to run, the cuda
// executor's to complete). The thread keeps its own reference to the state
// holding it: the executor can be destroyed on that thread, when the last
// command buffer of a forgotten queue finishes there.
template <class Item>
struct ExecutorQueue {
  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<Item> pending;
  bool busy = false;
  bool stopping = false;
  bool started = false;

  // The thread, once it holds its RuntimeWork, says so; the executor waits
  // for that before it returns, so that the thread's start (its allocations
  // among them) is over before its maker goes on, to a fork() perhaps.
  void start() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      started = true;
    }
    idle.notify_all();
  }
  void wait_until_started() {
    std::unique_lock<std::mutex> lock(mutex);
    idle.wait(lock, [this] { return started; });
  }

  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pending.push_back(std::move(item));
    }
    wake.notify_one();
  }

  // The thread's next item, waited for; false once stopping with nothing
  // pending. `taken(next)` runs under the lock.
  template <class Taken>
  bool take(Item& next, Taken taken) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!stopping && pending.empty()) {
      lock.unlock();
      {
        detail::RuntimeWorkPause idle;  // a fork() need not wait for an idle thread
        lock.lock();
        wake.wait(lock, [&] { return stopping || !pending.empty(); });
        lock.unlock();  // RuntimeWork is taken back without the mutex
      }
      // Only this thread takes: what it waited for is still there.
      lock.lock();
    }
    if (pending.empty()) return false;
    next = std::move(pending.front());
    pending.pop_front();
    busy = true;
    taken(next);
    return true;
  }
  bool take(Item& next) {
    return take(next, [](const Item&) {});
  }

  // The thread is done with its item; `done()` runs under the lock.
  template <class Done>
  void finished(Done done) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      busy = false;
      done();
    }
    idle.notify_all();
  }
  void finished() {
    finished([] {});
  }

  bool wait_until_idle(std::chrono::milliseconds at_most) {
    std::unique_lock<std::mutex> lock(mutex);
    return idle.wait_for(lock, at_most, [this] { return pending.empty() && !busy; });
  }

  // Sets `stopping`, wakes the thread and joins it, or detaches it when the
  // executor dies on that thread (its last reference dropped by a completed
  // handler).
  void stop(std::thread& thread) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      detail::RuntimeWorkPause joining;  // the thread may wait for a fork() to finish before it ends
      thread.join();
    }
  }
};

// Sizes within core's limits (types.h) that a backend's kernels cannot
// handle. Core refuses them with ShapeError where a kernel is made, before
// anything is allocated or enqueued.
struct BackendLimits {
  // Feature channels of per-channel sums: batch normalization and the bias
  // gradients of the convolution family.
  int64_t summed_feature_channels = kMaxDimension;
  // Taps (kernel_width * kernel_height) of a max pooling gradient's window.
  int64_t max_pooling_gradient_taps = kMaxDimension * kMaxDimension;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda" or "metal".
  virtual const char* kind() const = 0;
  // Device name: "cpu", "cuda:0", "metal".
  virtual std::string device_name() const = 0;

  // Whether the host can read and write the memory allocate() hands out at
  // its address (cpu; metal's shared storage on unified memory), so buffers
  // can be exported to numpy without a copy.
  virtual bool host_addressable() const { return false; }

  virtual BackendLimits limits() const { return {}; }

  // Device.deterministic: the kernels' primitives built from now on use
  // only algorithms whose results repeat bit for bit, run after run and
  // process after process (cuda: cuDNN engines without the nondeterministic
  // note, the heuristics' first rather than the fastest timed). cpu's always
  // repeat; metal leaves the choice to MPS.
  std::atomic<bool> deterministic{false};

  // Whether an elementwise kernel may write its result over its source (an
  // NNGraph's in-place neurons); MPS's kernels refuse it.
  virtual bool writes_in_place() const { return true; }

  // For tests, where a backend picks its code by the processor it runs on
  // (cpu; the others pick nothing and keep these defaults): the build of its
  // own hot loops that runs (null: no choice), and whether it chose to run
  // convolutions of float16 images on them as they are rather than on
  // float32 copies.
  virtual const char* loop_clone() const { return nullptr; }
  virtual bool runs_float16_convolutions() const { return false; }
  // Whether kernels compute on float16 images as they are (cuda, metal; cpu
  // where oneDNN has float16 convolutions for the processor) rather than on
  // float32 copies of them. Where they do not, an NNGraph of format float16
  // keeps the images no caller sees in float32.
  virtual bool computes_in_float16() const { return true; }
  // The instruction set oneDNN's kernels run, as ONEDNN_MAX_CPU_ISA names it
  // (cpu; null elsewhere).
  virtual const char* onednn_isa() const { return nullptr; }

  // Memory. allocate throws OutOfMemoryError.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* data, size_t bytes) = 0;
  virtual void copy_to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void copy_from_host(void* device, const void* host, size_t bytes) = 0;
  virtual void fill_zero(void* device, size_t bytes) = 0;
  // Copies between an image region in this device's memory and one in host
  // memory, of equal extents, converting data types and layouts; only the
  // regions' elements are written. The host memory may be reused on return.
  virtual void read_region(const ImageRegion& device, const ImageRegion& host) = 0;
  virtual void write_region(const ImageRegion& host, const ImageRegion& device) = 0;
  // fill_zero and write_region may return before the device memory holds
  // what they wrote (cuda): command buffers committed later, and host reads,
  // are ordered after them. This waits until it does, for memory handed to
  // another library.
  virtual void wait_for_host_writes() {}
  // Strides for a new image of this descriptor.
  virtual ImageLayout image_layout(const ImageDescriptor& descriptor) const = 0;

  // DLPack. Where allocate()'s memory is, as __dlpack_device__ says: kDLCPU
  // where host_addressable, else BufferError.
  virtual dlpack::DLDevice dlpack_device() const;
  // Whether kernels run on memory mpsx did not allocate, so that another
  // library's tensors are imported without a copy: cpu and cuda; metal
  // encodes its own MTLBuffers and textures only.
  virtual bool runs_on_foreign_memory() const { return false; }
  // Copies between two regions of this device's memory (either may be
  // another library's) of equal extents and data type, in any layouts; done
  // on return, after the host writes and imports before it. The default
  // copies on the host where host_addressable.
  virtual void copy_device_region(const ImageRegion& from, const ImageRegion& to);
  // The stream another library's work is ordered before when mpsx imports
  // its memory (cuda: the stream host writes go on, as a cudaStream_t); 0
  // where the backend has no streams.
  virtual int64_t import_stream() { return 0; }
  // Called once another library ordered its work before import_stream():
  // command buffers committed later, and host reads, wait for it as for
  // host writes.
  virtual void order_after_import() {}
  // Makes another library's `stream` wait for the host writes not yet done
  // (wait_for_host_writes without blocking, where the backend has streams).
  virtual void order_stream_after_host_writes(int64_t /*stream*/) { wait_for_host_writes(); }
  // Throws ArgumentError unless `stream`, given by another library to order
  // its reads after this device's work, is a stream of this device, before
  // anything is asked of it (a made-up handle would crash the driver).
  virtual void check_foreign_stream(int64_t /*stream*/) const {}
  // Storage for a new image where the backend keeps images as objects of its
  // own (metal: MPSImages); null where they live in Buffers (cpu, cuda).
  // Throws ArgumentError for a descriptor the backend cannot hold.
  virtual std::shared_ptr<ImageStorage> new_image_storage(const ImageDescriptor&) { return nullptr; }

  virtual std::unique_ptr<Executor> new_executor() = 0;
};

// A backend library registers a function that lists its devices.
using BackendEnumerator = std::vector<std::unique_ptr<Backend>> (*)();
void register_backend(int priority, BackendEnumerator enumerate);
// A backend library whose enumerator finds no device says why (no driver, no
// GPU); Device::named repeats it for a name of that backend.
void report_backend_unavailable(const char* kind, const std::string& reason);
// Why backend libraries present beside the runtime could not be loaded.
const std::vector<std::string>& backend_load_errors();

}  // namespace mpsx

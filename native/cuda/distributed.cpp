// The cuda backend's collectives: NCCL, loaded at run time from the
// nvidia-nccl wheel (or the loader's search), its all-reduce launched on the
// context's stream (the queue's, or the overlapped one), so that it is
// ordered with the kernels around it and is captured into the CUDA graph of a
// replayable command buffer.
//
// A peer that dies leaves NCCL's kernels waiting forever; a watchdog thread
// gives up on a collective that has not finished within the timeout: it
// aborts the communicator, which ends the waiting kernels, and the command
// buffer fails with a DistributedError. It watches the launch itself (the
// first collective of a group connects to the peers, waiting on the host)
// and an event recorded after each collective: either unfinished for the
// timeout is given up. The replays of a CUDA graph are not watched yet.
// The bucket layout check's exchange (all_reduce_on_host) is a collective
// like the others, waited for on the host.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>

#include "backend.h"
#include "mpsx/device.h"
#include "mpsx/distributed.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::cuda {
namespace {

// The parts of nccl.h used here (its ABI is stable across NCCL 2).
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = struct NcclCommOpaque*;
using NcclResult = int;
constexpr NcclResult kNcclSuccess = 0, kNcclInProgress = 7;
constexpr int kNcclFloat32 = 7, kNcclSum = 0, kNcclAvg = 4;

struct Nccl {
  NcclResult (*get_unique_id)(NcclUniqueId*);
  NcclResult (*comm_init_rank)(NcclComm*, int, NcclUniqueId, int);
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t);
  NcclResult (*comm_abort)(NcclComm);
  NcclResult (*comm_destroy)(NcclComm);
  NcclResult (*comm_get_async_error)(NcclComm, NcclResult*);
  const char* (*get_error_string)(NcclResult);
};

// NCCL from `library`, loaded once per path.
const Nccl& nccl(const std::string& library) {
  static std::mutex mutex;
  static std::deque<std::pair<std::string, Nccl>> loaded;  // collectives keep references: a deque keeps them valid
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [path, n] : loaded)
    if (path == library) return n;
  const char* name = library.empty() ? "libnccl.so.2" : library.c_str();
  void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    fail<DistributedError>("cannot load NCCL (", name, "): ", dlerror(),
                           "; install it with pip install 'mpsx[cuda]' (the nvidia-nccl-cu13 wheel)");
  Nccl n{};
  auto symbol = [&](auto& function, const char* symbol_name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, symbol_name));
    if (!function) fail<DistributedError>("NCCL at ", name, " has no ", symbol_name);
  };
  symbol(n.get_unique_id, "ncclGetUniqueId");
  symbol(n.comm_init_rank, "ncclCommInitRank");
  symbol(n.all_reduce, "ncclAllReduce");
  symbol(n.comm_abort, "ncclCommAbort");
  symbol(n.comm_destroy, "ncclCommDestroy");
  symbol(n.comm_get_async_error, "ncclCommGetAsyncError");
  symbol(n.get_error_string, "ncclGetErrorString");
  loaded.emplace_back(library, n);
  return loaded.back().second;
}

void check_nccl(const Nccl& n, NcclResult result, const char* call) {
  if (result != kNcclSuccess && result != kNcclInProgress)
    fail<DistributedError>(call, " failed: ", n.get_error_string(result));
}

// ncclCommInitRank, which waits for every rank, on a thread of its own that
// is given up on after the timeout. One given up on may still be inside NCCL
// when the process exits: it counts in detail::abandoned_threads, so that the
// exit ends the process before NCCL's destructors, and aborts a group it
// joins late. One that finishes in time is joined, so that no thread of it
// runs on while the process exits.
NcclComm join_group(const Nccl& n, int ordinal, const NcclUniqueId& id, int rank, int world,
                    std::chrono::duration<double> timeout, double timeout_seconds) {
  struct Joining {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false, abandoned = false;
    NcclResult result = kNcclSuccess;
    NcclComm comm = nullptr;
  };
  auto joining = std::make_shared<Joining>();
  std::thread thread([joining, n = &n, ordinal, id, rank, world] {
    NcclComm comm = nullptr;
    NcclResult result;
    {
      DeviceScope scope(ordinal);
      result = n->comm_init_rank(&comm, world, id, rank);
    }
    std::lock_guard<std::mutex> lock(joining->mutex);
    if (joining->abandoned) {
      if (comm) n->comm_abort(comm);
      return;
    }
    joining->result = result;
    joining->comm = comm;
    joining->done = true;
    joining->finished.notify_one();
  });
  std::unique_lock<std::mutex> lock(joining->mutex);
  if (!joining->finished.wait_for(lock, timeout, [&] { return joining->done; })) {
    joining->abandoned = true;
    detail::abandoned_threads.fetch_add(1);
    lock.unlock();
    thread.detach();
    fail<DistributedError>("NCCL: rank ", rank, " of ", world, " could not join the group within ", timeout_seconds,
                           " s: did every rank start, with the same group id?");
  }
  lock.unlock();
  thread.join();
  check_nccl(n, joining->result, "ncclCommInitRank");
  return joining->comm;
}

class NcclCollective final : public CollectivePrimitive {
 public:
  NcclCollective(const CudaBackend& backend, const CollectiveDescriptor& d)
      : nccl_(nccl(d.library)), ordinal_(backend.ordinal()), rank_(d.rank), world_size_(d.world_size),
        timeout_(std::chrono::duration<double>(d.timeout_seconds)) {
    if (d.unique_id.size() != sizeof(NcclUniqueId))
      fail<ArgumentError>("NCCL: expected the group's unique id of ", sizeof(NcclUniqueId), " bytes (rank 0's "
                          "new_group_id), given ", d.unique_id.size());
    NcclUniqueId id;
    std::memcpy(id.internal, d.unique_id.data(), sizeof id.internal);
    comm_ = join_group(nccl_, ordinal_, id, rank_, world_size_, timeout_, d.timeout_seconds);
    {
      DeviceScope scope(ordinal_);
      MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    }
    watchdog_ = std::thread([this] {
      DeviceScope scope(ordinal_);
      watch();
    });
  }

  ~NcclCollective() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    cudaEventDestroy(done_);
    if (aborted_) return;
    nccl_.comm_destroy(comm_);
  }

  void all_reduce(ExecutionContext& context, float* data, size_t count, ReduceOperation operation) override {
    if (aborted_) fail<DistributedError>(error());
    launch(data, count, operation, context_of(context).stream());
  }

  // Through device memory of its own, waited for on the host: this runs on a layout's first run only, never
  // inside a CUDA graph (captured on a replay).
  void all_reduce_on_host(ExecutionContext& context, float* values, size_t count) override {
    if (aborted_) fail<DistributedError>(error());
    cudaStream_t stream = context_of(context).stream();
    const size_t bytes = count * sizeof(float);
    void* device = nullptr;
    MPSX_CUDA_CHECK(cudaMallocAsync(&device, bytes, stream));
    struct Free {
      void* device;
      cudaStream_t stream;
      ~Free() { cudaFreeAsync(device, stream); }
    } free_device{device, stream};
    MPSX_CUDA_CHECK(cudaMemcpyAsync(device, values, bytes, cudaMemcpyHostToDevice, stream));
    launch(static_cast<float*>(device), count, ReduceOperation::Sum, stream);
    // Both wait for the collective, which the watchdog ends if a peer never comes.
    const cudaError_t copied = cudaMemcpyAsync(values, device, bytes, cudaMemcpyDeviceToHost, stream);
    const cudaError_t waited = cudaStreamSynchronize(stream);
    if (aborted_) fail<DistributedError>(error());
    MPSX_CUDA_CHECK(copied);
    MPSX_CUDA_CHECK(waited);
  }

  void check() override {
    if (aborted_) fail<DistributedError>(error());
  }

 private:
  void launch(float* data, size_t count, ReduceOperation operation, cudaStream_t stream) {
    launching_since_ = std::chrono::steady_clock::now().time_since_epoch().count();
    NcclResult result = nccl_.all_reduce(data, data, count, kNcclFloat32,
                                         operation == ReduceOperation::Mean ? kNcclAvg : kNcclSum, comm_, stream);
    launching_since_ = 0;
    if (aborted_) fail<DistributedError>(error());  // the watchdog ended a call that waited for a peer
    check_nccl(nccl_, result, "ncclAllReduce");
    // Captured into a CUDA graph, the record only orders the capture: the watchdog sees the collectives
    // of the first run of a replayable command buffer, not of its replays.
    MPSX_CUDA_CHECK(cudaEventRecord(done_, stream));
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping_ || aborted_) continue;
      NcclResult async = kNcclSuccess;
      nccl_.comm_get_async_error(comm_, &async);
      const auto now = std::chrono::steady_clock::now();
      if (cudaEventQuery(done_) == cudaErrorNotReady) {
        if (!waiting_) since_ = now;
        waiting_ = true;
      } else {
        waiting_ = false;
      }
      std::string why;
      if (async != kNcclSuccess && async != kNcclInProgress) {
        why = std::string("NCCL failed: ") + nccl_.get_error_string(async);
      } else if ((waiting_ && now - since_ > timeout_) ||
                 (launching_since_ && now.time_since_epoch().count() - launching_since_ >
                                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_)
                                              .count())) {
        why = "an NCCL all-reduce of rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) +
              " did not finish within " + std::to_string(timeout_.count()) +
              " s: a peer died or stopped taking part; the group is aborted";
      }
      if (why.empty()) continue;
      error_ = why;
      aborted_ = true;
      lock.unlock();
      nccl_.comm_abort(comm_);  // ends the kernels still waiting for the peer
      lock.lock();
    }
  }

  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  const Nccl& nccl_;
  int ordinal_;
  int rank_, world_size_;
  std::chrono::duration<double> timeout_;
  NcclComm comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::string error_;
  cudaEvent_t done_ = nullptr;  // recorded after each collective
  // When the launch under way began (steady_clock ticks), 0 when none is.
  std::atomic<int64_t> launching_since_{0};
  bool waiting_ = false;        // since_ when the watchdog first saw it unfinished
  std::chrono::steady_clock::time_point since_;
  std::thread watchdog_;
};

class NcclGroupId final : public GroupIdPrimitive {
 public:
  explicit NcclGroupId(std::string library) : library_(std::move(library)) {}
  std::string make() override {
    const Nccl& n = nccl(library_);
    NcclUniqueId id;
    check_nccl(n, n.get_unique_id(&id), "ncclGetUniqueId");
    return std::string(id.internal, sizeof id.internal);
  }

 private:
  std::string library_;
};

std::unique_ptr<CollectivePrimitive> make_collective(Backend& backend, const CollectiveDescriptor& descriptor) {
  return std::make_unique<NcclCollective>(static_cast<CudaBackend&>(backend), descriptor);
}

std::unique_ptr<GroupIdPrimitive> make_group_id(Backend&, const std::string& library) {
  return std::make_unique<NcclGroupId>(library);
}

const RegisterPrimitive<CollectivePrimitive> registered("cuda", make_collective);
const RegisterPrimitive<GroupIdPrimitive> registered_id("cuda", make_group_id);

}  // namespace
}  // namespace mpsx::cuda

// The cuda backend: cuDNN and cuBLAS for what they do well, CUDA kernels
// (the .cu files) for the rest, over NHWC images. A command queue is a CUDA
// stream: commit launches the command buffer's work on it, and a thread per
// queue finishes command buffers as their events complete.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "buffer.cuh"
#include "mpsx/backend.h"
#include "mpsx/registry.h"
#include "mpsx/command_buffer.h"

namespace mpsx::cuda {

// Throw an mpsx error naming the call and the library's message:
// OutOfMemoryError for out of memory, Error otherwise.
void check(cudaError_t status, const char* call);
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
#define MPSX_CUDA_CHECK(call) ::mpsx::cuda::check((call), #call)

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal);
  const char* kind() const override { return "cuda"; }
  std::string device_name() const override { return "cuda:" + std::to_string(ordinal_); }
  void* allocate(size_t bytes) override;
  void deallocate(void* data, size_t bytes) override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_from_host(void* device, const void* host, size_t bytes) override;
  void fill_zero(void* device, size_t bytes) override;
  void read_region(const ImageRegion& device, const ImageRegion& host) override;
  void write_region(const ImageRegion& host, const ImageRegion& device) override;
  void wait_for_host_writes() override;
  ImageLayout image_layout(const ImageDescriptor& descriptor) const override;
  dlpack::DLDevice dlpack_device() const override { return {dlpack::kDLCUDA, ordinal_}; }
  bool runs_on_foreign_memory() const override { return true; }
  void copy_device_region(const ImageRegion& from, const ImageRegion& to) override;
  int64_t import_stream() override;
  void order_after_import() override;
  void order_stream_after_host_writes(int64_t stream) override;
  void check_foreign_stream(int64_t stream) const override;
  BackendLimits limits() const override {
    BackendLimits limits;
    // channel_tiling (channels.cuh): 32 channels a block row,
    // the tiles of channels on grid y, which has at most 65535 blocks.
    limits.summed_feature_channels = int64_t{65535} * 32;
    // pooling.cu keeps the chosen tap of a window as an int32_t.
    limits.max_pooling_gradient_taps = INT32_MAX;
    return limits;
  }
  std::unique_ptr<Executor> new_executor() override;
  // Makes `stream`'s later work wait for the host writes enqueued since
  // `seen` was last passed here.
  void order_after_host_writes(cudaStream_t stream, uint64_t& seen);

  int ordinal() const { return ordinal_; }

 private:
  // With the transfer mutex held: the transfer stream, made on first use;
  // device memory laid out as `host` on it.
  cudaStream_t transfer_stream();
  ImageRegion staged(const ImageRegion& host);
  // With the transfer mutex held: the next page-locked block, holding at
  // least `bytes`, once the copy out of it that was enqueued last has
  // completed.
  struct PinnedBlock {
    void* data = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;
  };
  PinnedBlock& pinned_block(size_t bytes);
  // A host write enqueued on the transfer stream, not waited for.
  void enqueued_host_write() { ++host_writes_; }
  // After a wait for the transfer stream.
  void transfers_done() { host_writes_done_ = host_writes_; }
  // With the transfer mutex held: launches the zero fills gathered so far.
  void launch_zero_fills();

  int ordinal_;
  // Host copies go on a stream of their own. Image regions convert on the
  // device through a staging block. Fills and writes from pageable memory
  // return without waiting: the host memory was copied by then, and queues
  // wait for host_writes_event_ on the device. They live as long as the
  // process, as the query handles do.
  std::mutex transfer_mutex_;
  cudaStream_t transfer_stream_ = nullptr;
  void* transfer_staging_ = nullptr;
  size_t transfer_bytes_ = 0;
  cudaEvent_t host_writes_event_ = nullptr;
  uint64_t host_writes_ = 0, host_writes_recorded_ = 0, host_writes_done_ = 0;
  // Zero fills of new buffers of up to kGatheredFillBytes (the vectors of a
  // normalization state, made on every encode) are gathered and launched
  // together when the transfer stream is next used: a cudaMemsetAsync each
  // would cost more host time than the rest of the state's making.
  static constexpr size_t kGatheredFillBytes = size_t{64} << 10;
  BufferCopies zero_fills_;
  // Image writes of up to kPinnedWriteBytes are copied into one of these
  // page-locked blocks in turn and go on from there: the host returns once
  // its memory is copied, and the device copy (a DMA, no pageable staging in
  // the driver) runs while the host and earlier device work go on.
  static constexpr size_t kPinnedWriteBytes = size_t{64} << 20;
  PinnedBlock pinned_[4];
  size_t next_pinned_ = 0;
};

// The registration of a family's implementation I of P on this backend
// (mpsx::Registered, registry.h).
template <class P, class I>
using Registered = mpsx::Registered<P, I, CudaBackend>;

// Makes `ordinal` the calling thread's current device for the scope.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

// Constant tables a primitive copies to the device once, when it is built
// (once per shape), and frees with it, also when its constructor throws
// halfway.
class DeviceTables {
 public:
  explicit DeviceTables(int ordinal) : ordinal_(ordinal) {}
  ~DeviceTables() {
    DeviceScope scope(ordinal_);
    for (void* p : tables_) cudaFree(p);
  }
  DeviceTables(const DeviceTables&) = delete;
  DeviceTables& operator=(const DeviceTables&) = delete;

  // A device copy of `count` elements at `host`, on the current device.
  template <class T>
  const T* upload(const T* host, size_t count) {
    const size_t bytes = count * sizeof(T);
    void* device = nullptr;
    MPSX_CUDA_CHECK(cudaMalloc(&device, bytes > 0 ? bytes : 1));
    tables_.push_back(device);
    if (bytes > 0) MPSX_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return static_cast<const T*>(device);
  }
  template <class T>
  const T* upload(const std::vector<T>& host) {
    return upload(host.data(), host.size());
  }

 private:
  int ordinal_;
  std::vector<void*> tables_;
};

// Device memory a launch reads or writes.
struct DeviceSpan {
  const void* data = nullptr;
  size_t bytes = 0;
};

// What commands get while a cuda queue launches them: the queue's stream,
// its library handles and scratch memory.
class CudaContext final : public ExecutionContext {
 public:
  explicit CudaContext(int ordinal);
  ~CudaContext() override;
  void copy(void* destination, const void* source, size_t bytes) override;
  void copy_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch, size_t bytes,
                 size_t rows) override;
  void fill_zero(void* destination, size_t bytes) override;
  void run_recording(CommandBuffer& recorded) override;

  int ordinal() const { return ordinal_; }
  // The queue's stream as it is, for other threads: copies still pending
  // stay so.
  cudaStream_t stream_handle() const { return lanes_[0].stream; }
  // The stream launches go on now (the queue's, or the side stream within
  // run_concurrently's second half), every copy asked for so far launched
  // on it.
  cudaStream_t stream() {
    flush_copies();
    return lanes_[lane_].stream;
  }
  // `second` on a side stream forked from the queue's stream, beside
  // `first` on the queue's stream, joined back before it returns; in a
  // replayed command buffer's CUDA graph, two branches.
  void run_concurrently(FunctionRef first, FunctionRef second) override;
  // Overlapped work goes on a third stream, of the greatest priority, forked
  // from the queue's at each begin_overlapped and joined back at
  // join_overlapped.
  void begin_overlapped() override;
  void end_overlapped() override;
  void join_overlapped() noexcept override;
  // The stream for a launch that reads and writes nothing but `spans`: the
  // copies asked for so far that touch none of them stay pending, so that
  // the copies on either side of the launch still go in one launch.
  cudaStream_t stream_touching(const DeviceSpan* spans, size_t count);
  cudnnHandle_t cudnn();
  cublasHandle_t cublas();
  // Small copies wait until other work is launched, so that those in a row
  // go in one launch.
  void flush_copies();
  // Device scratch memory of the queue: slot i stays valid until the next
  // request for slot i. Work on the stream is ordered, so reuse is safe;
  // the side stream has slots of its own.
  void* scratch(size_t slot, size_t bytes);
  // Changes whenever a scratch block moves: CUDA graphs captured before
  // refer to freed memory then.
  uint64_t scratch_generation() const { return scratch_generation_; }

 private:
  // Lane `lane`'s stream waits for the queue's work launched so far.
  void fork_lane(int lane);
  // Back on the queue's stream, after lane `lane`'s work.
  void join_lane(int lane) noexcept;

  int ordinal_;
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // The queue's stream (0), the side stream (1) and the overlapped stream
  // (2), the last two made on first use, each with its library handles and
  // scratch blocks.
  struct Lane {
    cudaStream_t stream = nullptr;
    cudnnHandle_t cudnn = nullptr;
    cublasHandle_t cublas = nullptr;
    cudaEvent_t forked = nullptr, joined = nullptr;
    std::vector<Block> scratch;
  };
  Lane lanes_[3];
  int lane_ = 0;
  bool overlapped_unjoined_ = false;  // work launched on lane 2 since the last join
  uint64_t scratch_generation_ = 0;
  BufferCopies copies_;
};

inline CudaContext& context_of(ExecutionContext& context) { return static_cast<CudaContext&>(context); }

// A float32 view of an image region on the device: the region itself when it
// is float32, otherwise a converted copy in scratch that store() writes back.
class Float32Region {
 public:
  Float32Region(CudaContext& context, const ImageRegion& region, size_t slot, bool load);
  const ImageRegion& region() const { return view_; }
  float* data() const { return static_cast<float*>(view_.data); }
  void store() const;

 private:
  CudaContext& context_;
  ImageRegion original_;
  ImageRegion view_;
};

// For cuDNN's legacy normalizations (LRN, divisive normalization): a tensor
// descriptor of an image region, its strides included.
class RegionTensor {
 public:
  RegionTensor();
  ~RegionTensor();
  RegionTensor(const RegionTensor&) = delete;
  RegionTensor& operator=(const RegionTensor&) = delete;
  operator cudnnTensorDescriptor_t() const { return descriptor_; }
  // False when cuDNN cannot describe the region (its data type, int extents).
  bool set(const ImageRegion& region);

 private:
  cudnnTensorDescriptor_t descriptor_ = nullptr;
};

// What cuDNN's legacy LRN and divisive normalization run with: the LRN
// descriptor (a window of n and an encode's alpha, beta and k, set again
// only when they change) and the descriptors of up to four regions, set on
// first use (a primitive's regions keep their extents and strides). Once
// cuDNN refuses the regions, it answers false for good and the caller runs
// its own kernels. Guard it with `mutex`.
class CudnnNormalization {
 public:
  explicit CudnnNormalization(unsigned n);
  ~CudnnNormalization();
  CudnnNormalization(const CudnnNormalization&) = delete;
  CudnnNormalization& operator=(const CudnnNormalization&) = delete;
  // False where cuDNN does not take the parameters (CUDNN_LRN_MIN_K,
  // CUDNN_LRN_MIN_BETA) or the regions.
  bool prepare(float alpha, float beta, float k, std::initializer_list<const ImageRegion*> regions);
  // False, for good, when cuDNN refused a call's descriptors (before
  // launching anything); throws for other errors.
  bool ran(cudnnStatus_t status);

  std::mutex mutex;
  cudnnLRNDescriptor_t lrn = nullptr;
  RegionTensor tensors[4];

 private:
  unsigned n_;
  float alpha_ = -1.0f, beta_ = -1.0f, k_ = -1.0f;
  bool described_ = false, refused_ = false;
};

}  // namespace mpsx::cuda

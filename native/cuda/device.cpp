#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>

#include "backend.h"
#include "image.cuh"
#include "mpsx/errors.h"

namespace mpsx::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error state for the next call
  if (status == cudaErrorMemoryAllocation)
    fail<OutOfMemoryError>("out of memory on the cuda device: ", call, ": ", cudaGetErrorString(status));
  fail<Error>("CUDA error in ", call, ": ", cudaGetErrorString(status));
}

void check(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  if (status == CUDNN_STATUS_ALLOC_FAILED)
    fail<OutOfMemoryError>("out of memory on the cuda device: ", call, ": ", cudnnGetErrorString(status));
  char message[256] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  fail<Error>("cuDNN error in ", call, ": ", cudnnGetErrorString(status), message[0] ? " (" : "", message,
              message[0] ? ")" : "");
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  if (status == CUBLAS_STATUS_ALLOC_FAILED)
    fail<OutOfMemoryError>("out of memory on the cuda device: ", call, ": ", cublasGetStatusString(status));
  fail<Error>("cuBLAS error in ", call, ": ", cublasGetStatusString(status));
}

DeviceScope::DeviceScope(int ordinal) {
  MPSX_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != ordinal) MPSX_CUDA_CHECK(cudaSetDevice(ordinal));
}

DeviceScope::~DeviceScope() { cudaSetDevice(previous_); }

CudaBackend::CudaBackend(int ordinal) : ordinal_(ordinal) {}

void* CudaBackend::allocate(size_t bytes) {
  DeviceScope scope(ordinal_);
  void* data = nullptr;
  cudaError_t status = cudaMalloc(&data, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail<OutOfMemoryError>("out of memory: ", device_name(), " could not allocate ", bytes, " bytes");
  }
  check(status, "cudaMalloc");
  return data;
}

void CudaBackend::deallocate(void* data, size_t bytes) {
  DeviceScope scope(ordinal_);
  {
    // A gathered fill of freed memory is dropped: nothing reads it.
    std::lock_guard<std::mutex> lock(transfer_mutex_);
    int kept = 0;
    for (int k = 0; k < zero_fills_.count; ++k) {
      const auto* at = static_cast<const char*>(zero_fills_.destination[k]);
      if (at >= static_cast<const char*>(data) && at < static_cast<const char*>(data) + bytes) continue;
      zero_fills_.destination[kept] = zero_fills_.destination[k];
      zero_fills_.bytes[kept++] = zero_fills_.bytes[k];
    }
    zero_fills_.count = kept;
  }
  cudaFree(data);
}

void CudaBackend::copy_to_host(void* host, const void* device, size_t bytes) {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  MPSX_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, transfer_stream()));
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  transfers_done();
}

void CudaBackend::copy_from_host(void* device, const void* host, size_t bytes) {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  MPSX_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, transfer_stream()));
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  transfers_done();
}

void CudaBackend::fill_zero(void* device, size_t bytes) {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  if (bytes <= kGatheredFillBytes) {
    if (zero_fills_.count == BufferCopies::kMax) {
      DeviceScope scope(ordinal_);
      transfer_stream();
    }
    const int k = zero_fills_.count++;
    zero_fills_.destination[k] = device;
    zero_fills_.source[k] = nullptr;
    zero_fills_.bytes[k] = bytes;
  } else {
    DeviceScope scope(ordinal_);
    MPSX_CUDA_CHECK(cudaMemsetAsync(device, 0, bytes, transfer_stream()));
  }
  enqueued_host_write();
}

void CudaBackend::launch_zero_fills() {
  if (!zero_fills_.count) return;
  copy_buffers(zero_fills_, transfer_stream_);
  zero_fills_.count = 0;
  MPSX_CUDA_CHECK(cudaPeekAtLastError());
}

cudaStream_t CudaBackend::transfer_stream() {
  if (!transfer_stream_) {
    MPSX_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_stream_, cudaStreamNonBlocking));
    MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&host_writes_event_, cudaEventDisableTiming));
  }
  // Gathered fills first: whatever goes on the stream next may read or
  // overwrite their memory.
  launch_zero_fills();
  return transfer_stream_;
}

ImageRegion CudaBackend::staged(const ImageRegion& host) {
  transfer_stream();
  const size_t bytes = static_cast<size_t>(host.span()) * size_of(host.data_type);
  if (bytes > transfer_bytes_) {
    if (transfer_staging_) MPSX_CUDA_CHECK(cudaFree(transfer_staging_));
    transfer_staging_ = nullptr;
    transfer_bytes_ = 0;
    transfer_staging_ = allocate(bytes);
    transfer_bytes_ = bytes;
  }
  ImageRegion region = host;
  region.data = transfer_staging_;
  return region;
}

void CudaBackend::read_region(const ImageRegion& device, const ImageRegion& host) {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  const ImageRegion staging = staged(host);
  copy_region(device, staging, transfer_stream_);
  MPSX_CUDA_CHECK(cudaMemcpyAsync(host.data, staging.data, static_cast<size_t>(host.span()) * size_of(host.data_type),
                                  cudaMemcpyDeviceToHost, transfer_stream_));
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  transfers_done();
}

CudaBackend::PinnedBlock& CudaBackend::pinned_block(size_t bytes) {
  PinnedBlock& block = pinned_[next_pinned_++ % std::size(pinned_)];
  if (!block.copied) MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&block.copied, cudaEventDisableTiming));
  MPSX_CUDA_CHECK(cudaEventSynchronize(block.copied));
  if (bytes > block.bytes) {
    if (block.data) MPSX_CUDA_CHECK(cudaFreeHost(block.data));
    block.data = nullptr;
    block.bytes = 0;
    MPSX_CUDA_CHECK(cudaHostAlloc(&block.data, bytes, cudaHostAllocDefault));
    block.bytes = bytes;
  }
  return block;
}

void CudaBackend::write_region(const ImageRegion& host, const ImageRegion& device) {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  const ImageRegion staging = staged(host);
  const size_t bytes = static_cast<size_t>(host.span()) * size_of(host.data_type);
  if (bytes <= kPinnedWriteBytes) {
    PinnedBlock& block = pinned_block(bytes);
    std::memcpy(block.data, host.data, bytes);
    MPSX_CUDA_CHECK(cudaMemcpyAsync(staging.data, block.data, bytes, cudaMemcpyHostToDevice, transfer_stream_));
    MPSX_CUDA_CHECK(cudaEventRecord(block.copied, transfer_stream_));
    copy_region(staging, device, transfer_stream_);
    enqueued_host_write();
    return;
  }
  MPSX_CUDA_CHECK(cudaMemcpyAsync(staging.data, host.data, bytes, cudaMemcpyHostToDevice, transfer_stream_));
  copy_region(staging, device, transfer_stream_);
  // From page-locked memory the copy is still under way: the caller may
  // change that memory on return.
  cudaPointerAttributes attributes{};
  MPSX_CUDA_CHECK(cudaPointerGetAttributes(&attributes, host.data));
  if (attributes.type == cudaMemoryTypeUnregistered) {
    enqueued_host_write();
    return;
  }
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  transfers_done();
}

void CudaBackend::wait_for_host_writes() {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  if (host_writes_done_ == host_writes_) return;
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream()));
  transfers_done();
}

void CudaBackend::order_after_host_writes(cudaStream_t stream, uint64_t& seen) {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  if (seen == host_writes_) return;
  if (host_writes_recorded_ != host_writes_) {
    cudaStream_t transfer = transfer_stream();  // made first, with host_writes_event_
    MPSX_CUDA_CHECK(cudaEventRecord(host_writes_event_, transfer));
    host_writes_recorded_ = host_writes_;
  }
  MPSX_CUDA_CHECK(cudaStreamWaitEvent(stream, host_writes_event_, 0));
  seen = host_writes_;
}

void CudaBackend::copy_device_region(const ImageRegion& from, const ImageRegion& to) {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  // On the transfer stream, after host writes and imports; waited for, since
  // the other library may reuse its memory once this returns.
  copy_region(from, to, transfer_stream());
  MPSX_CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  transfers_done();
}

int64_t CudaBackend::import_stream() {
  DeviceScope scope(ordinal_);
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  return reinterpret_cast<int64_t>(transfer_stream());
}

void CudaBackend::order_after_import() {
  std::lock_guard<std::mutex> lock(transfer_mutex_);
  enqueued_host_write();
}

void CudaBackend::check_foreign_stream(int64_t stream) const {
  // The legacy and the per-thread default streams are handles of their own.
  if (stream == 1 || stream == 2) return;
  // Any other is the address of the driver's stream object: one that is not
  // mapped memory is refused before the driver reads it. A mapped address
  // that is no stream is left to the driver, which answers an error for what
  // it recognizes as no handle of its own.
  const long page = sysconf(_SC_PAGESIZE);
  unsigned char resident = 0;
  void* first = reinterpret_cast<void*>(static_cast<uintptr_t>(stream) & ~static_cast<uintptr_t>(page - 1));
  int device = -1;
  if (stream < page || mincore(first, 1, &resident) != 0 ||
      cudaStreamGetDevice(reinterpret_cast<cudaStream_t>(stream), &device) != cudaSuccess) {
    cudaGetLastError();
    fail<ArgumentError>("stream must be None, -1, 1 (the legacy default stream), 2 (the per-thread default stream) "
                        "or a CUDA stream handle of this process; ", stream, " is none");
  }
  if (device != ordinal_)
    fail<ArgumentError>("stream ", stream, " is a stream of cuda:", device, ", not of ", device_name());
}

void CudaBackend::order_stream_after_host_writes(int64_t stream) {
  DeviceScope scope(ordinal_);
  uint64_t seen = 0;
  order_after_host_writes(reinterpret_cast<cudaStream_t>(stream), seen);
}

ImageLayout CudaBackend::image_layout(const ImageDescriptor& d) const {
  // NHWC: what cuDNN's fast convolutions and tensor cores work in.
  return ImageLayout{d.height * d.width * d.feature_channels, 1, d.width * d.feature_channels, d.feature_channels};
}

CudaContext::CudaContext(int ordinal) : ordinal_(ordinal) {
  DeviceScope scope(ordinal_);
  // Non-blocking: host copies on the default stream neither wait for nor
  // hold up the queue's work, as on the other backends.
  MPSX_CUDA_CHECK(cudaStreamCreateWithFlags(&lanes_[0].stream, cudaStreamNonBlocking));
}

CudaContext::~CudaContext() {
  DeviceScope scope(ordinal_);
  for (Lane& lane : lanes_) {
    if (!lane.stream) continue;
    cudaStreamSynchronize(lane.stream);
    for (auto& b : lane.scratch) cudaFree(b.data);
    if (lane.cublas) cublasDestroy(lane.cublas);
    if (lane.cudnn) cudnnDestroy(lane.cudnn);
    for (cudaEvent_t event : {lane.forked, lane.joined})
      if (event) cudaEventDestroy(event);
    cudaStreamDestroy(lane.stream);
  }
}

void CudaContext::fork_lane(int lane) {
  Lane& forked = lanes_[lane];
  if (!forked.stream) {
    // The overlapped lane's collectives at the greatest priority: waiting for
    // the SMs until the backward pass's kernels drain would hold every rank.
    int least = 0, greatest = 0;
    if (lane == 2) MPSX_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    MPSX_CUDA_CHECK(cudaStreamCreateWithPriority(&forked.stream, cudaStreamNonBlocking, lane == 2 ? greatest : 0));
    MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&forked.forked, cudaEventDisableTiming));
    MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&forked.joined, cudaEventDisableTiming));
  }
  MPSX_CUDA_CHECK(cudaEventRecord(forked.forked, stream()));
  MPSX_CUDA_CHECK(cudaStreamWaitEvent(forked.stream, forked.forked, 0));
}

void CudaContext::join_lane(int lane) noexcept {
  if (lane_ == lane) {
    try {
      flush_copies();
    } catch (...) {  // the command that failed reports the error
    }
    lane_ = 0;
  }
  // A capture ends with every stream it forked joined back.
  cudaEventRecord(lanes_[lane].joined, lanes_[lane].stream);
  cudaStreamWaitEvent(lanes_[0].stream, lanes_[lane].joined, 0);
}

void CudaContext::run_concurrently(FunctionRef first, FunctionRef second) {
  if (lane_ != 0) {  // within a second half already
    first();
    second();
    return;
  }
  fork_lane(1);
  // Joined however the halves end: a capture fails on a stream left forked.
  struct Join {
    CudaContext& context;
    ~Join() { context.join_lane(1); }
  } join{*this};
  first();
  flush_copies();
  lane_ = 1;
  second();
}

void CudaContext::begin_overlapped() {
  if (lane_ != 0) return;  // within run_concurrently's second half: in order there
  fork_lane(2);
  lane_ = 2;
  overlapped_unjoined_ = true;
}

void CudaContext::end_overlapped() {
  if (lane_ != 2) return;
  flush_copies();
  lane_ = 0;
}

void CudaContext::join_overlapped() noexcept {
  if (!overlapped_unjoined_) return;
  overlapped_unjoined_ = false;
  join_lane(2);
}

namespace {

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

void CudaContext::copy(void* destination, const void* source, size_t bytes) {
  if (bytes >= (size_t(1) << 20)) {  // bandwidth, not launches, is what counts
    MPSX_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  // Copies launched together run in any order: one that reads or writes
  // what a pending one writes, or writes what it reads, waits for it.
  bool depends = copies_.count == BufferCopies::kMax;
  for (int k = 0; k < copies_.count && !depends; ++k)
    depends = overlap(source, bytes, copies_.destination[k], copies_.bytes[k]) ||
              overlap(destination, bytes, copies_.destination[k], copies_.bytes[k]) ||
              overlap(destination, bytes, copies_.source[k], copies_.bytes[k]);
  if (depends) flush_copies();
  copies_.destination[copies_.count] = destination;
  copies_.source[copies_.count] = source;
  copies_.bytes[copies_.count] = bytes;
  ++copies_.count;
}

cudaStream_t CudaContext::stream_touching(const DeviceSpan* spans, size_t count) {
  // Conservative: the launch may write any span, so a copy that reads one waits too.
  for (int k = 0; k < copies_.count; ++k)
    for (const DeviceSpan* s = spans; s != spans + count; ++s)
      if (s->data && (overlap(s->data, s->bytes, copies_.destination[k], copies_.bytes[k]) ||
                      overlap(s->data, s->bytes, copies_.source[k], copies_.bytes[k])))
        return stream();
  return lanes_[lane_].stream;
}

void CudaContext::flush_copies() {
  if (copies_.count == 0) return;
  const BufferCopies copies = copies_;
  copies_.count = 0;
  copy_buffers(copies, lanes_[lane_].stream);
  MPSX_CUDA_CHECK(cudaPeekAtLastError());
}

void CudaContext::copy_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch,
                            size_t bytes, size_t rows) {
  MPSX_CUDA_CHECK(cudaMemcpy2DAsync(destination, destination_pitch, source, source_pitch, bytes, rows,
                                    cudaMemcpyDeviceToDevice, stream()));
}

void CudaContext::fill_zero(void* destination, size_t bytes) {
  MPSX_CUDA_CHECK(cudaMemsetAsync(destination, 0, bytes, stream()));
}

cudnnHandle_t CudaContext::cudnn() {
  flush_copies();
  Lane& lane = lanes_[lane_];
  if (!lane.cudnn) {
    MPSX_CUDA_CHECK(cudnnCreate(&lane.cudnn));
    MPSX_CUDA_CHECK(cudnnSetStream(lane.cudnn, lane.stream));
  }
  return lane.cudnn;
}

cublasHandle_t CudaContext::cublas() {
  flush_copies();
  Lane& lane = lanes_[lane_];
  if (!lane.cublas) {
    MPSX_CUDA_CHECK(cublasCreate(&lane.cublas));
    MPSX_CUDA_CHECK(cublasSetStream(lane.cublas, lane.stream));
  }
  return lane.cublas;
}

void* CudaContext::scratch(size_t slot, size_t bytes) {
  std::vector<Block>& blocks = lanes_[lane_].scratch;
  if (slot >= blocks.size()) blocks.resize(slot + 1);
  Block& b = blocks[slot];
  if (b.bytes < bytes) {
    // The old block may still be read by launched work: free it after that.
    if (b.data) {
      for (const Lane& lane : lanes_)
        if (lane.stream) MPSX_CUDA_CHECK(cudaStreamSynchronize(lane.stream));
      cudaFree(b.data);
      b.data = nullptr;
      b.bytes = 0;
      ++scratch_generation_;
    }
    size_t rounded = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);
    cudaError_t status = cudaMalloc(&b.data, rounded);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      fail<OutOfMemoryError>("out of memory: cuda:", ordinal_, " could not allocate ", bytes, " bytes of scratch");
    }
    check(status, "cudaMalloc");
    b.bytes = rounded;
  }
  return b.data;
}

Float32Region::Float32Region(CudaContext& context, const ImageRegion& region, size_t slot, bool load)
    : context_(context), original_(region), view_(region) {
  if (region.data_type == DataType::Float32) return;
  view_.data_type = DataType::Float32;
  view_.stride = ImageLayout{region.h * region.w * region.c, 1, region.w * region.c, region.c};
  view_.data = context.scratch(slot, static_cast<size_t>(region.element_count()) * sizeof(float));
  if (load) copy_region(original_, view_, context.stream());
}

void Float32Region::store() const {
  if (original_.data_type != DataType::Float32) copy_region(view_, original_, context_.stream());
}

namespace {
std::vector<std::unique_ptr<Backend>> enumerate() {
  std::vector<std::unique_ptr<Backend>> list;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {  // no driver or no GPU
    cudaGetLastError();
    report_backend_unavailable("cuda", std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status));
    return list;
  }
  for (int i = 0; i < count; ++i) list.push_back(std::make_unique<CudaBackend>(i));
  return list;
}
// GPUs rank above the cpu.
const bool registered = (register_backend(10, &enumerate), true);
}  // namespace

RegionTensor::RegionTensor() { MPSX_CUDA_CHECK(cudnnCreateTensorDescriptor(&descriptor_)); }

RegionTensor::~RegionTensor() { cudnnDestroyTensorDescriptor(descriptor_); }

bool RegionTensor::set(const ImageRegion& r) {
  const int64_t values[] = {r.n, r.c, r.h, r.w, r.stride.n, r.stride.c, r.stride.h, r.stride.w};
  for (int64_t v : values)
    if (v > INT_MAX) return false;
  if (r.data_type != DataType::Float32 && r.data_type != DataType::Float16) return false;
  const cudnnDataType_t type = r.data_type == DataType::Float32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_HALF;
  return cudnnSetTensor4dDescriptorEx(descriptor_, type, int(r.n), int(r.c), int(r.h), int(r.w), int(r.stride.n),
                                      int(r.stride.c), int(r.stride.h), int(r.stride.w)) == CUDNN_STATUS_SUCCESS;
}

CudnnNormalization::CudnnNormalization(unsigned n) : n_(n) { MPSX_CUDA_CHECK(cudnnCreateLRNDescriptor(&lrn)); }

CudnnNormalization::~CudnnNormalization() { cudnnDestroyLRNDescriptor(lrn); }

bool CudnnNormalization::prepare(float alpha, float beta, float k, std::initializer_list<const ImageRegion*> regions) {
  if (refused_ || !(k >= CUDNN_LRN_MIN_K && beta >= CUDNN_LRN_MIN_BETA)) return false;
  if (!described_) {
    size_t i = 0;
    for (const ImageRegion* r : regions)
      if (!tensors[i++].set(*r)) return !(refused_ = true);
    described_ = true;
  }
  if (alpha == alpha_ && beta == beta_ && k == k_) return true;
  if (cudnnSetLRNDescriptor(lrn, n_, alpha, beta, k) != CUDNN_STATUS_SUCCESS) return false;
  alpha_ = alpha, beta_ = beta, k_ = k;
  return true;
}

bool CudnnNormalization::ran(cudnnStatus_t status) {
  if (status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_BAD_PARAM) return !(refused_ = true);
  MPSX_CUDA_CHECK(status);
  return true;
}

}  // namespace mpsx::cuda

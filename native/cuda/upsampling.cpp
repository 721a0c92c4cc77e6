#include "mpsx/kernels/upsampling.h"
#include "mpsx/registry.h"

#include <vector>

#include "backend.h"
#include "upsampling.cuh"

namespace mpsx::cuda {
namespace {

// The per-axis tables of one pass, copied to the device once when the
// primitive is built (once per shape).
class CudaUpsampling final : public UpsamplingPrimitive {
 public:
  CudaUpsampling(const CudaBackend& backend, const UpsamplingDescriptor& d) : ordinal_(backend.ordinal()) {
    std::vector<UpsamplingTap> taps_x =
        upsampling_taps(d.kind, d.align_corners, d.scale_x, d.source_width, d.first_x, d.width);
    std::vector<UpsamplingTap> taps_y =
        upsampling_taps(d.kind, d.align_corners, d.scale_y, d.source_height, d.first_y, d.height);
    std::vector<int64_t> readers_x, readers_y;
    for (const auto& [begin, end] : upsampling_readers(taps_x, d.source_width)) {
      readers_x.push_back(begin);
      readers_x.push_back(end);
    }
    for (const auto& [begin, end] : upsampling_readers(taps_y, d.source_height)) {
      readers_y.push_back(begin);
      readers_y.push_back(end);
    }
    DeviceScope scope(ordinal_);
    tables_.taps_x = static_cast<const UpsamplingTap*>(upload(taps_x.data(), taps_x.size() * sizeof(UpsamplingTap)));
    tables_.taps_y = static_cast<const UpsamplingTap*>(upload(taps_y.data(), taps_y.size() * sizeof(UpsamplingTap)));
    tables_.readers_x = static_cast<const int64_t*>(upload(readers_x.data(), readers_x.size() * sizeof(int64_t)));
    tables_.readers_y = static_cast<const int64_t*>(upload(readers_y.data(), readers_y.size() * sizeof(int64_t)));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    upsampling_forward(tables_, source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    upsampling_gradient(tables_, source_gradient, destination_gradient, context_of(context).stream());
  }

 private:
  void* upload(const void* host, size_t bytes) {
    void* device = nullptr;
    MPSX_CUDA_CHECK(cudaMalloc(&device, bytes > 0 ? bytes : 1));
    allocations_.tables.push_back(device);
    if (bytes > 0) MPSX_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    return device;
  }

  // Frees the tables also when the constructor throws halfway.
  struct Allocations {
    int ordinal;
    std::vector<void*> tables;
    ~Allocations() {
      DeviceScope scope(ordinal);
      for (void* p : tables) cudaFree(p);
    }
  };

  int ordinal_;
  Allocations allocations_{ordinal_, {}};
  UpsamplingTables tables_;
};

const Registered<UpsamplingPrimitive, CudaUpsampling> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

#include "mpsx/kernels/scale.h"
#include "mpsx/registry.h"

#include <vector>

#include "backend.h"
#include "scale.cuh"

namespace mpsx::cuda {
namespace {

// The per-axis taps of one pass, copied to the device once when the
// primitive is built (once per shape and transform).
class CudaScale final : public ScalePrimitive {
 public:
  CudaScale(const CudaBackend& backend, const ScaleDescriptor& d) : ordinal_(backend.ordinal()) {
    const ScaleTaps x = scale_taps(d.kind, d.transform.scale_x, d.transform.translate_x, d.offset_x, d.source_width,
                                   d.first_x, d.width);
    const ScaleTaps y = scale_taps(d.kind, d.transform.scale_y, d.transform.translate_y, d.offset_y, d.source_height,
                                   d.first_y, d.height);
    DeviceScope scope(ordinal_);
    tables_.per_output_x = x.per_output;
    tables_.per_output_y = y.per_output;
    tables_.index_x = static_cast<const int64_t*>(upload(x.index.data(), x.index.size() * sizeof(int64_t)));
    tables_.index_y = static_cast<const int64_t*>(upload(y.index.data(), y.index.size() * sizeof(int64_t)));
    tables_.weight_x = static_cast<const float*>(upload(x.weight.data(), x.weight.size() * sizeof(float)));
    tables_.weight_y = static_cast<const float*>(upload(y.weight.data(), y.weight.size() * sizeof(float)));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    scale_forward(tables_, source, destination, context_of(context).stream());
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
  ScaleTables tables_;
};

const Registered<ScalePrimitive, CudaScale> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

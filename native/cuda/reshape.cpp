#include "mpsx/kernels/reshape.h"
#include "mpsx/registry.h"

#include <vector>

#include "backend.h"
#include "reshape.cuh"

namespace mpsx::cuda {
namespace {

// The pad tables of one pass, copied to the device once when the primitive
// is built (once per shape); a reshape needs none.
class CudaReshape final : public ReshapePrimitive {
 public:
  CudaReshape(const CudaBackend& backend, const ReshapeDescriptor& d) : kind_(d.kind), ordinal_(backend.ordinal()) {
    if (d.kind != ReshapeKind::Pad) return;
    DeviceScope scope(ordinal_);
    tables_.c = axis(pad_map(d.edge_mode, d.source_channels, d.first_channel, d.channels), d.source_channels);
    tables_.y = axis(pad_map(d.edge_mode, d.source_height, d.first_y, d.height), d.source_height);
    tables_.x = axis(pad_map(d.edge_mode, d.source_width, d.first_x, d.width), d.source_width);
    tables_.constant = d.edge_mode == EdgeMode::Constant;
    tables_.fill_value = d.fill_value;
    if (tables_.constant && d.fill_values)
      tables_.fill_values = static_cast<const float*>(
          upload(d.fill_values->data(), static_cast<size_t>(d.channels) * sizeof(float)));
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    if (kind_ == ReshapeKind::Pad)
      pad_forward(tables_, source, destination, context_of(context).stream());
    else
      reshape_copy(source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    if (kind_ == ReshapeKind::Pad)
      pad_gradient(tables_, source_gradient, destination_gradient, context_of(context).stream());
    else
      reshape_copy(source_gradient, destination_gradient, context_of(context).stream());
  }

 private:
  PadAxis axis(const std::vector<int64_t>& map, int64_t size) {
    PadReaders r = pad_readers(map, size);
    PadAxis a;
    a.map = static_cast<const int64_t*>(upload(map.data(), map.size() * sizeof(int64_t)));
    a.begin = static_cast<const int64_t*>(upload(r.begin.data(), r.begin.size() * sizeof(int64_t)));
    a.readers = static_cast<const int64_t*>(upload(r.readers.data(), r.readers.size() * sizeof(int64_t)));
    return a;
  }

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

  ReshapeKind kind_;
  int ordinal_;
  Allocations allocations_{ordinal_, {}};
  PadTables tables_;
};

const Registered<ReshapePrimitive, CudaReshape> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

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
  CudaUpsampling(const CudaBackend& backend, const UpsamplingDescriptor& d) : memory_(backend.ordinal()) {
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
    DeviceScope scope(backend.ordinal());
    tables_.taps_x = memory_.upload(taps_x);
    tables_.taps_y = memory_.upload(taps_y);
    tables_.readers_x = memory_.upload(readers_x);
    tables_.readers_y = memory_.upload(readers_y);
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    upsampling_forward(tables_, source, destination, context_of(context).stream());
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    upsampling_gradient(tables_, source_gradient, destination_gradient, context_of(context).stream());
  }

 private:
  DeviceTables memory_;
  UpsamplingTables tables_;
};

const Registered<UpsamplingPrimitive, CudaUpsampling> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

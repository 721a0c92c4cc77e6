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
  CudaReshape(const CudaBackend& backend, const ReshapeDescriptor& d) : kind_(d.kind), memory_(backend.ordinal()) {
    if (d.kind != ReshapeKind::Pad) return;
    DeviceScope scope(backend.ordinal());
    tables_.c = axis(pad_map(d.edge_mode, d.source_channels, d.first_channel, d.channels), d.source_channels);
    tables_.y = axis(pad_map(d.edge_mode, d.source_height, d.first_y, d.height), d.source_height);
    tables_.x = axis(pad_map(d.edge_mode, d.source_width, d.first_x, d.width), d.source_width);
    tables_.constant = d.edge_mode == EdgeMode::Constant;
    tables_.fill_value = d.fill_value;
    if (tables_.constant && d.fill_values)
      tables_.fill_values = memory_.upload(d.fill_values->data(), static_cast<size_t>(d.channels));
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
    a.map = memory_.upload(map);
    a.begin = memory_.upload(r.begin);
    a.readers = memory_.upload(r.readers);
    return a;
  }

  ReshapeKind kind_;
  DeviceTables memory_;
  PadTables tables_;
};

const Registered<ReshapePrimitive, CudaReshape> registered("cuda");

}  // namespace

}  // namespace mpsx::cuda

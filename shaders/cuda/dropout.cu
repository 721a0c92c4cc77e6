#include "dropout.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

__global__ void mask_kernel(DropoutGenerator generator, uint8_t* mask, int64_t height, int64_t width, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    const int64_t x = i % width, rows = i / width;
    const int64_t y = rows % height, c = rows / height;
    mask[i] = generator.kept(static_cast<uint64_t>(c), static_cast<uint64_t>(y), static_cast<uint64_t>(x)) ? 1 : 0;
  }
}

__global__ void apply_kernel(Extents<int64_t> e, Strided<int64_t> in, Strided<int64_t> out, const uint8_t* mask,
                             int64_t mask_height, int64_t mask_width, int64_t stride_x, int64_t stride_y,
                             int64_t stride_z, DropoutOrigin origin, float keep, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const int64_t mc = stride_z ? origin.channel + c : 0;
    const int64_t my = stride_y ? origin.y + row : 0;
    const int64_t mx = stride_x ? origin.x + column : 0;
    const bool kept = mask[(mc * mask_height + my) * mask_width + mx] != 0;
    out.store(out.at(image, c, row, column), kept ? in.load(in.at(image, c, row, column)) / keep : 0.0f);
  }
}

}  // namespace

void dropout_mask(const DropoutGenerator& generator, uint8_t* mask, int64_t channels, int64_t height, int64_t width,
                  cudaStream_t stream) {
  const int64_t count = channels * height * width;
  if (count == 0) return;
  mask_kernel<<<blocks_for(count), 256, 0, stream>>>(generator, mask, height, width, count);
}

void dropout_apply(const DropoutDescriptor& d, const ImageRegion& in, const ImageRegion& out, const uint8_t* mask,
                   int64_t mask_height, int64_t mask_width, const DropoutOrigin& origin, cudaStream_t stream) {
  const int64_t count = in.element_count();
  if (count == 0) return;
  apply_kernel<<<blocks_for(count), 256, 0, stream>>>(Extents<int64_t>(in), Strided<int64_t>(in),
                                                       Strided<int64_t>(out), mask, mask_height, mask_width,
                                                       d.mask_stride_x, d.mask_stride_y, d.mask_stride_z, origin,
                                                       d.keep_probability, count);
}

}  // namespace mpsx::cuda

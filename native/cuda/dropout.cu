#include "dropout.cuh"

#include "elements.cuh"

namespace mpsx::cuda {
namespace {

// One thread per Philox block of four mask bytes.
__global__ void mask_kernel(DropoutGenerator generator, uint8_t* mask, int64_t count) {
  const int64_t blocks = (count + 3) / 4;
  for (int64_t b = grid_first<int64_t>(); b < blocks; b += grid_step<int64_t>()) {
    const Philox4x32 words = generator.block(static_cast<uint64_t>(b));
    for (int64_t i = 0; i < 4 && 4 * b + i < count; ++i) mask[4 * b + i] = generator.kept(words.v[i]) ? 1 : 0;
  }
}

__global__ void apply_kernel(Extents<int64_t> e, Strided<int64_t> in, Strided<int64_t> out, const uint8_t* mask,
                             int64_t mask_channels, int64_t mask_height, int64_t mask_width, int64_t stride_x,
                             int64_t stride_y, int64_t stride_z, DropoutOrigin origin, float keep, int64_t count) {
  for (int64_t i = grid_first<int64_t>(); i < count; i += grid_step<int64_t>()) {
    int64_t image, row, column;
    const int64_t c = e.element(i, &image, &row, &column);
    const int64_t mn = origin.image + image;
    const int64_t mc = stride_z ? origin.channel + c : 0;
    const int64_t my = stride_y ? origin.y + row : 0;
    const int64_t mx = stride_x ? origin.x + column : 0;
    const bool kept = mask[((mn * mask_channels + mc) * mask_height + my) * mask_width + mx] != 0;
    out.store(out.at(image, c, row, column), kept ? in.load(in.at(image, c, row, column)) / keep : 0.0f);
  }
}

}  // namespace

void dropout_mask(const DropoutGenerator& generator, uint8_t* mask, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  mask_kernel<<<blocks_for((count + 3) / 4), 256, 0, stream>>>(generator, mask, count);
}

void dropout_apply(const DropoutDescriptor& d, const ImageRegion& in, const ImageRegion& out, const uint8_t* mask,
                   const DropoutGradientState& state, const DropoutOrigin& origin, cudaStream_t stream) {
  const int64_t count = in.element_count();
  if (count == 0) return;
  apply_kernel<<<blocks_for(count), 256, 0, stream>>>(
      Extents<int64_t>(in), Strided<int64_t>(in), Strided<int64_t>(out), mask, state.mask_channels(),
      state.mask_height(), state.mask_width(), d.mask_stride_x, d.mask_stride_y, d.mask_stride_z, origin,
      d.keep_probability, count);
}

}  // namespace mpsx::cuda

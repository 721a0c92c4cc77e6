#include "mpsx/kernels/reshape.h"
#include "mpsx/registry.h"

#include "backend.h"

namespace mpsx::cpu {
namespace {

// Plain loops over the per-axis pad maps (built once per shape) and the
// height x width x channels order of a reshape: copies, which oneDNN's
// reorder cannot express with edge modes.
class CpuReshape final : public ReshapePrimitive {
 public:
  CpuReshape(const CpuBackend&, const ReshapeDescriptor& d) : d_(d) {
    if (d.kind != ReshapeKind::Pad) return;
    map_c_ = pad_map(d.edge_mode, d.source_channels, d.first_channel, d.channels);
    map_y_ = pad_map(d.edge_mode, d.source_height, d.first_y, d.height);
    map_x_ = pad_map(d.edge_mode, d.source_width, d.first_x, d.width);
    if (d.gradient) {
      readers_c_ = pad_readers(map_c_, d.source_channels);
      readers_y_ = pad_readers(map_y_, d.source_height);
      readers_x_ = pad_readers(map_x_, d.source_width);
    }
  }

  void forward(ExecutionContext& context, const ImageRegion& source, const ImageRegion& destination) const override {
    float32_pass(context, source, destination, [&](const Float32Region& x, const Float32Region& y) {
      if (d_.kind == ReshapeKind::Pad)
        pad(x.region(), y.region());
      else
        reshape(x.region(), y.region());
    });
  }

  void gradient(ExecutionContext& context, const ImageRegion& source_gradient,
                const ImageRegion& destination_gradient) const override {
    float32_pass(context, source_gradient, destination_gradient, [&](const Float32Region& dy, const Float32Region& dx) {
      if (d_.kind == ReshapeKind::Pad)
        pad_gradient(dy.region(), dx.region());
      else
        reshape(dy.region(), dx.region());
    });
  }

 private:
  float fill(int64_t c) const {
    if (d_.edge_mode != EdgeMode::Constant) return 0.0f;
    return d_.fill_values ? (*d_.fill_values)[static_cast<size_t>(c)] : d_.fill_value;
  }

  void pad(const ImageRegion& in, const ImageRegion& out) const {
    const float* x = static_cast<const float*>(in.data);
    float* y = static_cast<float*>(out.data);
    detail::parallel_rows(out, 16384, [&](int64_t n, int64_t row) {
      const int64_t sy = map_y_[static_cast<size_t>(row)];
      for (int64_t column = 0; column < out.w; ++column) {
        const int64_t sx = map_x_[static_cast<size_t>(column)];
        float* q = y + detail::pixel_offset(out, n, row, column);
        const float* p = sy >= 0 && sx >= 0 ? x + detail::pixel_offset(in, n, sy, sx) : nullptr;
        for (int64_t c = 0; c < out.c; ++c) {
          const int64_t sc = map_c_[static_cast<size_t>(c)];
          q[c * out.stride.c] = p && sc >= 0 ? p[sc * in.stride.c] : fill(c);
        }
      }
    });
  }

  // Each source element gathers the padded elements that read it.
  void pad_gradient(const ImageRegion& g, const ImageRegion& out) const {
    const float* dy = static_cast<const float*>(g.data);
    float* dx = static_cast<float*>(out.data);
    auto range = [](const PadReaders& r, int64_t i) {
      return std::pair{r.begin[static_cast<size_t>(i)], r.begin[static_cast<size_t>(i) + 1]};
    };
    detail::parallel_rows(out, 4096, [&](int64_t n, int64_t i) {
      const auto [y0, y1] = range(readers_y_, i);
      for (int64_t j = 0; j < out.w; ++j) {
        const auto [x0, x1] = range(readers_x_, j);
        float* q = dx + detail::pixel_offset(out, n, i, j);
        for (int64_t c = 0; c < out.c; ++c) {
          const auto [c0, c1] = range(readers_c_, c);
          float sum = 0.0f;
          for (int64_t Y = y0; Y < y1; ++Y)
            for (int64_t X = x0; X < x1; ++X) {
              const float* p = dy + detail::pixel_offset(g, n, readers_y_.readers[static_cast<size_t>(Y)],
                                                         readers_x_.readers[static_cast<size_t>(X)]);
              for (int64_t C = c0; C < c1; ++C) sum += p[readers_c_.readers[static_cast<size_t>(C)] * g.stride.c];
            }
          q[c * out.stride.c] = sum;
        }
      }
    });
  }

  // out's elements in height x width x channels order are in's in that order.
  static void reshape(const ImageRegion& in, const ImageRegion& out) {
    const float* x = static_cast<const float*>(in.data);
    float* y = static_cast<float*>(out.data);
    detail::parallel_rows(out, 16384, [&](int64_t n, int64_t row) {
      int64_t l = row * out.w * out.c;
      for (int64_t column = 0; column < out.w; ++column) {
        float* q = y + detail::pixel_offset(out, n, row, column);
        for (int64_t c = 0; c < out.c; ++c, ++l) {
          const int64_t p = l / in.c;
          q[c * out.stride.c] = x[detail::pixel_offset(in, n, p / in.w, p % in.w) + (l % in.c) * in.stride.c];
        }
      }
    });
  }

  ReshapeDescriptor d_;
  std::vector<int64_t> map_c_, map_y_, map_x_;
  PadReaders readers_c_, readers_y_, readers_x_;
};

const Registered<ReshapePrimitive, CpuReshape> registered("cpu");

}  // namespace

}  // namespace mpsx::cpu

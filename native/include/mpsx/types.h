// Value types shared by the whole runtime, in MPS vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace mpsx {

// Limits on the values users give (docs/semantics.md, "Size limits"). A size
// (image width, height, feature channels or number of images; kernel size,
// stride, dilation rate or window extent; feature channel offset, zero pad
// size) is at most kMaxDimension; a position (offset, clip_rect origin,
// kernel offset) at most kMaxPosition either way, which holds every offset the
// padding policy sets. A product of a size and a size or a position is then at
// most 2^61, so the coordinates core and the backends derive from a few such
// products fit int64_t with room to spare; counts, products of several sizes,
// go through checked.h.
inline constexpr int64_t kMaxDimension = int64_t{1} << 30;
inline constexpr int64_t kMaxPosition = 2 * kMaxDimension;

// MPSDataType, reduced to what images, weights and vectors use.
enum class DataType : uint8_t { Float32 = 0, Float16 = 1, BFloat16 = 2, UInt8 = 3 };

inline size_t size_of(DataType t) {
  switch (t) {
    case DataType::Float32: return 4;
    case DataType::Float16: return 2;
    case DataType::BFloat16: return 2;
    case DataType::UInt8: return 1;
  }
  return 0;
}

inline const char* name_of(DataType t) {
  switch (t) {
    case DataType::Float32: return "float32";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::UInt8: return "uint8";
  }
  return "unknown";
}

// MPSOffset: where clipRect.origin lands in source coordinates; z is the first
// source image of a batch.
struct Offset {
  int64_t x = 0, y = 0, z = 0;
  bool operator==(const Offset& o) const { return x == o.x && y == o.y && z == o.z; }
};

// MTLRegion as MPS uses it for clipRect: z is the first destination image and
// depth the number of images.
struct Region {
  int64_t x = 0, y = 0, z = 0;
  int64_t width = 0, height = 0, depth = 0;
  bool operator==(const Region& o) const {
    return x == o.x && y == o.y && z == o.z && width == o.width && height == o.height &&
           depth == o.depth;
  }
};

// MPSRectNoClip: the whole destination.
inline constexpr Region kRectNoClip{0, 0, 0, std::numeric_limits<int64_t>::max() / 4,
                                    std::numeric_limits<int64_t>::max() / 4,
                                    std::numeric_limits<int64_t>::max() / 4};

// MPSImageEdgeMode. Mirror, MirrorWithEdge and Constant: MPSNNPad only
// (Kernel::extended_edge_modes).
enum class EdgeMode : uint8_t { Zero = 0, Clamp = 1, Mirror = 2, MirrorWithEdge = 3, Constant = 4 };

// MPSNNPaddingMethod bits (MPSNeuralNetworkTypes.h).
namespace padding {
inline constexpr uint32_t kAlignCentered = 0;
inline constexpr uint32_t kAlignTopLeft = 1;
inline constexpr uint32_t kAlignBottomRight = 2;
inline constexpr uint32_t kAlignMask = 3;
inline constexpr uint32_t kAddRemainderToTopLeft = 0u << 2;
inline constexpr uint32_t kAddRemainderToTopRight = 1u << 2;
inline constexpr uint32_t kAddRemainderToBottomLeft = 2u << 2;
inline constexpr uint32_t kAddRemainderToBottomRight = 3u << 2;
inline constexpr uint32_t kAddRemainderToMask = 3u << 2;
inline constexpr uint32_t kSizeValidOnly = 0;
inline constexpr uint32_t kSizeSame = 1u << 4;
inline constexpr uint32_t kSizeFull = 2u << 4;
inline constexpr uint32_t kSizeMask = 0x7f0;
// The custom method changes the descriptor alone: the graph may fuse the node.
inline constexpr uint32_t kCustomAllowForNodeFusion = 1u << 13;
inline constexpr uint32_t kCustom = 1u << 14;
inline constexpr uint32_t kExcludeEdges = 1u << 15;
// MPS's default policy: a destination of the source's size, the window
// centred, an odd remainder of padding at the top left.
inline constexpr uint32_t kDefault = kSizeSame | kAlignCentered | kAddRemainderToTopLeft;
}  // namespace padding

}  // namespace mpsx

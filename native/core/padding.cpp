#include "mpsx/padding.h"

#include <string>

#include "mpsx/kernel.h"

namespace mpsx {

std::shared_ptr<const DefaultPadding> DefaultPadding::with_method(uint32_t method) {
  return std::make_shared<DefaultPadding>(method, false);
}

std::shared_ptr<const DefaultPadding> DefaultPadding::for_tensorflow_average_pooling(bool valid_only) {
  // The header's prose: SizeSame, AlignCentered, AddRemainderToBottomRight
  // (TensorFlow's SAME), with the custom step setting Clamp.
  return std::make_shared<DefaultPadding>(padding::kCustom | (valid_only ? padding::kSizeValidOnly : padding::kSizeSame) |
                                              padding::kAlignCentered | padding::kAddRemainderToBottomRight,
                                          true);
}

std::string DefaultPadding::label() const {
  static const char* const align[] = {"AlignCentered", "AlignTopLeft", "AlignBottomRight", "Align3"};
  static const char* const remainder[] = {"AddRemainderToTopLeft", "AddRemainderToTopRight",
                                          "AddRemainderToBottomLeft", "AddRemainderToBottomRight"};
  std::string text = clamps_edges_ ? "MPSNNDefaultPadding (TensorFlow average pooling, edge mode Clamp): "
                                   : "MPSNNDefaultPadding: ";
  switch (method_ & padding::kSizeMask) {
    case padding::kSizeValidOnly: text += "SizeValidOnly"; break;
    case padding::kSizeSame: text += "SizeSame"; break;
    case padding::kSizeFull: text += "SizeFull"; break;
    default: text += "Size" + std::to_string((method_ & padding::kSizeMask) >> 4); break;
  }
  text += std::string("|") + align[method_ & padding::kAlignMask] + "|" +
          remainder[(method_ & padding::kAddRemainderToMask) >> 2];
  if (method_ & padding::kCustom) text += "|Custom";
  if (method_ & padding::kCustomAllowForNodeFusion) text += "|CustomAllowForNodeFusion";
  if (method_ & padding::kExcludeEdges) text += "|ExcludeEdges";
  return text;
}

ImageDescriptor DefaultPadding::destination_image_descriptor(const std::vector<const Image*>&,
                                                             const std::vector<const State*>&, Kernel& kernel,
                                                             const ImageDescriptor& suggested) const {
  if (clamps_edges_) kernel.edge_mode = EdgeMode::Clamp;
  return suggested;
}

std::shared_ptr<const PaddingPolicy> DefaultPadding::inverse() const { return shared_from_this(); }

}  // namespace mpsx

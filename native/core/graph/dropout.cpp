#include "mpsx/graph/dropout.h"

#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

CNNDropoutNode::CNNDropoutNode(std::shared_ptr<ImageNode> source, DropoutDescriptor descriptor)
    : DescribedForwardNode(std::move(source), descriptor) {
  descriptor_.validate(class_name());
}

CNNDropoutGradientNode::CNNDropoutGradientNode(std::shared_ptr<ImageNode> source_gradient,
                                               std::shared_ptr<ImageNode> source_image,
                                               std::shared_ptr<StateNode> gradient_state, DropoutDescriptor descriptor)
    : DescribedGradientNode(std::move(source_gradient), std::move(source_image), std::move(gradient_state), descriptor) {
  descriptor_.validate(class_name());
  const CNNDropoutNode& forward =
      forward_node_of<CNNDropoutNode>(class_name(), "MPSCNNDropoutNode", source_states().front());
  const DropoutDescriptor& f = forward.descriptor();
  if (f.keep_probability != descriptor_.keep_probability || f.mask_stride_x != descriptor_.mask_stride_x ||
      f.mask_stride_y != descriptor_.mask_stride_y || f.mask_stride_z != descriptor_.mask_stride_z)
    fail<ArgumentError>(class_name(), ": the MPSCNNDropoutNode of the state has keep_probability ",
                        f.keep_probability, " and mask_stride_in_pixels (", f.mask_stride_x, ", ", f.mask_stride_y,
                        ", ", f.mask_stride_z, "); given keep_probability ", descriptor_.keep_probability,
                        " and mask_stride_in_pixels (", descriptor_.mask_stride_x, ", ", descriptor_.mask_stride_y,
                        ", ", descriptor_.mask_stride_z, ")");
  if (sources()[1] != forward.sources().front())
    fail<ArgumentError>(class_name(), ": source_image must be the source image of the MPSCNNDropoutNode whose state "
                                      "it is given, given another image");
}

}  // namespace mpsx

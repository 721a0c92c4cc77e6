#include "mpsx/graph/scale.h"

#include "mpsx/checked.h"
#include "mpsx/errors.h"
#include "mpsx/kernel.h"

namespace mpsx {

namespace {

// The forward step: the kernel's transform from the node's provider at each
// encode, asked with the source batch and the source node's handle.
class ScaleStep final : public GraphStep {
 public:
  ScaleStep(std::shared_ptr<const NNScaleNode> node, const StepSlots& slots)
      : node_(std::move(node)),
        kernel_(graph_kernel<ImageScale>(slots, node_->kind())),
        source_(slots.sources.at(0)),
        result_(slots.result) {
    node_->configure_padding(*kernel_);
    kernel_->output_width = node_->output_width();
    kernel_->output_height = node_->output_height();
  }
  void encode(CommandBuffer& command_buffer, GraphValues& values) override {
    const std::shared_ptr<Image>& source = values.images[source_];
    if (node_->transform_provider() && source) {
      const ScaleTransform t = node_->transform_provider()->transform(source, node_->sources().front()->handle);
      check_scale_transform(t, node_->class_name(), "the transform_provider's transform");
      kernel_->scale_transform = t;
    }
    values.images[result_] = kernel_->encode(command_buffer, source, nullptr, nullptr, false).image;
  }

 private:
  std::shared_ptr<const NNScaleNode> node_;
  std::shared_ptr<ImageScale> kernel_;
  size_t source_, result_;
};

}  // namespace

NNScaleNode::NNScaleNode(std::shared_ptr<ImageNode> source, ScaleKind kind,
                         std::shared_ptr<ImageTransformProvider> provider, int64_t width, int64_t height,
                         int64_t depth)
    : FilterNode({std::move(source)}, {}, padding::kDefault),
      kind_(kind),
      provider_(std::move(provider)),
      width_(width),
      height_(height),
      depth_(depth) {
  if (kind_ != ScaleKind::Bilinear && kind_ != ScaleKind::Lanczos)
    fail<ArgumentError>("a scale node: unknown kind ", static_cast<int32_t>(kind_),
                        "; expected 0 (bilinear) or 1 (Lanczos)");
  check_size(width, class_name(), ": output_size width");
  check_size(height, class_name(), ": output_size height");
  check_size(depth, class_name(), ": output_size depth");
}

const char* NNScaleNode::class_name() const {
  return kind_ == ScaleKind::Bilinear ? "MPSNNBilinearScaleNode" : "MPSNNLanczosScaleNode";
}

std::unique_ptr<GraphStep> NNScaleNode::compile(const StepSlots& slots) const {
  return std::make_unique<ScaleStep>(std::static_pointer_cast<const NNScaleNode>(shared_from_this()), slots);
}

std::vector<std::shared_ptr<FilterNode>> NNScaleNode::make_gradient_filters(
    const std::vector<std::shared_ptr<ImageNode>>&) {
  fail<TypeMismatchError>(class_name(), " has no gradient filter: MPSNNGraphNodes.h declares no gradient node of "
                          "MPSNNScaleNode; set stop_gradient on its result image to train the filters after it");
}

}  // namespace mpsx

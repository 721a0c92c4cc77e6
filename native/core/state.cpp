#include "mpsx/state.h"

#include <utility>

#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"

namespace mpsx {

State::State(std::shared_ptr<Device> device) : device_(std::move(device)) {}
State::~State() = default;

void GradientState::check_bindable(const Image& source, const char* kernel) const {
  if (!encoded) return;
  const ImageDescriptor& s = source_descriptor;
  if (source.number_of_images() == s.number_of_images && source.feature_channels() == s.feature_channels &&
      source.height() == s.height && source.width() == s.width)
    return;
  fail<StateError>(kernel, ": this ", class_name(), " was filled for source images of ", s.number_of_images, "x",
                   s.feature_channels, "x", s.height, "x", s.width, " (NxCxHxW), given ", source.number_of_images(),
                   "x", source.feature_channels(), "x", source.height(), "x", source.width(), "; MPS makes a state ",
                   "for the source images of its encode: make a new one for these");
}

void State::check_source(const Image& source, const char* kernel) {
  if (source_identity_ == 0)
    fail<StateError>(kernel, ": this ", class_name(), " was not produced by a forward encode");
  if (source_identity_ != source.identity())
    fail<StateError>(kernel, ": this ", class_name(), " was made for another batch of source images; ",
                     "pass the source images of the forward encode that produced it");
}

void State::synchronize(CommandBuffer&) {}

}  // namespace mpsx

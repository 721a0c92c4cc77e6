#include "mpsx/state.h"

#include <utility>

#include "mpsx/buffer.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"

namespace mpsx {

State::State(std::shared_ptr<Device> device) : device_(std::move(device)) {}
State::~State() = default;

void State::set_resources(std::vector<size_t> sizes) {
  resource_sizes_ = std::move(sizes);
  resources_.assign(resource_sizes_.size(), nullptr);
}

void State::set_resources(std::vector<std::shared_ptr<Buffer>> buffers) {
  resource_sizes_.clear();
  for (const auto& b : buffers) {
    if (!b) fail<TypeMismatchError>(class_name(), ": expected buffers as resources, given None");
    if (&b->device() != device_.get())
      fail<DeviceMismatchError>(class_name(), ": a resource is on device ", b->device().name(), ", the state on ",
                                device_->name());
    resource_sizes_.push_back(b->length());
  }
  resources_ = std::move(buffers);
}

size_t State::buffer_size_at(size_t index) const {
  if (index >= resource_sizes_.size())
    fail<ArgumentError>(class_name(), ": resource index ", index, " is past the ", resource_sizes_.size(),
                        " resources");
  return resource_sizes_[index];
}

std::shared_ptr<Buffer> State::resource_at(size_t index, bool allocate) {
  const size_t size = buffer_size_at(index);
  if (!resources_[index] && allocate) resources_[index] = std::make_shared<Buffer>(device_, size);
  return resources_[index];
}

size_t State::resource_size() const {
  size_t total = 0;
  for (size_t size : resource_sizes_) {
    if (size > static_cast<size_t>(kMaxCount) - total)
      fail<ShapeError>(class_name(), ": the resources' bytes exceed ", kMaxCount);
    total += size;
  }
  return total;
}

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

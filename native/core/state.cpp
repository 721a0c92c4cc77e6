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

void State::set_read_count(int64_t count) {
  if (count < 0) fail<ArgumentError>(class_name(), ": read_count must be 0 or more, given ", count);
  if (!temporary_for_) return;
  if (read_count_ == 0)
    fail<StateError>(class_name(), ": the temporary state's read_count reached 0, which returned its storage; ",
                     "MPS: it is an error to change the readCount once it is zero");
  read_count_ = count;
}

void State::make_temporary(const CommandBuffer& command_buffer) {
  temporary_for_ = command_buffer.completion();
  read_count_ = 1;
}

void State::check_usable(const CommandBuffer& command_buffer, const char* kernel) const {
  if (!temporary_for_) return;
  if (temporary_for_ != command_buffer.completion())
    fail<StateError>(kernel, ": this temporary ", class_name(), " was made for another command buffer and is valid ",
                     "only on that one (MPS: the data is only valid for the MTLCommandBuffer on which it was ",
                     "created); use a non-temporary state to encode on several command buffers");
  if (read_count_ == 0)
    fail<StateError>(kernel, ": this temporary ", class_name(), " has a read_count of 0: its contents are undefined ",
                     "after the reads it allowed (MPS: it is an error to read or write to a temporary MPSState ",
                     "object with a zero readCount); raise read_count before the reads to read it more times");
}

void State::synchronize(CommandBuffer&) {}

}  // namespace mpsx

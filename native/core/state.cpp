#include "mpsx/state.h"

#include <utility>

#include "mpsx/device.h"
#include "mpsx/errors.h"

namespace mpsx {

State::State(std::shared_ptr<Device> device) : device_(std::move(device)) {}
State::~State() = default;

void State::check_bindable(const Image& source, const char* kernel) const {
  if (source_identity_ != 0 && source_identity_ != source.identity())
    fail<StateError>(kernel, ": this ", class_name(), " belongs to another batch of source images; ",
                     "states are not reusable across batches, make a new one for this batch");
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

#include "mpsx/kernels/normalization.h"

#include <utility>

#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/pool.h"

namespace mpsx {
namespace {

void check_buffer_pair(const std::shared_ptr<Buffer>& first, const std::shared_ptr<Buffer>& second,
                       const char* state, const char* first_name, const char* second_name) {
  if (!first || !second)
    fail<TypeMismatchError>(state, " needs ", first_name, " and ", second_name, " buffers, given None");
  if (&first->device() != &second->device())
    fail<DeviceMismatchError>(state, ": the ", first_name, " buffer is on device ", first->device().name(), ", the ",
                              second_name, " buffer on device ", second->device().name());
  if (first->length() != second->length())
    fail<ShapeError>(state, ": the ", first_name, " buffer holds ", first->length() / sizeof(float), " float32 values, the ",
                     second_name, " buffer ", second->length() / sizeof(float));
}

// One value per channel exactly: another count is most likely another layer's.
void check_buffer_fits(const Buffer& buffer, int64_t channels, const char* kernel, const char* name) {
  if (buffer.length() != static_cast<size_t>(channels) * sizeof(float))
    fail<ShapeError>(kernel, ": the ", name, " buffer holds ", buffer.length() / sizeof(float),
                     " float32 values; the kernel has ", channels, " feature channels");
}

}  // namespace

std::shared_ptr<Buffer> zeroed_per_channel(const std::shared_ptr<Device>& device, int64_t channels, const char* owner) {
  check_size(channels, owner, ": number_of_feature_channels");
  auto buffer = make_pooled<Buffer>(device, static_cast<size_t>(channels) * sizeof(float));
  buffer->fill_zero();
  return buffer;
}

// ---------------------------------------------------------------- gamma/beta and mean/variance states

NormalizationPairState::NormalizationPairState(std::shared_ptr<Buffer> first, std::shared_ptr<Buffer> second,
                                               const NormalizationPairNames& names)
    : State(first ? first->device_ptr() : nullptr), first_(std::move(first)), second_(std::move(second)),
      names_(names) {
  check_buffer_pair(first_, second_, names_.state, names_.first, names_.second);
}

NormalizationPairState::NormalizationPairState(const std::shared_ptr<Device>& device, int64_t channels,
                                               const NormalizationPairNames& names)
    : NormalizationPairState(zeroed_per_channel(device, channels, names.state),
                             zeroed_per_channel(device, channels, names.state), names) {}

void NormalizationPairState::synchronize(CommandBuffer& command_buffer) {
  first_->synchronize(command_buffer);
  second_->synchronize(command_buffer);
}

void NormalizationPairState::check_fits(int64_t channels, const char* kernel) const {
  check_buffer_fits(*first_, channels, kernel, names_.first);
  check_buffer_fits(*second_, channels, kernel, names_.second);
}

void NormalizationPairState::record_copy_to(CommandBuffer& command_buffer, int64_t channels,
                                            const std::shared_ptr<Buffer>& first,
                                            const std::shared_ptr<Buffer>& second) const {
  const size_t bytes = static_cast<size_t>(channels) * sizeof(float);
  command_buffer.record(keyed_by(first, second, first_, second_, bytes),
                        [first, second, from_first = first_, from_second = second_, bytes](ExecutionContext& context) {
    context.copy(first->data(), from_first->data(), bytes);
    context.copy(second->data(), from_second->data(), bytes);
  });
}

HostArray TrainedArrays::copy_of(std::mutex& mutex, int which) {
  std::unique_lock<std::mutex> lock(mutex);
  while (device_[0]) {
    auto status = completion_->status.load(std::memory_order_acquire);
    if (status == CommandBufferStatus::Committed) {  // a replay rewrites them; it will complete
      if (auto command_buffer = command_buffer_.lock()) {
        lock.unlock();
        command_buffer->wait_until_completed();
        lock.lock();
        continue;
      }
    }
    if (status == CommandBufferStatus::Completed) {
      const size_t bytes = host[0].size() * sizeof(float);
      for (int i = 0; i < 2; ++i) device_[i]->read(host[i].data(), 0, bytes, "the values of a normalization weights");
    }
    // Otherwise a replay failed and left them undefined: the host keeps what it read before.
    device_[0].reset();
    device_[1].reset();
  }
  auto copy = std::make_shared<std::vector<float>>(host[which]);
  return HostArray{copy->data(), copy->size(), DataType::Float32, copy, {}};
}

void TrainedArrays::complete_on(CommandBuffer& command_buffer, std::shared_ptr<const void> owner, std::mutex& mutex,
                                std::shared_ptr<Buffer> first, std::shared_ptr<Buffer> second) {
  uint64_t assignments;
  {
    std::lock_guard<std::mutex> lock(mutex);
    assignments = assignments_;
  }
  command_buffer.add_completed_handler([this, owner = std::move(owner), &mutex, first = std::move(first),
                                        second = std::move(second), assignments](CommandBuffer& done) {
    if (done.status() != CommandBufferStatus::Completed) return;  // a failed update changes nothing
    std::lock_guard<std::mutex> lock(mutex);
    if (assignments != assignments_) return;
    device_[0] = first;
    device_[1] = second;
    completion_ = done.completion();
    command_buffer_ = done.shared_from_this();
  });
}

void TrainedArrays::assign(std::mutex& mutex, std::vector<float> first, std::vector<float> second, const char* who,
                           const char* first_name, const char* second_name) {
  std::lock_guard<std::mutex> lock(mutex);
  const size_t channels = host[0].size();
  for (const auto& [values, name] : {std::pair{&first, first_name}, {&second, second_name}})
    if (values->size() != channels)
      fail<ShapeError>(who, ": expected ", channels, " ", name, " values, one per feature channel, given ",
                       values->size());
  host[0] = std::move(first);
  host[1] = std::move(second);
  device_[0].reset();
  device_[1].reset();
  ++assignments_;
}

}  // namespace mpsx

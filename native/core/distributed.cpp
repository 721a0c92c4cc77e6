#include "mpsx/distributed.h"

#include <algorithm>

#include "mpsx/buffer.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx {

Communicator::Communicator(std::shared_ptr<Device> device, const CollectiveDescriptor& descriptor,
                           size_t bucket_bytes)
    : device_(std::move(device)), rank_(descriptor.rank), world_size_(descriptor.world_size),
      bucket_bytes_(bucket_bytes) {
  if (!device_) fail<TypeMismatchError>("Communicator: expected a Device, given None");
  if (world_size_ < 1) fail<ArgumentError>("Communicator: expected a world size of at least 1, given ", world_size_);
  if (rank_ < 0 || rank_ >= world_size_)
    fail<ArgumentError>("Communicator: expected a rank in [0, ", world_size_, "), given ", rank_);
  if (bucket_bytes_ < sizeof(float) || bucket_bytes_ > Device::kMaxAllocation)
    fail<ArgumentError>("Communicator: expected a bucket size of 4 bytes to 2^48, given ", bucket_bytes_);
  if (!(descriptor.timeout_seconds > 0))
    fail<ArgumentError>("Communicator: expected a timeout above 0 seconds, given ", descriptor.timeout_seconds);
  collective_ = make_primitive<CollectivePrimitive>(device_->backend(), descriptor);
}

Communicator::~Communicator() = default;

void Communicator::encode_all_reduce(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
                                     ReduceOperation operation) {
  check(command_buffer, buffers);
  std::lock_guard<std::mutex> lock(mutex_);
  if (overlapping_)
    fail<StateError>("all_reduce: overlapped all-reduces of this group wait for encode_join on their command buffer");
  next_bucket_ = 0;
  encode(command_buffer, buffers, operation, false);
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  // A collective that failed or timed out after launching fails the command buffer once it has run.
  command_buffer.add_host_step([collective] { collective->check(); });
}

void Communicator::encode_all_reduce_overlapped(CommandBuffer& command_buffer,
                                                const std::vector<std::shared_ptr<Buffer>>& buffers,
                                                ReduceOperation operation) {
  check(command_buffer, buffers);
  std::lock_guard<std::mutex> lock(mutex_);
  if (overlapping_ && (overlapping_ != &command_buffer || overlapped_operation_ != operation))
    fail<StateError>("all_reduce: overlapped all-reduces of this group wait for encode_join on their command buffer");
  if (!overlapping_) {
    overlapping_ = &command_buffer;
    overlapped_operation_ = operation;
    next_bucket_ = 0;
  }
  for (const auto& b : buffers) {
    filling_.push_back(b);
    filling_bytes_ += b->length();
  }
  if (filling_bytes_ < bucket_bytes_) return;
  encode(command_buffer, filling_, operation, true);
  filling_.clear();
  filling_bytes_ = 0;
}

void Communicator::encode_join(CommandBuffer& command_buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!overlapping_) return;
  if (overlapping_ != &command_buffer)
    fail<StateError>("all_reduce: join on another command buffer than the overlapped all-reduces'");
  if (!filling_.empty()) encode(command_buffer, filling_, overlapped_operation_, true);
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  command_buffer.record([collective](ExecutionContext& context) { collective->join(context); });
  for (const Unpack& u : unpacks_) {
    command_buffer.record([u](ExecutionContext& context) {
      context.copy(u.buffer->data(), static_cast<char*>(u.bucket->data()) + u.offset, u.buffer->length());
    });
  }
  command_buffer.add_host_step([collective] { collective->check(); });
  filling_.clear();
  filling_bytes_ = 0;
  unpacks_.clear();
  overlapping_ = nullptr;
}

void Communicator::forget_overlapped() {
  std::lock_guard<std::mutex> lock(mutex_);
  filling_.clear();
  filling_bytes_ = 0;
  unpacks_.clear();
  overlapping_ = nullptr;
}

void Communicator::check(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers) const {
  command_buffer.check_encodable();
  if (&command_buffer.device() != device_.get())
    fail<DeviceMismatchError>("all_reduce: the command buffer is of ", command_buffer.device().name(),
                              ", the group's device is ", device_->name());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i]) fail<TypeMismatchError>("all_reduce: expected buffer ", i, ", given None");
    if (&buffers[i]->device() != device_.get())
      fail<DeviceMismatchError>("all_reduce: buffer ", i, " is of ", buffers[i]->device().name(),
                                ", the group's device is ", device_->name());
    if (buffers[i]->length() % sizeof(float))
      fail<ArgumentError>("all_reduce: expected buffers of whole float32 values, given buffer ", i, " of ",
                          buffers[i]->length(), " bytes");
  }
}

// Records the buckets of `buffers` (checked); overlapped, leaves the unpacks to encode_join.
void Communicator::encode(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
                          ReduceOperation operation, bool overlapped) {
  const std::shared_ptr<CollectivePrimitive> collective = collective_;
  auto reduce = [&](std::shared_ptr<Buffer> buffer, size_t bytes) {
    buffer->will_write(command_buffer);
    command_buffer.record([collective, buffer, bytes, operation, overlapped](ExecutionContext& context) {
      auto* data = static_cast<float*>(buffer->data());
      if (overlapped)
        collective->all_reduce_overlapped(context, data, bytes / sizeof(float), operation);
      else
        collective->all_reduce(context, data, bytes / sizeof(float), operation);
    });
    ++collective_calls_;
  };
  size_t next = 0;
  while (next < buffers.size()) {
    if (buffers[next]->length() == 0) {
      ++next;
      continue;
    }
    // The buffers that fit one bucket together, in order.
    size_t end = next, bytes = 0;
    while (end < buffers.size() && bytes + buffers[end]->length() <= bucket_bytes_) bytes += buffers[end++]->length();
    if (end <= next + 1) {  // one buffer, or one larger than a bucket: where it is
      reduce(buffers[next], buffers[next]->length());
      next = std::max(end, next + 1);
      continue;
    }
    if (buckets_.size() <= next_bucket_) buckets_.resize(next_bucket_ + 1);
    std::shared_ptr<Buffer>& packed = buckets_[next_bucket_++];
    if (!packed || packed->length() < bytes) packed = std::make_shared<Buffer>(device_, bytes);
    size_t offset = 0;
    for (size_t i = next; i < end; ++i) {
      const std::shared_ptr<Buffer>& b = buffers[i];
      command_buffer.record([packed, b, offset](ExecutionContext& context) {
        context.copy(static_cast<char*>(packed->data()) + offset, b->data(), b->length());
      });
      offset += b->length();
    }
    reduce(packed, bytes);
    offset = 0;
    for (size_t i = next; i < end; ++i) {
      const std::shared_ptr<Buffer>& b = buffers[i];
      b->will_write(command_buffer);
      if (overlapped) {
        unpacks_.push_back({packed, b, offset});
      } else {
        command_buffer.record([packed, b, offset](ExecutionContext& context) {
          context.copy(b->data(), static_cast<char*>(packed->data()) + offset, b->length());
        });
      }
      offset += b->length();
    }
    next = end;
  }
}

std::string new_group_id(Device& device, const std::string& library) {
  return make_primitive<GroupIdPrimitive>(device.backend(), library)->make();
}

}  // namespace mpsx

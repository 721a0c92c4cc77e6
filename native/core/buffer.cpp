#include "mpsx/buffer.h"

#include <atomic>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/checked.h"
#include "mpsx/command_buffer.h"
#include "mpsx/device.h"
#include "mpsx/errors.h"
#include "mpsx/pool.h"

namespace mpsx {
namespace {
std::atomic<uint64_t> next_buffer_id{1};
}

Buffer::Buffer(std::shared_ptr<Device> device, size_t length)
    : device_(std::move(device)), length_(length), id_(next_buffer_id.fetch_add(1)) {
  size_t capacity = 0;
  data_ = device_->allocate(length_ == 0 ? 1 : length_, &capacity);
  capacity_ = capacity;
}

Buffer::Buffer(std::shared_ptr<Device> device, void* data, size_t length, std::shared_ptr<void> owner)
    : device_(std::move(device)), data_(data), length_(length), id_(next_buffer_id.fetch_add(1)), owner_(std::move(owner)) {
  device_->check_process();
}

Buffer::~Buffer() {
  if (!owner_) device_->release(data_, capacity_);
}

void Buffer::will_write(CommandBuffer& writer) {
  writer.uses(*this);
  writer_ = writer.completion();
  synchronized_on_.reset();
}

void Buffer::will_read(CommandBuffer& reader) { reader.uses(*this); }

void Buffer::synchronize(CommandBuffer& command_buffer) {
  if (&command_buffer.device() != device_.get())
    fail<DeviceMismatchError>("synchronize: the command buffer is of device ", command_buffer.device().name(),
                              ", the buffer of device ", device_->name());
  command_buffer.check_encodable();
  // The writing command buffer or a later one: either makes the write
  // visible to the host once it has completed, as in Metal.
  if (writer_) synchronized_on_ = command_buffer.completion();
}

bool Buffer::written_by_pending_command_buffer() const { return writer_ && !writer_->done(); }

void Buffer::check_host_readable(const char* what) const {
  device_->check_process();
  if (!writer_) return;
  if (!synchronized_on_)
    fail<SynchronizationError>(what, " was written by a command buffer without synchronize(command_buffer) ",
                               "after the write; call synchronize on that command buffer before commit");
  for (const Completion* c : {writer_.get(), synchronized_on_.get()}) {
    switch (c->status.load(std::memory_order_acquire)) {
      case CommandBufferStatus::Completed: break;
      case CommandBufferStatus::Error:
        fail<SynchronizationError>(what, " was to be written by a command buffer that failed; its contents are undefined");
      case CommandBufferStatus::NotEnqueued:
        fail<SynchronizationError>(what, " is written by a command buffer that was not committed; commit it and ",
                                   "wait_until_completed() before reading");
      case CommandBufferStatus::Committed:
        fail<SynchronizationError>(what, " is written by a command buffer that has not completed; call ",
                                   "wait_until_completed() before reading");
    }
  }
}

void Buffer::read(void* destination, size_t offset, size_t bytes, const char* what) const {
  check_host_readable(what);
  if (offset > length_ || bytes > length_ - offset)
    fail<ArgumentError>("read of ", bytes, " bytes at offset ", offset, " is past the end of a buffer of ", length_,
                        " bytes");
  device_->backend().copy_to_host(destination, static_cast<const char*>(data_) + offset, bytes);
}

void Buffer::prepare_export(const char* what, bool ordered, int64_t stream) const {
  device_->check_process();
  Backend& backend = device_->backend();
  if (writer_) {
    switch (writer_->status.load(std::memory_order_acquire)) {
      case CommandBufferStatus::Completed: break;
      case CommandBufferStatus::Error:
        fail<SynchronizationError>(what, " was to be written by a command buffer that failed; its contents are undefined");
      case CommandBufferStatus::NotEnqueued:
        fail<SynchronizationError>(what, " is written by a command buffer that was not committed; commit it before ",
                                   "handing ", what, " to another library");
      case CommandBufferStatus::Committed:
        if (!ordered) break;
        // A queue that is gone has finished its command buffers.
        if (auto queue = writer_->queue.lock())
          if (!(stream && queue->executor().order_stream_after_submitted(stream))) queue->wait_until_idle();
        if (writer_->status.load(std::memory_order_acquire) == CommandBufferStatus::Error)
          fail<SynchronizationError>(what, " was to be written by a command buffer that failed; its contents are ",
                                     "undefined");
    }
  }
  if (!ordered) return;
  if (stream)
    backend.order_stream_after_host_writes(stream);
  else
    backend.wait_for_host_writes();
}

void Buffer::check_host_writable(const char* what) const {
  device_->check_process();
  if (in_flight_.load(std::memory_order_acquire))
    fail<SynchronizationError>(what, " is read or written by a command buffer that was committed and has not ",
                               "completed; call wait_until_completed() on that command buffer before writing ", what,
                               " on the host, which would race with it");
}

void Buffer::write(const void* source, size_t offset, size_t bytes) {
  check_host_writable("the buffer");
  if (offset > length_ || bytes > length_ - offset)
    fail<ArgumentError>("write of ", bytes, " bytes at offset ", offset, " is past the end of a buffer of ", length_,
                        " bytes");
  device_->backend().copy_from_host(static_cast<char*>(data_) + offset, source, bytes);
}

void Buffer::fill_zero() { device_->backend().fill_zero(data_, length_); }

namespace {
size_t bytes_of_vector(size_t length, DataType data_type) {
  return checked_bytes(length, size_of(data_type), "the byte count of a vector of ", length, " ", name_of(data_type),
                       " values");
}
}  // namespace

Vector::Vector(std::shared_ptr<Device> device, size_t length, DataType data_type)
    : Vector(make_pooled<Buffer>(std::move(device), bytes_of_vector(length, data_type)), 0, length, data_type) {}

Vector::Vector(std::shared_ptr<Buffer> buffer, size_t offset, size_t length, DataType data_type, size_t vectors,
               size_t stride)
    : buffer_(std::move(buffer)), offset_(offset), length_(length), data_type_(data_type), vectors_(vectors) {
  const size_t bytes = bytes_of_vector(length_, data_type_);
  const size_t element = size_of(data_type_);
  vector_bytes_ = stride ? stride : bytes;
  if (vectors_ < 1) fail<ArgumentError>("a vector holds at least one vector, given ", vectors_);
  if (offset_ % element || vector_bytes_ % element)
    fail<ArgumentError>("a vector's offset (", offset_, ") and vector_bytes (", vector_bytes_,
                        ") must be multiples of its element size, ", element);
  if (vector_bytes_ < bytes)
    fail<ArgumentError>("vector_bytes ", vector_bytes_, " is less than the ", bytes, " bytes of a vector of ", length_,
                        " ", name_of(data_type_), " values");
  // The last vector's end, from the buffer's start.
  const size_t end = static_cast<size_t>(checked_count(
      {static_cast<int64_t>(vectors_ - 1), static_cast<int64_t>(vector_bytes_)}, "the bytes of ", vectors_,
      " vectors"));
  if (end > buffer_->length() || bytes > buffer_->length() - end || offset_ > buffer_->length() - end - bytes)
    fail<ShapeError>("a vector of ", vectors_, " x ", length_, " ", name_of(data_type_), " values (", vector_bytes_,
                     " bytes apart) from byte ", offset_, " does not fit the buffer's ", buffer_->length(), " bytes");
}

std::shared_ptr<Vector> Vector::temporary(CommandBuffer& command_buffer, size_t length, DataType data_type) {
  command_buffer.check_encodable();
  auto vector = std::make_shared<Vector>(command_buffer.device_ptr(), length, data_type);
  vector->lifetime_.make_temporary(command_buffer);
  return vector;
}

void Vector::check_host_access() const {
  if (lifetime_.is_temporary())
    fail<SynchronizationError>("the vector is an MPSTemporaryVector, which only kernels read and write (MPS: a ",
                               "vector allocated on GPU private memory)");
}

}  // namespace mpsx

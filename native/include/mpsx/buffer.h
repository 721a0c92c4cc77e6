// MTLBuffer: device memory of fixed length, with MPS host-access rules.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mpsx/temporary.h"
#include "mpsx/types.h"

namespace mpsx {

class Device;
class CommandBuffer;
struct Completion;

class Buffer : public std::enable_shared_from_this<Buffer> {
 public:
  // Memory from the device's caching allocator; contents undefined.
  Buffer(std::shared_ptr<Device> device, size_t length);
  // Another library's memory on `device` (DLPack), which `owner` keeps until
  // the buffer is freed; it never goes to the allocator.
  Buffer(std::shared_ptr<Device> device, void* data, size_t length, std::shared_ptr<void> owner);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  size_t length() const { return length_; }
  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  // Device address; a host address on the cpu backend.
  void* data() const { return data_; }
  // Unique for the lifetime of the process, so identities never repeat.
  uint64_t id() const { return id_; }

  // Bookkeeping for host access, as MPS defines it: memory a command buffer
  // writes may be read on the host only after synchronize(command buffer)
  // was encoded after the write (on that command buffer or a later one) and
  // both completed.
  // will_write and will_read also record the use on the command buffer
  // (CommandBuffer::uses), for check_host_writable.
  void will_write(CommandBuffer& writer);
  void will_read(CommandBuffer& reader);
  void synchronize(CommandBuffer& command_buffer);
  // Throws SynchronizationError naming `what` if the host may not read now.
  void check_host_readable(const char* what) const;
  // Before the memory is handed to another library (DLPack): throws
  // SynchronizationError naming `what` unless the last command buffer that
  // writes it was committed and has not failed. With `ordered`, the other
  // library's `stream` (a handle of the device's API; 0 for one on the host)
  // is then made to wait for that command buffer and the host writes, or
  // this waits for them. No synchronize() is needed: DLPack's streams, not
  // MPS's host access rules, order what the other library reads.
  void prepare_export(const char* what, bool ordered, int64_t stream) const;
  bool written_by_pending_command_buffer() const;
  // Whether the last write recorded was by the command buffer of `completion`,
  // and whether the host-access synchronize after it was on it.
  bool written_by(const Completion& completion) const { return writer_.get() == &completion; }
  bool synchronized_on(const Completion& completion) const { return synchronized_on_.get() == &completion; }
  // Throws SynchronizationError naming `what` while a committed command
  // buffer that reads or writes the buffer has not completed: a host write
  // then would change what it computes, or be lost under what it writes.
  void check_host_writable(const char* what) const;
  // For command buffers: one of them that uses the buffer was committed or
  // replayed (begin), or has run (end).
  void begin_use() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  void end_use() { in_flight_.fetch_sub(1, std::memory_order_release); }
  // For command buffers, so that each records a buffer once: marks the
  // buffer used by command buffer `id`; false if it was already.
  bool mark_used_by(uint64_t id) {
    if (used_by_.load(std::memory_order_relaxed) == id) return false;
    used_by_.store(id, std::memory_order_relaxed);
    return true;
  }
  void unmark_used_by(uint64_t id) {
    if (used_by_.load(std::memory_order_relaxed) == id) used_by_.store(0, std::memory_order_relaxed);
  }

  // Blocking host copies; read checks check_host_readable first, write
  // check_host_writable.
  void read(void* destination, size_t offset, size_t bytes, const char* what) const;
  void write(const void* source, size_t offset, size_t bytes);
  // A host write that is part of the buffer's creation (no access checks).
  void fill_zero();

 private:
  std::shared_ptr<Device> device_;
  void* data_ = nullptr;
  size_t length_ = 0;
  size_t capacity_ = 0;
  uint64_t id_ = 0;
  std::shared_ptr<void> owner_;
  std::shared_ptr<const Completion> writer_;
  std::shared_ptr<const Completion> synchronized_on_;
  // Committed command buffers that use the buffer and have not completed.
  std::atomic<uint32_t> in_flight_{0};
  // The command buffer that last recorded a use (mark_used_by); relaxed, as
  // threads encoding onto different command buffers only record a use twice.
  std::atomic<uint64_t> used_by_{0};
};

// MPSVector: a buffer of `length` values of one data type.
class Vector {
 public:
  // One vector in a new buffer of its size (-[MPSVector initWithDevice:descriptor:]).
  Vector(std::shared_ptr<Device> device, size_t length, DataType data_type);
  // -[MPSVector initWithBuffer:offset:descriptor:]: `vectors` vectors of
  // `length` values, `vector_bytes` apart (0: length values' bytes), from
  // byte `offset` of `buffer`. Throws ArgumentError for an offset or stride
  // that is no multiple of the element size or a stride shorter than a
  // vector, ShapeError where the vectors do not fit the buffer.
  Vector(std::shared_ptr<Buffer> buffer, size_t offset, size_t length, DataType data_type, size_t vectors = 1,
         size_t vector_bytes = 0);
  size_t length() const { return length_; }
  DataType data_type() const { return data_type_; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  Device& device() const { return buffer_->device(); }
  size_t offset() const { return offset_; }
  size_t vectors() const { return vectors_; }
  size_t vector_bytes() const { return vector_bytes_; }

  // +[MPSTemporaryVector temporaryVectorWithCommandBuffer:descriptor:]: a
  // vector of new storage (contents undefined) valid only on
  // `command_buffer`, which must not be committed yet, while its read count
  // allows; each encode that reads it lowers the count by 1.
  static std::shared_ptr<Vector> temporary(CommandBuffer& command_buffer, size_t length, DataType data_type);
  TemporaryLifetime& lifetime() { return lifetime_; }
  bool is_temporary() const { return lifetime_.is_temporary(); }
  int64_t read_count() const { return lifetime_.read_count(); }
  void set_read_count(int64_t count) { lifetime_.set_read_count(count, "MPSTemporaryVector"); }
  // Throws SynchronizationError for a temporary vector, whose storage is
  // private to the GPU (MPS).
  void check_host_access() const;

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
  size_t length_;
  DataType data_type_;
  size_t vectors_ = 1;
  size_t vector_bytes_;
  TemporaryLifetime lifetime_;
};

}  // namespace mpsx

// MPS's temporary objects (MPSTemporaryImage, a temporary MPSState): valid
// only on the command buffer they were made for (and those continuing it,
// MPSCommandBuffer's commitAndContinue), and only until the reads their
// readCount allows have been encoded.
#pragma once

#include <cstdint>
#include <memory>

namespace mpsx {

class CommandBuffer;
struct Completion;

class TemporaryLifetime {
 public:
  bool is_temporary() const { return heap_ != nullptr; }
  int64_t read_count() const { return read_count_; }
  // Makes the object temporary for `command_buffer`, with a read count of 1.
  void make_temporary(const CommandBuffer& command_buffer);
  // Throws ArgumentError for a negative count and StateError for a temporary
  // object whose count is 0; a non-temporary object keeps 0. `what` names the
  // object's MPS class in messages.
  void set_read_count(int64_t count, const char* what);
  // Throws StateError unless a kernel encoding on `command_buffer` may read
  // or write the object: a temporary one only on its command buffer or one
  // continuing it, while its read count is above 0.
  void check_usable(const CommandBuffer& command_buffer, const char* kernel, const char* what) const;
  // An encode read it: a temporary object's read count drops by 1. Returns
  // whether that read was its last.
  bool was_read() {
    if (!heap_ || read_count_ == 0) return false;
    return --read_count_ == 0;
  }

 private:
  // CommandBuffer::temporary_heap() of the command buffer it was made for.
  std::shared_ptr<const Completion> heap_;
  int64_t read_count_ = 0;
};

}  // namespace mpsx

#include "mpsx/temporary.h"

#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"

namespace mpsx {

void TemporaryLifetime::make_temporary(const CommandBuffer& command_buffer) {
  heap_ = command_buffer.temporary_heap();
  read_count_ = 1;
}

void TemporaryLifetime::set_read_count(int64_t count, const char* what) {
  if (count < 0) fail<ArgumentError>(what, ": read_count must be 0 or more, given ", count);
  if (!heap_) return;
  if (read_count_ == 0)
    fail<StateError>(what, ": the temporary object's read_count reached 0, which returned its storage; ",
                     "MPS: it is an error to change the readCount once it is zero");
  read_count_ = count;
}

void TemporaryLifetime::check_usable(const CommandBuffer& command_buffer, const char* kernel,
                                     const char* what) const {
  if (!heap_) return;
  if (heap_ != command_buffer.temporary_heap())
    fail<StateError>(kernel, ": this temporary ", what, " was made for another command buffer and is valid only on ",
                     "that one and those commit_and_continue() makes from it (MPS: its data is only valid for the ",
                     "MTLCommandBuffer on which it was created); use a non-temporary one to encode on several command ",
                     "buffers");
  if (read_count_ == 0)
    fail<StateError>(kernel, ": this temporary ", what, " has a read_count of 0: its contents are undefined after ",
                     "the reads it allowed (MPS: it is an error to read or write to a temporary object with a zero ",
                     "readCount); raise read_count before the reads to read it more times");
}

}  // namespace mpsx

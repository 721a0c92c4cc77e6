// An encode that fails part way leaves nothing on the command buffer.
// Compiled into the extension modules only.
#pragma once

#include "mpsx/command_buffer.h"

namespace mpsx::python {

// A local of the Cython function that encodes: begin() marks the command
// buffer, complete() keeps what was recorded since. Cython destroys C++ locals
// when the function returns, by return or by a raised exception, so a call
// that raises between the two (a bad argument found after a list of images
// was gathered into a batch, an error of the kernel) discards what it
// recorded. Being a C++ local, it costs no allocation on the encode path.
class Encoding {
 public:
  Encoding() = default;
  Encoding(const Encoding&) = delete;
  Encoding& operator=(const Encoding&) = delete;
  ~Encoding() {
    if (!command_buffer_) return;
    // A command buffer that can no longer be encoded onto (committed, or in a
    // forked child) has nothing to give back; the error raised stays the one
    // reported.
    try {
      command_buffer_->discard_since(mark_);
    } catch (...) {
    }
  }

  void begin(CommandBuffer& command_buffer) {
    command_buffer_ = &command_buffer;
    mark_ = command_buffer.mark();
  }
  void complete() { command_buffer_ = nullptr; }

 private:
  CommandBuffer* command_buffer_ = nullptr;
  CommandBuffer::Mark mark_;
};

}  // namespace mpsx::python

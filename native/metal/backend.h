// The metal backend: MetalPerformanceShaders over MTLBuffers of shared
// storage. A command queue is an MTLCommandQueue: commit encodes the command
// buffer's commands onto an MTLCommandBuffer, and its completed handler
// finishes the mpsx command buffer.
#pragma once

#import <Metal/Metal.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"

namespace mpsx::metal {

// Where an address mpsx handed out lies: its MTLBuffer and the offset in it.
struct BufferAddress {
  id<MTLBuffer> buffer;
  NSUInteger offset = 0;
};

// Memory and queues of one MTLDevice. The kernel families (make_*) and image
// storage come with issue 4; until then the class stays abstract and no
// metal device is registered.
class MetalBackend : public Backend {
 public:
  explicit MetalBackend(id<MTLDevice> device);
  const char* kind() const override { return "metal"; }
  std::string device_name() const override { return "metal"; }
  // Shared storage: on unified memory the buffer's contents pointer is a
  // host address, so host copies are plain memcpy once the GPU is done.
  void* allocate(size_t bytes) override;
  void deallocate(void* data, size_t bytes) override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_from_host(void* device, const void* host, size_t bytes) override;
  void fill_zero(void* device, size_t bytes) override;
  std::unique_ptr<Executor> new_executor() override;

  id<MTLDevice> device() const { return device_; }
  // Throws Error for an address no buffer of this device holds.
  BufferAddress address_of(const void* data) const;

 private:
  id<MTLDevice> device_;
  mutable std::mutex buffers_mutex_;
  std::map<uintptr_t, id<MTLBuffer>> buffers_;  // by contents address
};

// What commands get while a metal queue encodes them: the MTLCommandBuffer.
class MetalContext final : public ExecutionContext {
 public:
  MetalContext(const MetalBackend& backend, id<MTLCommandBuffer> command_buffer)
      : backend_(backend), command_buffer_(command_buffer) {}
  void copy(void* destination, const void* source, size_t bytes) override;
  void fill_zero(void* destination, size_t bytes) override;

  const MetalBackend& backend() const { return backend_; }
  id<MTLCommandBuffer> command_buffer() const { return command_buffer_; }

 private:
  const MetalBackend& backend_;
  id<MTLCommandBuffer> command_buffer_;
};

inline MetalContext& context_of(ExecutionContext& context) { return static_cast<MetalContext&>(context); }

}  // namespace mpsx::metal

#include "backend.h"

#include <cstring>

#include "mpsx/errors.h"

namespace mpsx::metal {

MetalBackend::MetalBackend(id<MTLDevice> device) : device_(device) {}

void* MetalBackend::allocate(size_t bytes) {
  id<MTLBuffer> buffer = [device_ newBufferWithLength:bytes options:MTLResourceStorageModeShared];
  if (!buffer) fail<OutOfMemoryError>("out of memory: ", device_name(), " could not allocate ", bytes, " bytes");
  void* data = [buffer contents];
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  buffers_[reinterpret_cast<uintptr_t>(data)] = buffer;
  return data;
}

void MetalBackend::deallocate(void* data, size_t) {
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  buffers_.erase(reinterpret_cast<uintptr_t>(data));  // ARC releases the MTLBuffer
}

void MetalBackend::copy_to_host(void* host, const void* device, size_t bytes) { std::memcpy(host, device, bytes); }

void MetalBackend::copy_from_host(void* device, const void* host, size_t bytes) { std::memcpy(device, host, bytes); }

void MetalBackend::fill_zero(void* device, size_t bytes) { std::memset(device, 0, bytes); }

BufferAddress MetalBackend::address_of(const void* data) const {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(buffers_mutex_);
  auto it = buffers_.upper_bound(address);
  if (it != buffers_.begin()) {
    --it;
    if (address < it->first + [it->second length]) return {it->second, static_cast<NSUInteger>(address - it->first)};
  }
  fail<Error>("metal: address ", data, " is in no MTLBuffer of ", device_name());
}

void MetalContext::copy(void* destination, const void* source, size_t bytes) {
  const BufferAddress to = backend_.address_of(destination), from = backend_.address_of(source);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  [blit copyFromBuffer:from.buffer sourceOffset:from.offset toBuffer:to.buffer destinationOffset:to.offset size:bytes];
  [blit endEncoding];
}

void MetalContext::fill_zero(void* destination, size_t bytes) {
  const BufferAddress to = backend_.address_of(destination);
  id<MTLBlitCommandEncoder> blit = [command_buffer_ blitCommandEncoder];
  [blit fillBuffer:to.buffer range:NSMakeRange(to.offset, bytes) value:0];
  [blit endEncoding];
}

}  // namespace mpsx::metal

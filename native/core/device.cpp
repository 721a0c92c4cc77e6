#include "mpsx/device.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"

namespace mpsx {
namespace {

struct Registration {
  int priority;
  BackendEnumerator enumerate;
};

std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}

// Size classes: multiples of 256 bytes up to 4 KiB, then four steps per power
// of two, so a cached block serves any request of its class and wastes at
// most a quarter of itself.
struct SizeClass {
  size_t index;
  size_t bytes;
};

// For bytes <= Device::kMaxAllocation.
SizeClass size_class(size_t bytes) {
  constexpr size_t kStep = 256, kLinear = 4096;
  if (bytes <= kLinear) {
    size_t steps = std::max<size_t>(1, (bytes + kStep - 1) / kStep);
    return {steps - 1, steps * kStep};
  }
  size_t power = kLinear, index = kLinear / kStep;
  while (power * 2 < bytes) {
    power *= 2;
    index += 4;
  }
  size_t step = power / 4;
  size_t steps = (bytes + step - 1) / step;  // 5..8
  return {index + steps - 5, steps * step};
}

// Backends built as libraries of their own (libmpsx_cuda.so, or
// libmpsx_metal.dylib on macOS, beside this library) register themselves
// when loaded. One that cannot load (no CUDA libraries on this machine) is
// skipped: the cpu backend always remains.
std::vector<std::string>& load_errors() {
  static std::vector<std::string> errors;
  return errors;
}

void load_backend_libraries() {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void*>(&register_backend), &self) || !self.dli_fname) return;
  std::string directory(self.dli_fname);
  directory = directory.substr(0, directory.find_last_of('/') + 1);
  for (const char* name : {"libmpsx_cuda.so", "libmpsx_metal.dylib"}) {
    std::string path = directory + name;
    if (access(path.c_str(), F_OK) != 0) continue;  // not built
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* error = dlerror();
      load_errors().push_back(error ? error : path + ": could not be loaded");
    }
  }
}

}  // namespace

const std::vector<std::string>& backend_load_errors() { return load_errors(); }

void register_backend(int priority, BackendEnumerator enumerate) {
  registrations().push_back({priority, enumerate});
}

Device::Device(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), name_(backend_->device_name()) {}

Device::~Device() { trim(); }

const char* Device::backend_name() const { return backend_->kind(); }

bool Device::host_addressable() const { return backend_->host_addressable(); }
bool Device::deterministic() const { return backend_->deterministic; }
void Device::set_deterministic(bool value) { backend_->deterministic = value; }

const std::vector<std::shared_ptr<Device>>& Device::all() {
  static const std::vector<std::shared_ptr<Device>> devices = [] {
    load_backend_libraries();
    auto list = registrations();
    std::stable_sort(list.begin(), list.end(),
                     [](const Registration& a, const Registration& b) { return a.priority > b.priority; });
    std::vector<std::shared_ptr<Device>> found;
    for (const auto& r : list)
      for (auto& backend : r.enumerate()) found.push_back(std::make_shared<Device>(std::move(backend)));
    return found;
  }();
  return devices;
}

std::shared_ptr<Device> Device::named(const std::string& requested) {
  std::string name = requested;
  if (name.empty()) {
    const char* env = std::getenv("MPSX_DEVICE");
    if (env && *env) name = env;
  }
  const auto& devices = all();
  if (devices.empty()) fail<Error>("no device is available");
  if (name.empty()) return devices.front();
  for (const auto& d : devices)
    if (d->name() == name) return d;
  // A backend name alone ("cuda") means its first device.
  for (const auto& d : devices)
    if (name == d->backend_name()) return d;
  std::string present;
  for (const auto& d : devices) present += (present.empty() ? "" : ", ") + d->name();
  fail<ArgumentError>("no device named '", name, "'; devices present: ", present);
}

const std::shared_ptr<CommandQueue>& Device::command_queue() {
  std::call_once(queue_once_, [this] { queue_ = new_command_queue(); });
  return queue_;
}

std::shared_ptr<CommandQueue> Device::new_command_queue() {
  return std::make_shared<CommandQueue>(shared_from_this());
}

void* Device::allocate(size_t bytes, size_t* capacity) {
  if (bytes > kMaxAllocation)
    fail<OutOfMemoryError>("cannot allocate ", bytes, " bytes on device ", name_, ": the largest allocation is ",
                           kMaxAllocation, " bytes (2^48)");
  SizeClass cls = size_class(bytes);
  *capacity = cls.bytes;
  cache_lock_.lock();
  if (cls.index < cache_.size() && !cache_[cls.index].blocks.empty()) {
    void* data = cache_[cls.index].blocks.back();
    cache_[cls.index].blocks.pop_back();
    bytes_cached_ -= cls.bytes;
    bytes_in_use_ += cls.bytes;
    peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
    cache_lock_.unlock();
    return data;
  }
  cache_lock_.unlock();
  void* data = nullptr;
  try {
    data = backend_->allocate(cls.bytes);
  } catch (const OutOfMemoryError&) {
    trim();
    data = backend_->allocate(cls.bytes);
  }
  cache_lock_.lock();
  bytes_in_use_ += cls.bytes;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  if (cache_.size() <= cls.index) cache_.resize(cls.index + 1);
  CachedClass& cached = cache_[cls.index];
  cached.bytes = cls.bytes;
  if (++cached.count > cached.blocks.capacity())  // so release() never allocates
    cached.blocks.reserve(2 * cached.count);
  cache_lock_.unlock();
  return data;
}

void Device::release(void* data, size_t capacity) {
  SizeClass cls = size_class(capacity);
  cache_lock_.lock();
  cache_[cls.index].blocks.push_back(data);
  bytes_in_use_ -= capacity;
  bytes_cached_ += capacity;
  cache_lock_.unlock();
}

void Device::trim() {
  std::vector<std::pair<void*, size_t>> blocks;
  cache_lock_.lock();
  for (auto& cached : cache_) {
    for (void* data : cached.blocks) blocks.emplace_back(data, cached.bytes);
    cached.count -= cached.blocks.size();
    cached.blocks.clear();
  }
  bytes_cached_ = 0;
  cache_lock_.unlock();
  for (auto& [data, bytes] : blocks) backend_->deallocate(data, bytes);
}

size_t Device::bytes_in_use() const {
  cache_lock_.lock();
  size_t n = bytes_in_use_;
  cache_lock_.unlock();
  return n;
}

size_t Device::peak_bytes_in_use() const {
  cache_lock_.lock();
  size_t n = peak_bytes_in_use_;
  cache_lock_.unlock();
  return n;
}

void Device::reset_peak_bytes_in_use() {
  cache_lock_.lock();
  peak_bytes_in_use_ = bytes_in_use_;
  cache_lock_.unlock();
}

size_t Device::bytes_cached() const {
  cache_lock_.lock();
  size_t n = bytes_cached_;
  cache_lock_.unlock();
  return n;
}

}  // namespace mpsx

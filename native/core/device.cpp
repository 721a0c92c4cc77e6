#include "mpsx/device.h"

#include <algorithm>
#include <cstdlib>
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

// Size classes of four steps per power of two above 4 KiB, so a cached block
// is reused for any request of its class and wastes at most 25%.
size_t size_class(size_t bytes) {
  constexpr size_t kMinimum = 256;
  if (bytes <= kMinimum) return kMinimum;
  if (bytes <= 4096) return (bytes + kMinimum - 1) / kMinimum * kMinimum;
  size_t power = 4096;
  while (power * 2 < bytes) power *= 2;
  size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

}  // namespace

void register_backend(int priority, BackendEnumerator enumerate) {
  registrations().push_back({priority, enumerate});
}

Device::Device(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), name_(backend_->device_name()) {}

Device::~Device() { trim(); }

const char* Device::backend_name() const { return backend_->kind(); }

const std::vector<std::shared_ptr<Device>>& Device::all() {
  static const std::vector<std::shared_ptr<Device>> devices = [] {
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
  size_t cls = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(cls);
    if (it != cache_.end() && !it->second.empty()) {
      void* data = it->second.back();
      it->second.pop_back();
      bytes_cached_ -= cls;
      bytes_in_use_ += cls;
      *capacity = cls;
      return data;
    }
  }
  void* data = nullptr;
  try {
    data = backend_->allocate(cls);
  } catch (const OutOfMemoryError&) {
    trim();
    data = backend_->allocate(cls);
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  bytes_in_use_ += cls;
  *capacity = cls;
  return data;
}

void Device::release(void* data, size_t capacity) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_[capacity].push_back(data);
  bytes_in_use_ -= capacity;
  bytes_cached_ += capacity;
}

void Device::trim() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    blocks.swap(cache_);
    bytes_cached_ = 0;
  }
  for (auto& [size, list] : blocks)
    for (void* data : list) backend_->deallocate(data, size);
}

size_t Device::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return bytes_in_use_;
}

size_t Device::bytes_cached() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return bytes_cached_;
}

}  // namespace mpsx

#include "mpsx/device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"

namespace mpsx {
namespace detail {
std::atomic<uint64_t> process_generation{0};
std::atomic<int> abandoned_threads{0};

namespace {
// Writers first: a fork() waits for the holds under way, not for a moment
// when no queue is busy.
void init_runtime_work_lock(pthread_rwlock_t* lock) {
  pthread_rwlockattr_t attributes;
  pthread_rwlockattr_init(&attributes);
#ifdef __GLIBC__  // whose locks let readers go first unless told otherwise
  pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
  pthread_rwlock_init(lock, &attributes);
  pthread_rwlockattr_destroy(&attributes);
}

// Made when the library loads, before any queue thread runs: a thread making
// it at a fork() would leave the child a lock, or a static's guard, never
// made. The child makes it anew: glibc tells a write lock from a read lock by
// the writer's thread id, which the child's thread does not have. Never
// destroyed: threads may hold it at exit.
pthread_rwlock_t runtime_work_lock;
const bool runtime_work_lock_made = [] {
  init_runtime_work_lock(&runtime_work_lock);
  pthread_atfork([] { pthread_rwlock_wrlock(&runtime_work_lock); },
                 [] { pthread_rwlock_unlock(&runtime_work_lock); },
                 [] { init_runtime_work_lock(&runtime_work_lock); });
  return true;
}();
thread_local int runtime_work_depth = 0;
}  // namespace

RuntimeWork::RuntimeWork() {
  if (runtime_work_depth++ == 0) pthread_rwlock_rdlock(&runtime_work_lock);
}
RuntimeWork::~RuntimeWork() {
  if (--runtime_work_depth == 0) pthread_rwlock_unlock(&runtime_work_lock);
}
RuntimeWorkPause::RuntimeWorkPause() : depth_(runtime_work_depth) {
  if (depth_ == 0) return;
  runtime_work_depth = 0;
  pthread_rwlock_unlock(&runtime_work_lock);
}
RuntimeWorkPause::~RuntimeWorkPause() {
  if (depth_ == 0) return;
  pthread_rwlock_rdlock(&runtime_work_lock);
  runtime_work_depth = depth_;
}
}  // namespace detail

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

// Whether blocks of class `bytes` are cut from slabs. Under AddressSanitizer
// every block is an allocation of its own, so that a write past one is caught.
bool slabbed(size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  (void)bytes;
  return false;
#else
  return bytes <= Device::kSlabBlockLimit;
#endif
}

// Backends built as libraries of their own (libmpsx_cuda.so, or
// libmpsx_metal.dylib on macOS, beside this library) register themselves
// when loaded. One that cannot load (no CUDA libraries on this machine) is
// skipped: the cpu backend always remains, and Device::named says why the
// other is missing.
struct LoadableBackend {
  const char* kind;
  const char* file;
  const char* remedy;  // for a library that is there but cannot load
};
constexpr LoadableBackend kLoadableBackends[] = {
    {"cuda", "libmpsx_cuda.so", "pip install 'mpsx[cuda]' installs the CUDA runtime, cuDNN and cuBLAS it needs"},
    {"metal", "libmpsx_metal.dylib", "it needs macOS 12 or later on a Mac with Metal"},
};

std::vector<std::string>& load_errors() {
  static std::vector<std::string> errors;
  return errors;
}

// Why each loadable backend has no device, by kind.
std::vector<std::pair<std::string, std::string>>& unavailable() {
  static std::vector<std::pair<std::string, std::string>> reasons;
  return reasons;
}

// Why this build lacks a backend: the configure step's reason (CMakeLists.txt).
std::string not_built(const std::string& kind) {
#ifdef MPSX_CUDA_NOT_BUILT
  if (kind == "cuda") return "this build of mpsx has no cuda backend (" MPSX_CUDA_NOT_BUILT ")";
#endif
#ifndef __APPLE__
  if (kind == "metal") return "the metal backend runs only on macOS";
#endif
  return "this build of mpsx has no " + kind + " backend";
}

void load_backend_libraries() {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void*>(&register_backend), &self) || !self.dli_fname) return;
  std::string directory(self.dli_fname);
  directory = directory.substr(0, directory.find_last_of('/') + 1);
  for (const auto& backend : kLoadableBackends) {
    std::string path = directory + backend.file;
    if (access(path.c_str(), F_OK) != 0) {
      unavailable().emplace_back(backend.kind, not_built(backend.kind));
      continue;
    }
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* error = dlerror();
      std::string message = error ? error : path + ": could not be loaded";
      load_errors().push_back(message);
      unavailable().emplace_back(backend.kind, "the " + std::string(backend.kind) + " backend (" + path +
                                                    ") could not be loaded: " + message + "; " + backend.remedy);
    }
  }
}

std::string unavailable_reason(const std::string& kind) {
  for (const auto& [k, reason] : unavailable())
    if (k == kind) return reason;
  return "";
}

}  // namespace

const std::vector<std::string>& backend_load_errors() { return load_errors(); }

void register_backend(int priority, BackendEnumerator enumerate) {
  registrations().push_back({priority, enumerate});
}

void report_backend_unavailable(const char* kind, const std::string& reason) {
  unavailable().emplace_back(kind, "the " + std::string(kind) + " backend found no device: " + reason);
}

Device::Device(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      name_(backend_->device_name()),
      generation_(detail::process_generation.load(std::memory_order_relaxed)) {}

void Device::fail_forked() const {
  fail<StateError>("device ", name_, " was made before fork(), in the parent process: its queues' threads, memory and "
                   "GPU context stay there, so its objects (command queues, command buffers, images, buffers, "
                   "kernels) cannot be used in the child; make a new mpsx.Device() in the child");
}

Device::~Device() { trim(); }

const char* Device::backend_name() const { return backend_->kind(); }

bool Device::host_addressable() const { return backend_->host_addressable(); }
bool Device::deterministic() const { return backend_->deterministic; }
void Device::set_deterministic(bool value) { backend_->deterministic = value; }

const std::vector<std::shared_ptr<Device>>& Device::all() {
  static std::once_flag loaded;
  std::call_once(loaded, [] {
    load_backend_libraries();
    pthread_atfork(nullptr, nullptr, [] { detail::process_generation.fetch_add(1); });
  });
  static std::mutex mutex;
  // Never freed: in a child of fork() the parent's devices stay alive, so
  // that nothing of theirs is released through a GPU context the child lacks.
  static std::vector<std::shared_ptr<Device>>* devices = nullptr;
  static uint64_t generation = 0;
  std::lock_guard<std::mutex> lock(mutex);
  const uint64_t now = detail::process_generation.load();
  if (devices && generation == now) return *devices;
  auto list = registrations();
  std::stable_sort(list.begin(), list.end(),
                   [](const Registration& a, const Registration& b) { return a.priority > b.priority; });
  auto* found = new std::vector<std::shared_ptr<Device>>;
  for (const auto& r : list)
    for (auto& backend : r.enumerate()) found->push_back(std::make_shared<Device>(std::move(backend)));
  devices = found;
  generation = now;
  return *devices;
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
  // "cuda:1" where no cuda device is present: why the backend is missing.
  std::string kind = name.substr(0, name.find(':'));
  bool kind_present = std::any_of(devices.begin(), devices.end(),
                                  [&](const auto& d) { return kind == d->backend_name(); });
  std::string reason = kind_present ? "" : unavailable_reason(kind);
  fail<ArgumentError>("no device named '", name, "'; devices present: ", present, reason.empty() ? "" : "; ",
                      reason);
}

const std::shared_ptr<CommandQueue>& Device::command_queue() {
  check_process();
  std::call_once(queue_once_, [this] { queue_ = new_command_queue(); });
  return queue_;
}

std::shared_ptr<CommandQueue> Device::new_command_queue() {
  check_process();
  return std::make_shared<CommandQueue>(shared_from_this());
}

void* Device::allocate(size_t bytes, size_t* capacity) {
  check_process();
  if (bytes > kMaxAllocation)
    fail<OutOfMemoryError>("cannot allocate ", bytes, " bytes on device ", name_, ": the largest allocation is ",
                           kMaxAllocation, " bytes (2^48)");
  const SizeClass cls = size_class(bytes);
  *capacity = cls.bytes;
  cache_lock_.lock();
  if (cls.index < cache_.size()) {
    CachedClass& cached = cache_[cls.index];
    void* data = nullptr;
    if (!cached.blocks.empty()) {
      std::pop_heap(cached.blocks.begin(), cached.blocks.end(), std::greater<>());
      data = cached.blocks.back();
      cached.blocks.pop_back();
      bytes_cached_ -= cls.bytes;
    } else if (cached.slab_left) {
      data = cut_from_slab(cached);
      if (++cached.count > cached.blocks.capacity()) cached.blocks.reserve(2 * cached.count);
      reserve_deferred();
    }
    if (data) {
      bytes_in_use_ += cls.bytes;
      peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
      cache_lock_.unlock();
      return data;
    }
  }
  cache_lock_.unlock();
  const size_t backend_bytes = slabbed(cls.bytes) ? kSlabBytes : cls.bytes;
  void* data = nullptr;
  try {
    data = backend_->allocate(backend_bytes);
  } catch (const OutOfMemoryError&) {
    trim();
    data = backend_->allocate(backend_bytes);
  }
  cache_lock_.lock();
  if (cache_.size() <= cls.index) cache_.resize(cls.index + 1);
  CachedClass& cached = cache_[cls.index];
  cached.bytes = cls.bytes;
  if (slabbed(cls.bytes)) {
    // Another thread's slab of this class, cut meanwhile, is left as it is.
    slabs_.push_back(std::make_unique<Slab>(Slab{static_cast<char*>(data)}));
    cached.slab = slabs_.back().get();
    cached.slab_left = kSlabBytes;
    data = cut_from_slab(cached);
  }
  bytes_in_use_ += cls.bytes;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  if (++cached.count > cached.blocks.capacity())  // so release() never allocates
    cached.blocks.reserve(2 * cached.count);
  reserve_deferred();
  cache_lock_.unlock();
  return data;
}

void* Device::cut_from_slab(CachedClass& cached) {
  void* block = cached.slab->base + (kSlabBytes - cached.slab_left);
  ++cached.slab->blocks_cut;
  cached.slab_left -= cached.bytes;
  if (cached.slab_left < cached.bytes) cached.slab_left = 0;
  return block;
}

namespace {
// The command buffer this thread finishes, while it does: its queue, the
// queue's device and its place among the queue's commits.
thread_local const void* deferring_queue = nullptr;
thread_local const Device* deferring_device = nullptr;
thread_local uint64_t deferring_sequence = 0;
}  // namespace

Device::DeferringReleases::DeferringReleases(const CommandQueue& queue, uint64_t sequence)
    : previous_queue_(deferring_queue), previous_device_(deferring_device), previous_sequence_(deferring_sequence) {
  deferring_queue = &queue;
  deferring_device = &queue.device();
  deferring_sequence = sequence;
}

Device::DeferringReleases::~DeferringReleases() {
  deferring_queue = previous_queue_;
  deferring_device = previous_device_;
  deferring_sequence = previous_sequence_;
}

// With the cache lock held, for each block made: room to defer every block,
// so that release() never allocates.
void Device::reserve_deferred() {
  if (++block_count_ > deferred_.capacity()) deferred_.reserve(2 * block_count_);
}

// With the cache lock held.
void Device::cache_block(void* data, size_t capacity) {
  auto& blocks = cache_[size_class(capacity).index].blocks;
  blocks.push_back(data);
  std::push_heap(blocks.begin(), blocks.end(), std::greater<>());
}

void Device::release(void* data, size_t capacity) {
  cache_lock_.lock();
  if (deferring_device == this)  // memory of other devices is released as usual
    deferred_.push_back(Deferred{deferring_queue, deferring_sequence, data, capacity});
  else
    cache_block(data, capacity);
  bytes_in_use_ -= capacity;
  bytes_cached_ += capacity;
  cache_lock_.unlock();
}

void Device::release_deferred(const CommandQueue& queue, uint64_t sequence) {
  cache_lock_.lock();
  auto kept = std::remove_if(deferred_.begin(), deferred_.end(), [&](const Deferred& d) {
    if (d.queue != &queue || d.sequence > sequence) return false;
    cache_block(d.data, d.capacity);
    return true;
  });
  deferred_.erase(kept, deferred_.end());
  cache_lock_.unlock();
}

void Device::trim() {
  std::vector<std::pair<void*, size_t>> freed;
  cache_lock_.lock();
  for (const Deferred& d : deferred_) cache_block(d.data, d.capacity);
  deferred_.clear();
  for (auto& cached : cache_) {
    if (slabbed(cached.bytes)) continue;
    for (void* data : cached.blocks) freed.emplace_back(data, cached.bytes);
    cached.count -= cached.blocks.size();
    block_count_ -= cached.blocks.size();
    bytes_cached_ -= cached.blocks.size() * cached.bytes;
    cached.blocks.clear();
  }
  trim_slabs(freed);
  cache_lock_.unlock();
  for (auto& [data, bytes] : freed) backend_->deallocate(data, bytes);
}

// With the cache lock held: the slabs all of whose blocks are cached go to
// `freed`, their blocks out of the cache.
void Device::trim_slabs(std::vector<std::pair<void*, size_t>>& freed) {
  if (slabs_.empty()) return;
  std::sort(slabs_.begin(), slabs_.end(), [](const auto& a, const auto& b) { return a->base < b->base; });
  auto slab_of = [this](void* block) {
    auto after = std::upper_bound(slabs_.begin(), slabs_.end(), static_cast<char*>(block),
                                  [](char* b, const auto& slab) { return b < slab->base; });
    return (after - 1)->get();
  };
  for (auto& slab : slabs_) slab->blocks_cached = 0;
  for (auto& cached : cache_)
    if (cached.bytes && slabbed(cached.bytes))
      for (void* block : cached.blocks) ++slab_of(block)->blocks_cached;
  auto unused = [](const Slab* slab) { return slab->blocks_cached == slab->blocks_cut; };
  for (auto& cached : cache_) {
    if (!cached.bytes || !slabbed(cached.bytes)) continue;
    const size_t before = cached.blocks.size();
    cached.blocks.erase(std::remove_if(cached.blocks.begin(), cached.blocks.end(),
                                       [&](void* block) { return unused(slab_of(block)); }),
                        cached.blocks.end());
    std::make_heap(cached.blocks.begin(), cached.blocks.end(), std::greater<>());
    cached.count -= before - cached.blocks.size();
    block_count_ -= before - cached.blocks.size();
    bytes_cached_ -= (before - cached.blocks.size()) * cached.bytes;
    if (cached.slab && unused(cached.slab)) {
      cached.slab = nullptr;
      cached.slab_left = 0;
    }
  }
  for (const auto& slab : slabs_)
    if (unused(slab.get())) freed.emplace_back(slab->base, kSlabBytes);
  slabs_.erase(std::remove_if(slabs_.begin(), slabs_.end(), [&](const auto& slab) { return unused(slab.get()); }),
               slabs_.end());
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

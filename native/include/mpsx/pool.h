// Recycled storage for the small objects every encode makes (images, their
// buffers, states), so the steady state of a training loop allocates nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace mpsx {
namespace detail {

// A spinlock: the pools are held for a handful of instructions, by at most
// the encoding thread and one executor thread.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) relax();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  std::atomic<bool> flag_{false};
};

// Free blocks of one size, shared by every pool allocator of that size.
template <size_t Size, size_t Align>
class FreeBlocks {
 public:
  static FreeBlocks& instance() {
    static FreeBlocks* blocks = new FreeBlocks;  // never destroyed: threads may outlive statics
    return *blocks;
  }
  void* take() {
    lock_.lock();
    if (!free_.empty()) {
      void* block = free_.back();
      free_.pop_back();
      lock_.unlock();
      return block;
    }
    lock_.unlock();
    return ::operator new(Size, std::align_val_t(Align));
  }
  void give(void* block) {
    lock_.lock();
    free_.push_back(block);
    lock_.unlock();
  }

 private:
  FreeBlocks() { free_.reserve(1024); }
  SpinLock lock_;
  std::vector<void*> free_;
};

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
    return static_cast<T*>(FreeBlocks<sizeof(T), alignof(T)>::instance().take());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) {
      ::operator delete(p, std::align_val_t(alignof(T)));
      return;
    }
    FreeBlocks<sizeof(T), alignof(T)>::instance().give(p);
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const PoolAllocator<U>&) const { return false; }
};

}  // namespace detail

// std::make_shared from recycled storage.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(detail::PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace mpsx

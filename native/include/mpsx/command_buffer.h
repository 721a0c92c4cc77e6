// MTLCommandQueue / MTLCommandBuffer: commands are recorded at encode time and
// run by the queue's executor after commit, in commit order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpsx/errors.h"

namespace mpsx {

class Buffer;
class CommandBuffer;
class Device;
class Executor;
class CommandQueue;
class Image;

// Every blocking wait of the runtime (wait_until_completed, wait_until_idle,
// DLPack exports, the wait at exit) waits in slices of kWaitSlice and calls
// the process's interrupt check between them. The Python module installs one
// that runs pending signal handlers on Python's main thread and throws what
// they raise, so Ctrl-C ends a wait within a slice; the work waited for goes
// on, and a later wait on it still works.
using InterruptCheck = void (*)();
void set_interrupt_check(InterruptCheck check);
void check_interrupt();
inline constexpr std::chrono::milliseconds kWaitSlice{10};
// Calls wait(kWaitSlice), which waits at most that long and returns whether
// what it waits for happened, until it does, checking for interrupts in between.
template <class Wait>
void wait_in_slices(Wait&& wait) {
  while (!wait(kWaitSlice)) check_interrupt();
}

enum class CommandBufferStatus : uint8_t { NotEnqueued, Committed, Completed, Error };

// The part of a command buffer that resources refer to after it is gone.
struct Completion {
  std::atomic<CommandBufferStatus> status{CommandBufferStatus::NotEnqueued};
  // The queue that runs the command buffer, for ordering or waiting for a
  // pending write when memory is handed to another library (DLPack).
  std::weak_ptr<CommandQueue> queue;
  bool done() const {
    auto s = status.load(std::memory_order_acquire);
    return s == CommandBufferStatus::Completed || s == CommandBufferStatus::Error;
  }
};

// A callable handed down a call without copying or allocating; it refers to
// `f`, which must outlive it.
class FunctionRef {
 public:
  template <class F>
  FunctionRef(F& f) : object_(&f), call_([](void* o) { (*static_cast<F*>(o))(); }) {}  // NOLINT: implicit
  void operator()() const { call_(object_); }

 private:
  void* object_;
  void (*call_)(void*);
};

// What a backend hands to commands while they run (a cpu scratchpad, a CUDA
// stream, ...). Each backend derives its own.
class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
  // Runs `first` and `second`, which write nothing the other reads or
  // writes: one after the other here; a backend whose device runs work side
  // by side may run them concurrently (cuda: `second` on a second stream),
  // as Metal overlaps dispatches that share no tracked resource.
  virtual void run_concurrently(FunctionRef first, FunctionRef second) {
    first();
    second();
  }
  // Overlapped work (a data-parallel graph's all-reduces and what follows
  // them): the commands between begin_overlapped and end_overlapped run
  // after the queue's work before begin_overlapped and after the earlier
  // overlapped work, beside the commands after end_overlapped, until
  // join_overlapped makes the later commands wait for all of it. A command
  // buffer's run joins at its end. Here: in order, as the other commands;
  // cuda: on a stream of their own.
  virtual void begin_overlapped() {}
  virtual void end_overlapped() {}
  virtual void join_overlapped() noexcept {}
  // Memory operations ordered with the other commands of the queue.
  virtual void copy(void* destination, const void* source, size_t bytes) = 0;
  virtual void fill_zero(void* destination, size_t bytes) = 0;
  // The same on whole images, in a Buffer or in a backend's ImageStorage:
  // `from` (all its images) into images [first, first + from's count) of `to`.
  virtual void copy_images(const Image& from, const Image& to, int64_t first);
  // `rows` rows of `bytes` bytes, `source_pitch` and `destination_pitch`
  // bytes apart (a copy per row here; cuda: one 2-D copy).
  virtual void copy_rows(void* destination, size_t destination_pitch, const void* source, size_t source_pitch,
                         size_t bytes, size_t rows);
  virtual void fill_zero_image(const Image& image);
  // Runs the commands of `recorded`, a replayable command buffer that was
  // never committed, as commands of the command buffer running now, and
  // throws what the first that fails throws: here, the commands themselves;
  // cuda: the CUDA graph captured from them, from their second run on.
  virtual void run_recording(CommandBuffer& recorded);
};

// What a recorded command's run depends on, so that a command buffer whose
// commands all have keys equal to an earlier one's can run that one's CUDA
// graph instead (command buffers that capture themselves). Words name the
// work (the record site, primitives, shapes, scalars); addresses the memory
// it touches. Two commands of one record site with equal keys do the same
// work on the same memory: a site's key covers everything its command reads
// when it runs, and its command does nothing but device work on the
// context's streams.
class CommandKey {
 public:
  void add_word(uint64_t word) { words_.push_back(word); }
  void add_address(const void* address) { addresses_.push_back(reinterpret_cast<uintptr_t>(address)); }
  // A value of no pointers, by its bytes.
  template <class T>
  void add_value(const T& value) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>, "not a plain value");
    uint64_t words[(sizeof(T) + 7) / 8] = {};
    std::memcpy(words, &value, sizeof(T));
    for (uint64_t w : words) add_word(w);
  }
  const std::vector<uint64_t>& words() const { return words_; }
  const std::vector<uint64_t>& addresses() const { return addresses_; }
  void clear() {
    words_.clear();
    addresses_.clear();
  }

 private:
  std::vector<uint64_t> words_, addresses_;
};

// The parts of a command's key that are not values: found by argument-
// dependent lookup, so a family adds those of its own types beside them.
class Buffer;
class Image;
template <class D>
class PrimitiveInterface;
void add_to_key(CommandKey& key, const Buffer& buffer);
void add_to_key(CommandKey& key, const Image& image);
template <class D>
void add_to_key(CommandKey& key, const PrimitiveInterface<D>& primitive) {
  key.add_word(primitive.identity);
}
template <class T>
void add_to_key(CommandKey& key, const std::shared_ptr<T>& pointer) {
  key.add_word(pointer != nullptr);
  if (pointer) add_to_key(key, *pointer);
}
template <class T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>, int> = 0>
void add_to_key(CommandKey& key, const T& value) {
  key.add_value(value);
}

// A struct of plain values (no pointers) as a key part, by its bytes.
template <class T>
struct KeyValue {
  const T& value;
};
template <class T>
KeyValue<T> as_value(const T& value) {
  return {value};
}
template <class T>
void add_to_key(CommandKey& key, const KeyValue<T>& part) {
  key.add_value(part.value);
}

// The parts a command is keyed by, as CommandBuffer::record takes them.
template <class... Parts>
struct KeyParts {
  std::tuple<const Parts&...> parts;
};
template <class... Parts>
KeyParts<Parts...> keyed_by(const Parts&... parts) {
  return {std::tie(parts...)};
}

// One recorded unit of work.
class Command {
 public:
  virtual ~Command() = default;
  virtual void execute(ExecutionContext& context) = 0;
  Command* next = nullptr;
  // Its key's words, then its addresses, in the command buffer's memory;
  // none where it was recorded without one.
  const uint64_t* key = nullptr;
  uint32_t key_words = 0, key_addresses = 0;
};

namespace detail {
template <class F>
class CommandOf final : public Command {
 public:
  explicit CommandOf(F&& f) : f_(std::move(f)) {}
  void execute(ExecutionContext& context) override { f_(context); }
  // Its address names the record site in keys.
  static inline const char site = 0;

 private:
  F f_;
};

// Fixed-size blocks that command buffers of one queue reuse, so recording
// allocates nothing once the queue has warmed up.
class BlockPool {
 public:
  static constexpr size_t kBlockSize = 32 * 1024;
  ~BlockPool();
  void* take();
  void give(void* block);

 private:
  std::mutex mutex_;
  std::vector<void*> free_;
};

// A buffer the commands of a command buffer use, kept in its command memory.
struct BufferUse {
  std::shared_ptr<Buffer> buffer;
  BufferUse* next = nullptr;
};
}  // namespace detail

class CommandBuffer : public std::enable_shared_from_this<CommandBuffer> {
 public:
  // What an executor keeps with a replayable command buffer between runs
  // (cuda: the CUDA graph captured from its commands).
  struct Recording {
    virtual ~Recording() = default;
  };

  // A replayable command buffer keeps its commands, host steps and completed
  // handlers after it completes, and runs them all again on each replay().
  CommandBuffer(std::shared_ptr<CommandQueue> queue, bool replayable);
  ~CommandBuffer();
  CommandBuffer(const CommandBuffer&) = delete;
  CommandBuffer& operator=(const CommandBuffer&) = delete;

  CommandQueue& queue() const { return *queue_; }
  Device& device() const;
  const std::shared_ptr<Device>& device_ptr() const;

  // Records f(ExecutionContext&) to run after commit. Everything f captures
  // lives until the command buffer completes.
  template <class F>
  void record(F&& f) {
    record_command(std::forward<F>(f));
    keyed_ = false;
  }
  // The same, for a command whose run depends on `key`'s parts and nothing
  // else (CommandKey): a command buffer of such commands only captures
  // itself. The parts are read before f is recorded, so f may not move
  // from them.
  template <class... Parts, class F>
  void record(const KeyParts<Parts...>& key, F&& f) {
    if (!keyed_ || !keys_commands_) {
      record(std::forward<F>(f));
      return;
    }
    CommandKey& k = key_scratch();
    k.clear();
    k.add_word(reinterpret_cast<uintptr_t>(&detail::CommandOf<std::decay_t<F>>::site));
    std::apply([&](const auto&... part) { (add_to_key(k, part), ...); }, key.parts);
    Command& command = record_command(std::forward<F>(f));
    keep_key(command, k);
  }

  // Throws StateError unless commands may still be recorded.
  void check_encodable() const;
  // Whether every command has a key (and keys are recorded at all): the
  // command buffer may run as an earlier one's CUDA graph.
  bool keyed() const { return keys_commands_ && keyed_ && command_count_ > 0; }
  // Of the keys of all commands in order: all of them (the exact work), and
  // without their addresses (the work on other memory).
  uint64_t key_hash() const;
  uint64_t structure_hash() const;
  // The keys of all commands as one sequence, and whether they equal one.
  void copy_keys(std::vector<uint64_t>& to) const;
  bool keys_equal(const std::vector<uint64_t>& keys) const;
  // Records that the commands read or write `buffer`: from each commit or
  // replay until the command buffer completes, host writes into it are
  // refused (Buffer::check_host_writable).
  void uses(Buffer& buffer);

  // The commands recorded so far. discard_since drops those recorded after
  // it, for a call that fails after recording part of its work (gathering a
  // list of images into a batch), so that nothing of it is left.
  struct Mark {
    Command* tail = nullptr;
    size_t count = 0;
    detail::BufferUse* last_use = nullptr;
  };
  Mark mark() const { return {tail_, command_count_, last_use_}; }
  void discard_since(const Mark& mark);
  // Records what `encode_commands` records as overlapped work
  // (ExecutionContext::begin_overlapped to end_overlapped; ended also where
  // it throws), and the join that makes later commands wait for all of it.
  // Keyed commands, so that a command buffer of keyed ones stays so.
  void record_overlapped(FunctionRef encode_commands);
  void record_join_overlapped();
  // Records f to run before the commands recorded since `mark`: for a
  // command that depends on what was recorded after its place (the check of
  // all the buckets of an all-reduce, before its first collective). Marks
  // taken between `mark` and this call are stale afterwards.
  template <class F>
  void record_at(const Mark& mark, F&& f) {
    Command* previous = tail_;
    record(std::forward<F>(f));
    if (previous == mark.tail) return;
    keyed_ = false;  // keys name commands in order
    Command* command = tail_;
    previous->next = nullptr;
    tail_ = previous;
    Command*& after = mark.tail ? mark.tail->next : head_;
    command->next = after;
    after = command;
  }
  void commit();
  // MPSCommandBuffer's -commitAndContinue: commits this command buffer and
  // returns a new one of the same queue (replayable if this one is), which
  // runs after it and on which this one's temporary objects stay usable.
  std::shared_ptr<CommandBuffer> commit_and_continue();
  // Runs the commands once more, on the same resources with the arguments
  // they were encoded with. Only a replayable command buffer that completed
  // without error can be replayed.
  void replay();
  bool replayable() const { return replayable_; }
  // 1 for the first run after commit(), 2 for the first replay, ...
  uint64_t run_count() const { return run_count_; }
  void wait_until_completed();
  CommandBufferStatus status() const { return completion_->status.load(std::memory_order_acquire); }
  // The exception raised while running, if status() == Error.
  std::exception_ptr error() const;
  // Called on the executor's thread once the command buffer has completed
  // (or failed); immediately if that already happened.
  void add_completed_handler(std::function<void(CommandBuffer&)> handler);
  // Host work to run once the commands have completed and before the
  // completed handlers: the data source updates of MPS's CPU training style.
  // A step that throws fails the command buffer and skips the later steps.
  void add_host_step(std::function<void()> step);
  // A host step that reloads `kernel`'s weights from its data source. The
  // reload gives the kernel new buffers, which the commands of a replay would
  // not read: refused on a replayable command buffer.
  void add_host_reload(const std::string& kernel, std::function<void()> step);
  const std::shared_ptr<const Completion>& completion() const { return completion_const_; }
  // What MPS calls the command buffer's heap, which -commitAndContinue moves
  // forward: temporary objects made for a command buffer are usable on those
  // continuing it. The completion of the first of them stands for it.
  const std::shared_ptr<const Completion>& temporary_heap() const { return temporary_heap_; }
  // The storage of the heap: a temporary image's buffer, once the command
  // that reads it last is recorded, serves the temporary images of its size
  // made after it on this command buffer or those continuing it. Their
  // commands run in order, so the later writes follow every read.
  void give_temporary_storage(std::shared_ptr<Buffer> buffer);
  std::shared_ptr<Buffer> take_temporary_storage(size_t bytes);
  size_t command_count() const { return command_count_; }
  // Calls f(Buffer&) for each buffer the commands use (CommandBuffer::uses).
  template <class F>
  void for_each_use(F&& f) const {
    for (auto* use = first_use_; use; use = use->next) f(*use->buffer);
  }
  // Calls the completed handlers with `done` in place of this command
  // buffer: those a recording's encode added (a data source that trains on
  // the device), once the command buffer that ran it completed. Only for a
  // command buffer that gets no more handlers.
  void run_completed_handlers_for(CommandBuffer& done);
  bool has_completed_handlers() const;

  // For executors: runs the recorded commands in order. The first command
  // that throws stops the rest and puts the command buffer in Error; returns
  // false then.
  bool execute(ExecutionContext& context);
  // For executors that tried a run they then discard (a failed CUDA graph
  // capture): forgets the error that run recorded.
  void clear_error();
  // For a recording run as commands of another command buffer: throws the
  // error the run recorded, if any, and forgets it.
  void rethrow_error();
  std::unique_ptr<Recording>& recording() { return recording_; }
  // For executors: a failure found after execute (an asynchronous device
  // error) puts the command buffer in Error, unless one is recorded already.
  void set_error(std::exception_ptr error);
  // For executors: releases what the commands held, runs the completed
  // handlers and wakes waiters.
  void finish();

 private:
  template <class F>
  Command& record_command(F&& f) {
    check_encodable();
    using C = detail::CommandOf<std::decay_t<F>>;
    static_assert(sizeof(C) <= detail::BlockPool::kBlockSize, "command too large");
    void* at = allocate(sizeof(C), alignof(C));
    Command* command = new (at) C(std::forward<F>(f));
    if (tail_) tail_->next = command; else head_ = command;
    tail_ = command;
    ++command_count_;
    return *command;
  }
  static CommandKey& key_scratch();
  void keep_key(Command& command, const CommandKey& key);
  void* allocate(size_t size, size_t align);
  void release_commands();
  void destroy_uses(detail::BufferUse* first);

  void submit();

  std::shared_ptr<CommandQueue> queue_;
  const bool replayable_;
  const bool keys_commands_;  // CommandQueue::captures_command_buffers when made
  bool keyed_ = true;         // no command recorded without a key
  const uint64_t id_;  // unique in the process
  uint64_t run_count_ = 0;
  uint64_t sequence_ = 0;  // of the last commit or replay among the queue's
  std::unique_ptr<Recording> recording_;
  std::shared_ptr<Completion> completion_;
  std::shared_ptr<const Completion> completion_const_;
  std::shared_ptr<const Completion> temporary_heap_;
  struct TemporaryStorage {
    std::vector<std::shared_ptr<Buffer>> free;
  };
  std::shared_ptr<TemporaryStorage> temporary_storage_;
  bool continued_ = false;  // by commit_and_continue, which shares the heap
  Command* head_ = nullptr;
  Command* tail_ = nullptr;
  size_t command_count_ = 0;
  detail::BufferUse* first_use_ = nullptr;
  detail::BufferUse* last_use_ = nullptr;
  std::vector<void*> blocks_;
  char* cursor_ = nullptr;
  char* limit_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable completed_;
  std::exception_ptr error_;
  std::vector<std::function<void(CommandBuffer&)>> handlers_;
  std::vector<std::function<void()>> host_steps_;
  bool finished_ = false;
  std::thread::id handler_thread_;
};

class CommandQueue : public std::enable_shared_from_this<CommandQueue> {
 public:
  explicit CommandQueue(std::shared_ptr<Device> device);
  ~CommandQueue();

  Device& device() const { return *device_; }
  const std::shared_ptr<Device>& device_ptr() const { return device_; }
  std::shared_ptr<CommandBuffer> command_buffer(bool replayable = false);
  // Blocks until every committed command buffer has finished.
  void wait_until_idle();
  // wait_until_idle() on every queue of this process alive, for an orderly
  // process exit, for at most `timeout`: false if work is still running then.
  static bool wait_until_all_idle(std::chrono::milliseconds timeout);

  detail::BlockPool& block_pool() { return blocks_; }
  Executor& executor() { return *executor_; }

  // Command buffers that capture themselves: where the backend can (cuda),
  // a command buffer whose commands all have keys equal to an earlier
  // commit's runs as that commit's CUDA graph. On by default;
  // MPSX_CAPTURE_ENCODES=0 in the environment turns it off for new queues.
  // Applies to command buffers made after it is set.
  bool captures_command_buffers() const { return captures_command_buffers_.load(std::memory_order_relaxed); }
  void set_captures_command_buffers(bool on);
  // Command buffers that ran as an earlier one's CUDA graph.
  uint64_t captured_command_buffer_count() const { return captured_command_buffers_.load(std::memory_order_relaxed); }
  void count_captured_command_buffer() { captured_command_buffers_.fetch_add(1, std::memory_order_relaxed); }
  // For command buffers: the place of a commit or replay among the queue's.
  uint64_t next_sequence() { return commits_.fetch_add(1, std::memory_order_relaxed) + 1; }
  // Whether a command buffer made now records the keys of its commands:
  // while capturing, unless the last kKeyedBeforeBackOff keyed commits
  // repeated no earlier keys (a loop whose steps never repeat: Adam's time
  // step), after which one command buffer in kBackOffInterval does, until
  // one repeats. Setting captures_command_buffers starts over.
  bool keys_next_command_buffer();
  // For executors: whether a keyed commit's keys were seen before.
  void note_keys_repeated(bool repeated);
  static constexpr uint32_t kKeyedBeforeBackOff = 64, kBackOffInterval = 16;

 private:
  std::shared_ptr<Device> device_;
  detail::BlockPool blocks_;
  std::unique_ptr<Executor> executor_;
  std::atomic<bool> captures_command_buffers_{false};
  std::atomic<uint64_t> captured_command_buffers_{0};
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint32_t> keyed_without_repeat_{0};
  std::atomic<uint64_t> unkeyed_in_back_off_{0};
};

}  // namespace mpsx

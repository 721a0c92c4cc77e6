#include "mpsx/command_buffer.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "mpsx/backend.h"
#include "mpsx/buffer.h"
#include "mpsx/capture.h"
#include "mpsx/device.h"

namespace mpsx {

namespace {
std::atomic<InterruptCheck> interrupt_check{nullptr};
}  // namespace

void set_interrupt_check(InterruptCheck check) { interrupt_check.store(check); }

void check_interrupt() {
  if (InterruptCheck check = interrupt_check.load(std::memory_order_relaxed)) check();
}

namespace detail {

BlockPool::~BlockPool() {
  for (void* block : free_) ::operator delete(block, std::align_val_t(64));
}

void* BlockPool::take() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      void* block = free_.back();
      free_.pop_back();
      return block;
    }
  }
  return ::operator new(kBlockSize, std::align_val_t(64));
}

void BlockPool::give(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(block);
}

}  // namespace detail

namespace {
std::atomic<uint64_t> next_command_buffer_id{1};

// The queue whose command buffer this thread is finishing (running its host
// steps and completed handlers), if any. The queue finishes nothing else
// until they return, so a wait on it from here would never end.
thread_local const CommandQueue* finishing_queue = nullptr;

class Finishing {
 public:
  explicit Finishing(const CommandQueue& queue) : previous_(finishing_queue) { finishing_queue = &queue; }
  ~Finishing() { finishing_queue = previous_; }
  Finishing(const Finishing&) = delete;
  Finishing& operator=(const Finishing&) = delete;

 private:
  const CommandQueue* previous_;
};

void check_not_finishing(const CommandQueue& queue, const char* call) {
  if (finishing_queue == &queue)
    fail<Error>(call, " in a completed handler or a data source update of the same command queue would wait "
                "forever: the queue finishes its command buffers one at a time on this thread, so the one waited "
                "for can not finish before this one; wait on another thread, or use another command queue");
}

const char* status_name(CommandBufferStatus s) {
  switch (s) {
    case CommandBufferStatus::NotEnqueued: return "not_enqueued";
    case CommandBufferStatus::Committed: return "committed";
    case CommandBufferStatus::Completed: return "completed";
    case CommandBufferStatus::Error: return "error";
  }
  return "unknown";
}
}  // namespace

void ExecutionContext::run_recording(CommandBuffer& recorded) {
  recorded.execute(*this);
  recorded.rethrow_error();
}

void add_to_key(CommandKey& key, const Buffer& buffer) {
  key.add_address(buffer.data());
  key.add_word(buffer.length());
}

CommandBuffer::CommandBuffer(std::shared_ptr<CommandQueue> queue, bool replayable)
    : queue_(std::move(queue)),
      replayable_(replayable),
      // A replayable command buffer captures itself from its second run.
      keys_commands_(!replayable && queue_->keys_next_command_buffer()),
      id_(next_command_buffer_id.fetch_add(1, std::memory_order_relaxed)),
      completion_(std::make_shared<Completion>()), completion_const_(completion_), temporary_heap_(completion_) {
  completion_->queue = queue_;
  blocks_.reserve(4);
}

CommandBuffer::~CommandBuffer() {
  recording_.reset();  // a CUDA graph refers to what the commands hold
  release_commands();
}

Device& CommandBuffer::device() const { return queue_->device(); }
const std::shared_ptr<Device>& CommandBuffer::device_ptr() const { return queue_->device_ptr(); }

void CommandBuffer::check_encodable() const {
  device().check_process();
  auto s = status();
  if (s != CommandBufferStatus::NotEnqueued)
    fail<StateError>("the command buffer is ", status_name(s), "; encode onto a new command buffer");
}

void* CommandBuffer::allocate(size_t size, size_t align) {
  auto aligned = [&](char* p) {
    return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + align - 1) & ~(uintptr_t(align) - 1));
  };
  char* at = cursor_ ? aligned(cursor_) : nullptr;
  if (!at || at + size > limit_) {
    char* block = static_cast<char*>(queue_->block_pool().take());
    blocks_.push_back(block);
    cursor_ = block;
    limit_ = block + detail::BlockPool::kBlockSize;
    at = aligned(cursor_);
  }
  cursor_ = at + size;
  return at;
}

CommandKey& CommandBuffer::key_scratch() {
  thread_local CommandKey key;  // grown once, so recording keys allocates nothing after
  return key;
}

void CommandBuffer::keep_key(Command& command, const CommandKey& key) {
  const size_t words = key.words().size(), addresses = key.addresses().size();
  auto* kept = static_cast<uint64_t*>(allocate((words + addresses) * sizeof(uint64_t), alignof(uint64_t)));
  std::copy(key.words().begin(), key.words().end(), kept);
  std::copy(key.addresses().begin(), key.addresses().end(), kept + words);
  command.key = kept;
  command.key_words = static_cast<uint32_t>(words);
  command.key_addresses = static_cast<uint32_t>(addresses);
}

namespace {
// FNV-1a over 64-bit words.
uint64_t mix(uint64_t hash, uint64_t word) { return (hash ^ word) * 0x100000001b3ull; }
constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;
}  // namespace

uint64_t CommandBuffer::key_hash() const {
  uint64_t hash = kHashSeed;
  for (const Command* c = head_; c; c = c->next)
    for (uint32_t i = 0; i < c->key_words + c->key_addresses; ++i) hash = mix(hash, c->key[i]);
  return hash;
}

uint64_t CommandBuffer::structure_hash() const {
  uint64_t hash = kHashSeed;
  for (const Command* c = head_; c; c = c->next)
    for (uint32_t i = 0; i < c->key_words; ++i) hash = mix(hash, c->key[i]);
  return hash;
}

// Each command's key as its word count, address count, words and addresses,
// so that keys of other lengths never line up.
void CommandBuffer::copy_keys(std::vector<uint64_t>& to) const {
  to.clear();
  for (const Command* c = head_; c; c = c->next) {
    to.push_back(c->key_words);
    to.push_back(c->key_addresses);
    to.insert(to.end(), c->key, c->key + c->key_words + c->key_addresses);
  }
}

bool CommandBuffer::keys_equal(const std::vector<uint64_t>& keys) const {
  size_t at = 0;
  for (const Command* c = head_; c; c = c->next) {
    const size_t n = c->key_words + c->key_addresses;
    if (keys.size() - at < n + 2 || keys[at] != c->key_words || keys[at + 1] != c->key_addresses ||
        !std::equal(c->key, c->key + n, keys.begin() + static_cast<std::ptrdiff_t>(at + 2)))
      return false;
    at += n + 2;
  }
  return at == keys.size();
}

void CommandBuffer::uses(Buffer& buffer) {
  check_encodable();
  if (!buffer.mark_used_by(id_)) return;
  auto* use = new (allocate(sizeof(detail::BufferUse), alignof(detail::BufferUse)))
      detail::BufferUse{buffer.shared_from_this(), nullptr};
  if (last_use_) last_use_->next = use; else first_use_ = use;
  last_use_ = use;
}

void CommandBuffer::destroy_uses(detail::BufferUse* first) {
  while (first) {
    detail::BufferUse* next = first->next;
    first->buffer->unmark_used_by(id_);
    first->~BufferUse();
    first = next;
  }
}

void CommandBuffer::discard_since(const Mark& mark) {
  check_encodable();
  destroy_uses(mark.last_use ? mark.last_use->next : first_use_);
  last_use_ = mark.last_use;
  if (last_use_)
    last_use_->next = nullptr;
  else
    first_use_ = nullptr;
  Command* c = mark.tail ? mark.tail->next : head_;
  while (c) {
    Command* next = c->next;
    c->~Command();
    c = next;
  }
  tail_ = mark.tail;
  if (tail_)
    tail_->next = nullptr;
  else
    head_ = nullptr;
  command_count_ = mark.count;
}

void CommandBuffer::release_commands() {
  destroy_uses(first_use_);
  first_use_ = last_use_ = nullptr;
  Command* c = head_;
  head_ = tail_ = nullptr;
  while (c) {
    Command* next = c->next;
    c->~Command();
    c = next;
  }
  for (void* block : blocks_) queue_->block_pool().give(block);
  blocks_.clear();
  cursor_ = limit_ = nullptr;
}

void CommandBuffer::give_temporary_storage(std::shared_ptr<Buffer> buffer) {
  if (!temporary_storage_) temporary_storage_ = std::make_shared<TemporaryStorage>();
  temporary_storage_->free.push_back(std::move(buffer));
}

std::shared_ptr<Buffer> CommandBuffer::take_temporary_storage(size_t bytes) {
  if (!temporary_storage_) return nullptr;
  auto& free = temporary_storage_->free;
  for (size_t i = free.size(); i-- > 0;)
    if (free[i]->length() == bytes) {
      std::shared_ptr<Buffer> buffer = std::move(free[i]);
      free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
      return buffer;
    }
  return nullptr;
}

void CommandBuffer::commit() {
  check_encodable();
  submit();
}

std::shared_ptr<CommandBuffer> CommandBuffer::commit_and_continue() {
  check_encodable();
  // Made first: a failure leaves this one uncommitted, as it was.
  std::shared_ptr<CommandBuffer> next = queue_->command_buffer(replayable_);
  next->temporary_heap_ = temporary_heap_;
  next->temporary_storage_ = temporary_storage_;
  continued_ = true;  // before submit: this one may finish at once, and must leave the shared storage to `next`
  submit();
  return next;
}

void CommandBuffer::replay() {
  device().check_process();
  if (!replayable_)
    fail<StateError>("replay() on a command buffer made without replayable=True; make it with "
                     "CommandQueue.command_buffer(replayable=True)");
  auto s = status();
  if (s == CommandBufferStatus::NotEnqueued)
    fail<StateError>("replay() on a command buffer that was not committed; call commit() first");
  if (s == CommandBufferStatus::Error)
    fail<StateError>("replay() on a command buffer that failed; it can not run again");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s == CommandBufferStatus::Committed || !finished_)
      fail<StateError>("replay() on a command buffer that is still running; call wait_until_completed() first");
    finished_ = false;
  }
  submit();
}

void CommandBuffer::submit() {
  ++run_count_;
  sequence_ = queue_->next_sequence();
  // Device::DeferringReleases: the second commit after a command buffer
  // caches what it released.
  if (sequence_ > 2) device().release_deferred(*queue_, sequence_ - 2);
  for (auto* use = first_use_; use; use = use->next) use->buffer->begin_use();
  completion_->status.store(CommandBufferStatus::Committed, std::memory_order_release);
  queue_->executor().submit(shared_from_this());
}

void CommandBuffer::wait_until_completed() {
  device().check_process();
  if (status() == CommandBufferStatus::NotEnqueued)
    fail<StateError>("wait_until_completed() on a command buffer that was not committed; call commit() first");
  bool finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handler_thread_ == std::this_thread::get_id()) return;  // a completed handler waiting on its own buffer
    finished = finished_;
  }
  if (!finished) {
    check_not_finishing(*queue_, "wait_until_completed()");
    wait_in_slices([&](std::chrono::milliseconds slice) { return queue_->executor().wait_for_device(*this, slice); });
    // Unlocked between slices: the interrupt check takes Python's GIL, which a
    // thread adding a completed handler holds while it takes this lock.
    wait_in_slices([&](std::chrono::milliseconds slice) {
      std::unique_lock<std::mutex> lock(mutex_);
      return completed_.wait_for(lock, slice, [this] { return finished_; });
    });
  }
  device().release_deferred(*queue_, sequence_);
}

std::exception_ptr CommandBuffer::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void CommandBuffer::add_completed_handler(std::function<void(CommandBuffer&)> handler) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!finished_) {
      handlers_.push_back(std::move(handler));
      return;
    }
  }
  handler(*this);
}

void CommandBuffer::run_completed_handlers_for(CommandBuffer& done) {
  // A recording gets no handler after its encode, so the list is read unlocked.
  for (auto& h : handlers_) {
    try {
      h(done);
    } catch (...) {
      // As in finish: a handler cannot fail the command buffer after it completed.
    }
  }
}

bool CommandBuffer::has_completed_handlers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !handlers_.empty();
}

void CommandBuffer::add_host_reload(const std::string& kernel, std::function<void()> step) {
  check_encodable();
  check_not_capturing("a data source update on the host");
  if (replayable_)
    fail<StateError>(kernel, ": a data source update on the host (MPS's CPU update style) can not be encoded onto a "
                     "replayable command buffer; update on the command buffer instead (an optimizer with "
                     "reload_weights_and_biases, or the data source's update_with_command_buffer)");
  add_host_step(std::move(step));
}

void CommandBuffer::record_overlapped(FunctionRef encode_commands) {
  auto end = [this] { record(keyed_by(), [](ExecutionContext& context) { context.end_overlapped(); }); };
  record(keyed_by(), [](ExecutionContext& context) { context.begin_overlapped(); });
  try {
    encode_commands();
  } catch (...) {  // later commands go back on the queue
    end();
    throw;
  }
  end();
}

void CommandBuffer::record_join_overlapped() {
  record(keyed_by(), [](ExecutionContext& context) { context.join_overlapped(); });
}

void CommandBuffer::add_host_step(std::function<void()> step) {
  check_encodable();
  check_not_capturing("a host step");
  host_steps_.push_back(std::move(step));
}

bool CommandBuffer::execute(ExecutionContext& context) {
  for (Command* c = head_; c; c = c->next) {
    try {
      c->execute(context);
    } catch (...) {
      context.join_overlapped();
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      return false;
    }
  }
  context.join_overlapped();
  return true;
}

void CommandBuffer::clear_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = nullptr;
}

void CommandBuffer::rethrow_error() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void CommandBuffer::set_error(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(error);
}

void CommandBuffer::finish() {
  Finishing finishing(*queue_);
  Device::DeferringReleases deferring(*queue_, sequence_);
  // Before the status: a host write made once the status says completed is
  // never refused.
  for (auto* use = first_use_; use; use = use->next) use->buffer->end_use();
  // Host steps read what the commands wrote, as the host may once they completed.
  completion_->status.store(error_ ? CommandBufferStatus::Error : CommandBufferStatus::Completed,
                            std::memory_order_release);
  for (auto& step : host_steps_) {
    if (error_) break;
    try {
      step();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      completion_->status.store(CommandBufferStatus::Error, std::memory_order_release);
    }
  }
  // Commands and steps may hold objects whose release takes other locks (the
  // Python interpreter's among them), so they go before any lock here is taken.
  if (!replayable_) {
    host_steps_.clear();
    release_commands();
  }
  // The last command buffer of the heap's chain ran: nothing takes its storage now.
  if (temporary_storage_ && !continued_) temporary_storage_->free.clear();
  std::vector<std::function<void(CommandBuffer&)>> handlers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (replayable_)
      handlers = handlers_;
    else
      handlers.swap(handlers_);
    handler_thread_ = std::this_thread::get_id();
  }
  for (auto& h : handlers) {
    try {
      h(*this);
    } catch (...) {
      // A handler cannot fail the command buffer after it completed.
    }
  }
  handlers.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    handler_thread_ = std::thread::id();
  }
  completed_.notify_all();
}

namespace {
struct QueueRegistry {
  std::mutex mutex;
  std::vector<CommandQueue*> queues;
};
QueueRegistry& queue_registry() {
  static QueueRegistry* registry = new QueueRegistry;  // outlives every queue
  return *registry;
}
}  // namespace

CommandQueue::CommandQueue(std::shared_ptr<Device> device)
    : device_(std::move(device)), executor_(device_->backend().new_executor()) {
  set_captures_command_buffers(capture_encodes_by_default());
  std::lock_guard<std::mutex> lock(queue_registry().mutex);
  queue_registry().queues.push_back(this);
}

CommandQueue::~CommandQueue() {
  // In a child of fork(), the parent's executor: its thread is not there to
  // be joined, nor its GPU context to release what it holds.
  if (!device_->made_in_this_process()) (void)executor_.release();
  else device_->release_deferred(*this, UINT64_MAX);
  std::lock_guard<std::mutex> lock(queue_registry().mutex);
  auto& queues = queue_registry().queues;
  queues.erase(std::find(queues.begin(), queues.end(), this));
}

bool CommandQueue::wait_until_all_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::shared_ptr<CommandQueue>> alive;
  {
    std::lock_guard<std::mutex> lock(queue_registry().mutex);
    for (CommandQueue* q : queue_registry().queues) {
      auto held = q->weak_from_this().lock();
      if (held && held->device().made_in_this_process()) alive.push_back(std::move(held));
    }
  }
  for (auto& q : alive)
    while (!q->executor().wait_until_idle(kWaitSlice)) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      check_interrupt();
    }
  return true;
}

std::shared_ptr<CommandBuffer> CommandQueue::command_buffer(bool replayable) {
  device_->check_process();
  return std::make_shared<CommandBuffer>(shared_from_this(), replayable);
}

bool CommandQueue::keys_next_command_buffer() {
  if (!captures_command_buffers()) return false;
  if (keyed_without_repeat_.load(std::memory_order_relaxed) < kKeyedBeforeBackOff) return true;
  return unkeyed_in_back_off_.fetch_add(1, std::memory_order_relaxed) % kBackOffInterval == 0;
}

void CommandQueue::note_keys_repeated(bool repeated) {
  if (repeated)
    keyed_without_repeat_.store(0, std::memory_order_relaxed);
  else
    keyed_without_repeat_.fetch_add(1, std::memory_order_relaxed);
}

void CommandQueue::set_captures_command_buffers(bool on) {
  captures_command_buffers_.store(on && executor_->runs_command_buffers_by_key(), std::memory_order_relaxed);
  keyed_without_repeat_.store(0, std::memory_order_relaxed);
}

void CommandQueue::wait_until_idle() {
  device_->check_process();
  check_not_finishing(*this, "wait_until_idle()");
  wait_in_slices([this](std::chrono::milliseconds slice) { return executor_->wait_until_idle(slice); });
  device_->release_deferred(*this, UINT64_MAX);
}

}  // namespace mpsx

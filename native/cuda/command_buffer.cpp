#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend.h"
#include "mpsx/errors.h"

namespace mpsx::cuda {
namespace {

// What the completion thread shares with its executor; the thread keeps its
// own reference, as the cpu executor's worker does.
struct CompletionState : ExecutorQueue<std::pair<std::shared_ptr<CommandBuffer>, cudaEvent_t>> {
  explicit CompletionState(int ordinal) : ordinal(ordinal) {}
  int ordinal;
  // The command buffer the thread waits for, and its event.
  const CommandBuffer* waiting_for = nullptr;
  cudaEvent_t waiting_event = nullptr;
  std::vector<cudaEvent_t> free_events;
};

// Waits for each command buffer's event in commit order, then finishes it:
// releases what it held, runs host steps and completed handlers.
void complete(std::shared_ptr<CompletionState> state) {
  const auto wait_for = [&](const std::pair<std::shared_ptr<CommandBuffer>, cudaEvent_t>& taken) {
    state->waiting_for = taken.first.get();
    state->waiting_event = taken.second;
  };
  mpsx::detail::RuntimeWork working;
  state->start();
  std::pair<std::shared_ptr<CommandBuffer>, cudaEvent_t> next;
  while (state->take(next, wait_for)) {
    {
      DeviceScope scope(state->ordinal);
      cudaError_t status;
      {
        mpsx::detail::RuntimeWorkPause waiting;  // a fork() need not wait for the device
        status = cudaEventSynchronize(next.second);
      }
      if (status != cudaSuccess) {
        try {
          check(status, "a command buffer's kernels");
        } catch (...) {
          next.first->set_error(std::current_exception());
        }
      }
    }
    next.first->finish();
    next.first.reset();
    state->finished([&] {
      state->free_events.push_back(next.second);
      state->waiting_for = nullptr;
    });
  }
}

// The CUDA graph of a replayable command buffer (or of a graph's recording):
// captured on its second run, when its first has sized the queue's scratch
// memory, and launched on every later one, so a run costs one launch.
struct CapturedGraph final : CommandBuffer::Recording {
  explicit CapturedGraph(int ordinal) : ordinal(ordinal) {}
  ~CapturedGraph() override { reset(); }
  void reset() {
    if (!graph) return;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(ordinal);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaSetDevice(previous);
    graph = nullptr;
    exec = nullptr;
  }
  int ordinal;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  uint64_t scratch_generation = 0;
  bool capturable = true;
};

// The CUDA graph of the command buffer's commands, run under a stream
// capture; null where a command can not be captured (a copy from pageable
// host memory, a scratch block that had to grow) or fails: nothing ran then.
cudaGraph_t capture_graph(CudaContext& context, CommandBuffer& command_buffer) {
  cudaStream_t stream = context.stream();  // flushes the copies asked for before
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  bool recorded = command_buffer.execute(context);
  context.flush_copies();
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (recorded && ended == cudaSuccess && graph) return graph;
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  command_buffer.clear_error();
  return nullptr;
}

// Makes `graph` the one `captured` launches: by updating the executable graph
// it has in place (cudaGraphExecUpdate), where it has one of the same
// topology, else by instantiating it. Takes `graph` in either case.
bool take_graph(CapturedGraph& captured, cudaGraph_t graph) {
  if (captured.exec) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(captured.exec, graph, &info) == cudaSuccess) {
      cudaGraphDestroy(captured.graph);
      captured.graph = graph;
      return true;
    }
    cudaGetLastError();
    captured.reset();
  }
  if (cudaGraphInstantiate(&captured.exec, graph, 0) != cudaSuccess) {
    cudaGetLastError();
    cudaGraphDestroy(graph);
    captured.exec = nullptr;
    return false;
  }
  captured.graph = graph;
  return true;
}

// Captures the command buffer's commands as `captured`'s CUDA graph. A
// command buffer that can not be captured is left uncapturable: nothing ran,
// and its commands run as they are, now and on every later run.
void capture(CudaContext& context, CommandBuffer& command_buffer, CapturedGraph& captured) {
  cudaGraph_t graph = capture_graph(context, command_buffer);
  if (graph && take_graph(captured, graph)) {
    captured.scratch_generation = context.scratch_generation();
    return;
  }
  captured.reset();
  captured.capturable = false;
}

void launch(CudaContext& context, CommandBuffer& command_buffer, CapturedGraph& captured) {
  cudaError_t status = cudaGraphLaunch(captured.exec, context.stream());
  if (status != cudaSuccess) {
    try {
      check(status, "cudaGraphLaunch");
    } catch (...) {
      command_buffer.set_error(std::current_exception());
    }
  }
}

// A run after the first of a command buffer whose commands stay (a replay,
// a recording's run): launches its CUDA graph, captured first where there
// is none or the queue's scratch memory moved. A failure is the command
// buffer's error.
// Runs the command buffer as `captured`, captured first where it has no
// graph or the queue's scratch memory moved; as its commands where it can
// not be captured. Returns whether the graph ran.
bool run_as(CudaContext& context, CommandBuffer& command_buffer, CapturedGraph& captured) {
  if (captured.capturable && (!captured.exec || captured.scratch_generation != context.scratch_generation()))
    capture(context, command_buffer, captured);
  if (!captured.exec) {
    command_buffer.execute(context);
    return false;
  }
  launch(context, command_buffer, captured);
  return true;
}

void run_captured(CudaContext& context, CommandBuffer& command_buffer) {
  auto& recording = command_buffer.recording();
  if (!recording) recording = std::make_unique<CapturedGraph>(context.ordinal());
  run_as(context, command_buffer, static_cast<CapturedGraph&>(*recording));
}

// Command buffers that capture themselves (CommandQueue::
// captures_command_buffers): the CUDA graphs of the queue's command buffers
// whose commands all have keys, by those keys. A command buffer runs as the
// graph of an earlier one with equal keys: the same work on the same memory.
// Keys are captured when seen the second time (the first run sized the
// queue's scratch memory), so one that never repeats costs a hash of its
// keys. A new graph of a work seen on other memory often enough takes the
// place of that work's least recently used graph, updated in place.
class CommandBufferGraphs {
 public:
  explicit CommandBufferGraphs(int ordinal) : ordinal_(ordinal) {}

  void run(CudaContext& context, CommandBuffer& command_buffer) {
    const uint64_t hash = command_buffer.key_hash();
    ++clock_;
    CommandQueue& queue = command_buffer.queue();
    for (auto& entry : entries_)
      if (entry->key_hash == hash && command_buffer.keys_equal(entry->keys)) {
        queue.note_keys_repeated(true);
        entry->last_used = clock_;
        run_entry(context, command_buffer, *entry);
        return;
      }
    auto seen = std::find(seen_.begin(), seen_.end(), hash);
    queue.note_keys_repeated(seen != seen_.end());
    if (seen == seen_.end()) {
      seen_[next_seen_++ % seen_.size()] = hash;
      command_buffer.execute(context);
      return;
    }
    *seen = 0;
    Entry& entry = entry_for(command_buffer.structure_hash());
    entry.key_hash = hash;
    command_buffer.copy_keys(entry.keys);
    entry.last_used = clock_;
    entry.graph.capturable = true;
    run_entry(context, command_buffer, entry);
  }

 private:
  static constexpr size_t kEntries = 32, kPerStructure = 16;
  struct Entry {
    explicit Entry(int ordinal) : graph(ordinal) {}
    uint64_t key_hash = 0, structure_hash = 0, last_used = 0;
    std::vector<uint64_t> keys;
    CapturedGraph graph;
  };

  void run_entry(CudaContext& context, CommandBuffer& command_buffer, Entry& entry) {
    if (run_as(context, command_buffer, entry.graph)) command_buffer.queue().count_captured_command_buffer();
  }

  // The entry a new key of work `structure` takes: that work's least
  // recently used one once it has kPerStructure (its graph updated in
  // place), else a new one, else the least recently used of all (its
  // graph dropped).
  Entry& entry_for(uint64_t structure) {
    Entry* oldest = nullptr;
    Entry* oldest_alike = nullptr;
    size_t alike = 0;
    for (auto& entry : entries_) {
      if (!oldest || entry->last_used < oldest->last_used) oldest = entry.get();
      if (entry->structure_hash != structure) continue;
      ++alike;
      if (!oldest_alike || entry->last_used < oldest_alike->last_used) oldest_alike = entry.get();
    }
    Entry* entry = alike >= kPerStructure ? oldest_alike : nullptr;
    if (!entry && entries_.size() < kEntries) {
      entries_.push_back(std::make_unique<Entry>(ordinal_));
      entry = entries_.back().get();
    }
    if (!entry) {
      entry = oldest;
      entry->graph.reset();
    }
    entry->structure_hash = structure;
    return *entry;
  }

  int ordinal_;
  uint64_t clock_ = 0;
  std::vector<std::unique_ptr<Entry>> entries_;
  // Hashes of keys seen once, the latest kEntries.
  std::array<uint64_t, kEntries> seen_{};
  size_t next_seen_ = 0;
};

// Commit launches the command buffer's work on the queue's stream at once and
// records an event after it; the completion thread finishes it later.
class CudaExecutor final : public Executor {
 public:
  explicit CudaExecutor(CudaBackend& backend)
      : backend_(backend),
        context_(backend.ordinal()),
        state_(std::make_shared<CompletionState>(backend.ordinal())),
        thread_(complete, state_) {
    state_->wait_until_started();
  }

  ~CudaExecutor() override {
    state_->stop(thread_);
    DeviceScope scope(state_->ordinal);
    for (cudaEvent_t e : state_->free_events) cudaEventDestroy(e);
  }

  void submit(std::shared_ptr<CommandBuffer> command_buffer) override {
    std::lock_guard<std::mutex> launching(launch_mutex_);
    DeviceScope scope(context_.ordinal());
    try {
      backend_.order_after_host_writes(context_.stream(), host_writes_seen_);
    } catch (...) {
      command_buffer->set_error(std::current_exception());
    }
    run(*command_buffer);
    cudaEvent_t event = take_event();
    cudaError_t status = cudaEventRecord(event, context_.stream());
    if (status != cudaSuccess) {
      try {
        check(status, "cudaEventRecord");
      } catch (...) {
        command_buffer->set_error(std::current_exception());
      }
    }
    state_->push({std::move(command_buffer), event});
  }

  // Polls the command buffer's event on the calling thread, as
  // cudaEventSynchronize spins on it: the device wakes it directly, instead
  // of through the completion thread. An event reused by a later commit
  // meanwhile only makes the wait longer; errors are the completion thread's
  // to report.
  bool wait_for_device(const CommandBuffer& command_buffer, std::chrono::milliseconds at_most) override {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->waiting_for == &command_buffer) event = state_->waiting_event;
      for (const auto& [pending, e] : state_->pending)
        if (pending.get() == &command_buffer) event = e;
    }
    if (!event) return true;
    DeviceScope scope(state_->ordinal);
    const auto deadline = std::chrono::steady_clock::now() + at_most;
    cudaError_t status;
    while ((status = cudaEventQuery(event)) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    if (status != cudaSuccess) cudaGetLastError();  // the completion thread reports it
    return true;
  }

  // An event recorded now on the queue's stream follows every command
  // buffer submitted so far: submit launches all of one before returning.
  // (A command buffer turns "committed" just before its submit; commit holds
  // the GIL throughout, so no export from Python sees one in between.)
  bool order_stream_after_submitted(int64_t stream) override {
    std::lock_guard<std::mutex> launching(launch_mutex_);
    DeviceScope scope(context_.ordinal());
    cudaEvent_t event = nullptr;
    MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    cudaError_t status = cudaEventRecord(event, context_.stream_handle());
    if (status == cudaSuccess) status = cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream), event, 0);
    cudaEventDestroy(event);  // the wait stays
    check(status, "ordering a DLPack consumer's stream after the queue");
    return true;
  }

  bool wait_until_idle(std::chrono::milliseconds at_most) override { return state_->wait_until_idle(at_most); }
  bool runs_command_buffers_by_key() const override { return true; }

 private:
  void run(CommandBuffer& command_buffer) {
    if (command_buffer.run_count() >= 2)
      run_captured(context_, command_buffer);
    else if (command_buffer.keyed())
      graphs_.run(context_, command_buffer);
    else
      command_buffer.execute(context_);
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->free_events.empty()) {
        cudaEvent_t e = state_->free_events.back();
        state_->free_events.pop_back();
        return e;
      }
    }
    cudaEvent_t e;
    MPSX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  CudaBackend& backend_;
  // Held while submit launches, so that another thread's event follows
  // whole command buffers (and no CUDA graph capture is under way).
  std::mutex launch_mutex_;
  uint64_t host_writes_seen_ = 0;
  CudaContext context_;
  CommandBufferGraphs graphs_{context_.ordinal()};  // before context_ goes: its graphs refer to its streams
  std::shared_ptr<CompletionState> state_;
  std::thread thread_;
};

}  // namespace

// The first run executes the commands, sizing the scratch memory they take;
// later ones launch their CUDA graph.
void CudaContext::run_recording(CommandBuffer& recorded) {
  if (!recorded.recording()) {
    recorded.recording() = std::make_unique<CapturedGraph>(ordinal());
    ExecutionContext::run_recording(recorded);
    return;
  }
  run_captured(*this, recorded);
  recorded.rethrow_error();
}

std::unique_ptr<Executor> CudaBackend::new_executor() { return std::make_unique<CudaExecutor>(*this); }

}  // namespace mpsx::cuda

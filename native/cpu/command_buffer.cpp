#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// What the worker thread shares with its executor. The worker keeps its own
// reference: the executor can be destroyed on the worker itself, when the
// last command buffer of a forgotten queue finishes there.
struct WorkerState {
  explicit WorkerState(const dnnl::engine& engine) : context(engine) {}
  CpuContext context;
  std::mutex mutex;
  std::condition_variable wake, idle;
  std::deque<std::shared_ptr<CommandBuffer>> pending;
  bool busy = false;
  bool stopping = false;
};

void run(std::shared_ptr<WorkerState> state) {
  for (;;) {
    std::shared_ptr<CommandBuffer> next;
    {
      std::unique_lock<std::mutex> lock(state->mutex);
      state->wake.wait(lock, [&] { return state->stopping || !state->pending.empty(); });
      if (state->pending.empty()) return;
      next = std::move(state->pending.front());
      state->pending.pop_front();
      state->busy = true;
    }
    next->execute(state->context);
    next->finish();
    next.reset();
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->busy = false;
    }
    state->idle.notify_all();
  }
}

// One worker thread runs the queue's committed command buffers in order, so
// the encoding thread can go on with the next step meanwhile.
class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(const dnnl::engine& engine)
      : state_(std::make_shared<WorkerState>(engine)), worker_(run, state_) {}

  ~CpuExecutor() override { stop_executor_thread(state_->mutex, state_->stopping, state_->wake, worker_); }

  void submit(std::shared_ptr<CommandBuffer> command_buffer) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->pending.push_back(std::move(command_buffer));
    }
    state_->wake.notify_one();
  }

  bool wait_until_idle(std::chrono::milliseconds at_most) override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->idle.wait_for(lock, at_most, [this] { return state_->pending.empty() && !state_->busy; });
  }

 private:
  std::shared_ptr<WorkerState> state_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Executor> CpuBackend::new_executor() { return std::make_unique<CpuExecutor>(engine_); }

}  // namespace mpsx::cpu

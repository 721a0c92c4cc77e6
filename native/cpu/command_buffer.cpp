#include <chrono>
#include <thread>

#include "backend.h"

namespace mpsx::cpu {
namespace {

// What the worker thread shares with its executor.
struct WorkerState : ExecutorQueue<std::shared_ptr<CommandBuffer>> {
  explicit WorkerState(const dnnl::engine& engine) : context(engine) {}
  CpuContext context;
};

void run(std::shared_ptr<WorkerState> state) {
  mpsx::detail::RuntimeWork working;
  state->start();
  std::shared_ptr<CommandBuffer> next;
  while (state->take(next)) {
    next->execute(state->context);
    next->finish();
    next.reset();
    state->finished();
  }
}

// One worker thread runs the queue's committed command buffers in order, so
// the encoding thread can go on with the next step meanwhile.
class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(const dnnl::engine& engine)
      : state_(std::make_shared<WorkerState>(engine)), worker_(run, state_) {
    state_->wait_until_started();
  }

  ~CpuExecutor() override { state_->stop(worker_); }

  void submit(std::shared_ptr<CommandBuffer> command_buffer) override { state_->push(std::move(command_buffer)); }

  bool wait_until_idle(std::chrono::milliseconds at_most) override { return state_->wait_until_idle(at_most); }

 private:
  std::shared_ptr<WorkerState> state_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Executor> CpuBackend::new_executor() { return std::make_unique<CpuExecutor>(engine_); }

}  // namespace mpsx::cpu

#include "backend.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <string>

#include "mpsx/errors.h"

namespace mpsx::metal {
namespace {

// Commit encodes the commands onto a new MTLCommandBuffer of the queue and
// commits it. Metal calls completed handlers on a thread of its own, in
// commit order for one queue; that is where the mpsx command buffer finishes.
class MetalExecutor final : public Executor {
 public:
  explicit MetalExecutor(MetalBackend& backend)
      : backend_(backend), queue_([backend.device() newCommandQueue]), pending_(std::make_shared<Pending>()) {
    if (!queue_) fail<Error>("metal: the device could not make an MTLCommandQueue");
  }

  ~MetalExecutor() override {
    while (!wait_until_idle(std::chrono::seconds(1))) {
    }
  }

  void submit(std::shared_ptr<CommandBuffer> command_buffer) override {
    id<MTLCommandBuffer> metal = [queue_ commandBuffer];
    MetalContext context(backend_, metal);
    command_buffer->execute(context);
    {
      std::lock_guard<std::mutex> lock(pending_->mutex);
      ++pending_->count;
    }
    std::shared_ptr<Pending> pending = pending_;
    [metal addCompletedHandler:^(id<MTLCommandBuffer> done) {
      if (done.status == MTLCommandBufferStatusError) {
        std::string message = done.error ? done.error.localizedDescription.UTF8String : "unknown error";
        command_buffer->set_error(std::make_exception_ptr(Error("metal: the command buffer failed: " + message)));
      }
      command_buffer->finish();
      {
        std::lock_guard<std::mutex> lock(pending->mutex);
        --pending->count;
      }
      pending->idle.notify_all();
    }];
    [metal commit];
  }

  bool wait_until_idle(std::chrono::milliseconds at_most) override {
    std::unique_lock<std::mutex> lock(pending_->mutex);
    return pending_->idle.wait_for(lock, at_most, [this] { return pending_->count == 0; });
  }

 private:
  // Shared with the completed handlers, which may run after the executor is gone.
  struct Pending {
    std::mutex mutex;
    std::condition_variable idle;
    size_t count = 0;
  };

  MetalBackend& backend_;
  id<MTLCommandQueue> queue_;
  std::shared_ptr<Pending> pending_;
};

}  // namespace

std::unique_ptr<Executor> MetalBackend::new_executor() { return std::make_unique<MetalExecutor>(*this); }

}  // namespace mpsx::metal

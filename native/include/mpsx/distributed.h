// Data-parallel training past one device. MPS users copy a graph to each
// device (copyWithZone:device:) and sum the gradients between them; mpsx sums
// them with the field's libraries, NCCL on cuda and MPI on cpu, one process
// per device. A Communicator all-reduces float32 buffers as commands of a
// command buffer, ordered with the kernels around them on the queue (cuda:
// on its stream, captured into the CUDA graph of a replayable command buffer),
// packing many small buffers into few collective calls (buckets), as
// PyTorch's DDP does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpsx/command_buffer.h"
#include "mpsx/primitive.h"

namespace mpsx {

class Backend;
class Buffer;
class Device;
class ExecutionContext;
class State;

enum class ReduceOperation : uint8_t { Sum, Mean };

// What makes a backend's collective: this process's place in the group, and
// what the backend's library needs to join it.
struct CollectiveDescriptor {
  int rank = 0;
  int world_size = 1;
  // cuda: the NCCL unique id rank 0 made (unique_id()), given to every rank;
  // the path of libnccl.so.2 to load (empty: the loader's search).
  std::string unique_id;
  std::string library;
  // cpu: the all-reduce of a host array in place over the group (the
  // binding's MPI), called on the queue's worker thread.
  std::function<void(float* data, size_t count, ReduceOperation operation)> host_all_reduce;
  // How long joining the group, or one collective, may take before the
  // others are given up: a DistributedError then, never a hang.
  double timeout_seconds = 300;
};

// A backend's collective library (the primitive of family "distributed").
class CollectivePrimitive : public PrimitiveInterface<CollectiveDescriptor> {
 public:
  static constexpr const char* family = "distributed";
  // Launches the all-reduce of `count` float32 values at `data` (device
  // memory), in place, ordered after the context's earlier work.
  virtual void all_reduce(ExecutionContext& context, float* data, size_t count, ReduceOperation operation) = 0;
  // Sums `count` float32 values in host memory over the group, in place,
  // ordered after the context's earlier work, and returns once every rank's
  // are in: the exchange of the bucket layout check. Backends whose memory
  // is the host's (cpu) all-reduce them where they are.
  virtual void all_reduce_on_host(ExecutionContext& context, float* values, size_t count) {
    all_reduce(context, values, count, ReduceOperation::Sum);
  }
  // After a command buffer with collectives completed: throws
  // DistributedError if one of them failed or timed out (a peer died) since.
  virtual void check() {}
};

// One process's member of a data-parallel group on `device`.
class Communicator {
 public:
  // DistributedError if the group cannot be joined within the timeout.
  Communicator(std::shared_ptr<Device> device, const CollectiveDescriptor& descriptor, size_t bucket_bytes);
  ~Communicator();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::shared_ptr<Device>& device() const { return device_; }
  // 0: chosen, 25 MiB; for an overlapped all-reduce, a quarter of the bytes
  // it reduces, within 256 KiB to 25 MiB.
  size_t bucket_bytes() const { return bucket_bytes_; }
  // Collective calls encoded so far (one per bucket).
  uint64_t collective_calls() const { return collective_calls_; }
  // Bucket layout checks run so far: one per layout the group reduces.
  uint64_t layout_checks() const;

  // All-reduces the float32 contents of the buffers in place: buffers
  // packed in order into buckets of at most bucket_bytes, one collective
  // call each; a buffer larger than a bucket is reduced where it is.
  // ArgumentError for a buffer of another device or a length that is not
  // whole float32 values, before anything is encoded.
  //
  // The ranks' collectives pair up by their order, so every rank must
  // reduce buffers of the same sizes in the same buckets. Before the first
  // collective of a layout (its operation, buffer sizes and buckets) that
  // the group has not reduced before, one small exchange checks that every
  // rank has the same: DistributedError on every rank, naming the
  // difference, when they differ. Layouts checked once are not exchanged
  // again.
  void encode_all_reduce(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
                         ReduceOperation operation);
  // The overlapped form, for a graph's backward pass, buffers given as they
  // are computed, `total_bytes` in all (for the chosen bucket size; 0 if
  // not known): each bucket they fill launches its
  // packing, all-reduce and unpacking as overlapped work
  // (ExecutionContext::begin_overlapped), which runs beside the commands
  // encoded after it; encode_join (on the same command buffer) launches the
  // rest and makes later commands wait for them all. Nothing may read or
  // write the buffers in between, but overlapped commands (encode_overlapped)
  // encoded once they are no longer filling a bucket.
  void encode_all_reduce_overlapped(CommandBuffer& command_buffer,
                                    const std::vector<std::shared_ptr<Buffer>>& buffers, ReduceOperation operation,
                                    size_t total_bytes);
  // Whether buffers given to encode_all_reduce_overlapped wait for a bucket.
  bool overlapped_filling() const;
  // Encodes, through `encode_commands`, commands that run as overlapped work
  // after the all-reduces launched so far (the updates from their
  // gradients). StateError when the command buffer has none.
  void encode_overlapped(CommandBuffer& command_buffer, FunctionRef encode_commands);
  void encode_join(CommandBuffer& command_buffer);
  // Drops what overlapped all-reduces left to join, for an encode that failed
  // (its command buffer discards their commands).
  void forget_overlapped();

 private:
  std::shared_ptr<Device> device_;
  int rank_, world_size_;
  size_t bucket_bytes_;
  size_t bucket_ = 0;  // the bucket size of the all-reduce being encoded
  std::shared_ptr<CollectivePrimitive> collective_;
  mutable std::mutex mutex_;
  // The packed buckets, by their place in an encode, grown as needed; a
  // command buffer that read one keeps it alive.
  std::vector<std::shared_ptr<Buffer>> buckets_;
  uint64_t collective_calls_ = 0;
  // What the layout of the all-reduce being encoded has been so far, and
  // where its check goes (before its first collective).
  struct Layout {
    uint64_t operation = 0, buffers = 0, bytes = 0, collectives = 0, hash = 0;
    uint64_t first[4] = {};  // the sizes of the first collectives
    bool operator==(const Layout& other) const;
  };
  Layout layout_;
  CommandBuffer::Mark layout_mark_;
  // The layouts the group has checked, shared with the check commands.
  struct LayoutChecks;
  std::shared_ptr<LayoutChecks> layout_checks_;
  // The overlapped all-reduces of the command buffer being encoded: the
  // buffers of the bucket still filling, and the next bucket's place.
  const CommandBuffer* overlapping_ = nullptr;
  ReduceOperation overlapped_operation_ = ReduceOperation::Sum;
  std::vector<std::shared_ptr<Buffer>> filling_;
  size_t filling_bytes_ = 0;
  size_t next_bucket_ = 0;

  void check(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers) const;
  size_t bucket_for(size_t bytes) const;
  void begin_layout(CommandBuffer& command_buffer, ReduceOperation operation);
  void encode_layout_check(CommandBuffer& command_buffer);
  void encode(CommandBuffer& command_buffer, const std::vector<std::shared_ptr<Buffer>>& buffers,
              ReduceOperation operation);
  void encode_filling(CommandBuffer& command_buffer);
};

// What rank 0 of a group makes and hands the others before they all join:
// NCCL's unique id on cuda (from the libnccl.so.2 at the descriptor's path,
// empty: the loader's search), nothing on cpu (MPI has its own launcher).
struct GroupIdPrimitive : PrimitiveInterface<std::string> {
  static constexpr const char* family = "distributed group id";
  virtual std::string make() = 0;
};

// The id of a new group on `device`'s backend, made with the library at
// `library`: DistributedError naming what failed to load.
std::string new_group_id(Device& device, const std::string& library);

}  // namespace mpsx

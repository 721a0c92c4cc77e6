// The cpu backend's collectives: the binding's MPI (mpi4py), called on the
// queue's worker thread, where the commands run in order.
#include "mpsx/distributed.h"

#include "mpsx/errors.h"
#include "mpsx/registry.h"

namespace mpsx::cpu {
namespace {

class HostCollective final : public CollectivePrimitive {
 public:
  explicit HostCollective(const CollectiveDescriptor& d) : world_size_(d.world_size), all_reduce_(d.host_all_reduce) {
    if (world_size_ > 1 && !all_reduce_)
      fail<ArgumentError>("the cpu backend all-reduces through MPI: a group of ", world_size_,
                          " processes needs the binding's MPI all-reduce (mpsx.distributed.init(backend='mpi'))");
  }

  void all_reduce(ExecutionContext&, float* data, size_t count, ReduceOperation operation) override {
    if (world_size_ > 1) all_reduce_(data, count, operation);  // alone, the sum and the mean are the values
  }

 private:
  int world_size_;
  std::function<void(float*, size_t, ReduceOperation)> all_reduce_;
};

// MPI needs no id from rank 0: its launcher joins the processes.
class NoGroupId final : public GroupIdPrimitive {
 public:
  std::string make() override { return {}; }
};

std::unique_ptr<CollectivePrimitive> make_collective(Backend&, const CollectiveDescriptor& descriptor) {
  return std::make_unique<HostCollective>(descriptor);
}

std::unique_ptr<GroupIdPrimitive> make_group_id(Backend&, const std::string&) { return std::make_unique<NoGroupId>(); }

const RegisterPrimitive<CollectivePrimitive> registered("cpu", make_collective);
const RegisterPrimitive<GroupIdPrimitive> registered_id("cpu", make_group_id);

}  // namespace
}  // namespace mpsx::cpu

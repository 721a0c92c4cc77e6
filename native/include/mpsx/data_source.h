// What the data source protocols of the kernel families (convolution, batch
// normalization) have in common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "mpsx/command_buffer.h"
#include "mpsx/errors.h"
#include "mpsx/state.h"
#include "mpsx/types.h"

namespace mpsx {

// Host values a data source hands over; `owner` keeps them alive while read.
struct HostArray {
  const void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  std::shared_ptr<void> owner;
  // The dimensions the array was given with; empty when it was flat.
  std::vector<int64_t> shape;

  // No array (MPS's nil, a Python None), for a data source's optional
  // values; an empty array given is an array, of the wrong size.
  bool none() const { return !data && !owner; }
};

// Balances a data source's load() with purge() whatever happens in between;
// a purge that throws is ignored, as the values were read by then. Throws
// Error when load() returns false.
template <class DataSource>
class Loaded {
 public:
  Loaded(DataSource& source, const char* kernel) : source_(source) {
    if (!source_.load()) fail<Error>(kernel, ": the data source's load() returned false");
  }
  ~Loaded() {
    try {
      source_.purge();
    } catch (...) {
    }
  }
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;

 private:
  DataSource& source_;
};

// The update styles of a trainable kernel's data source, as in MPS: the
// update encoded on the command buffer, whose result state (if any) the
// kernel reloads from with `reload`; else the host update, run after the
// command buffer completed with the synchronized `gradients`, which reloads
// from the data source when it reports a change. `updates` names the two
// data source methods as a Python data source implements them, e.g.
// "update_gamma_and_beta_with_command_buffer nor
// update_gamma_and_beta_with_batch_normalization_state".
template <class EncodeUpdate, class Reload, class HostUpdate>
void encode_update(CommandBuffer& command_buffer, const char* kernel, const char* updates, bool on_command_buffer,
                   bool on_host, State& gradients, EncodeUpdate&& encode_update, Reload&& reload,
                   HostUpdate&& host_update) {
  if (on_command_buffer) {
    if (auto updated = encode_update()) reload(*updated);
    return;
  }
  if (!on_host)
    fail<TypeMismatchError>(kernel, ": the data source implements neither ", updates);
  gradients.synchronize(command_buffer);
  command_buffer.add_host_reload(kernel, std::forward<HostUpdate>(host_update));
}

}  // namespace mpsx

// What the data source protocols of the kernel families (convolution, batch
// normalization) have in common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
};

}  // namespace mpsx

// What the data source protocols of the kernel families (convolution, batch
// normalization) have in common.
#pragma once

#include <cstddef>
#include <memory>

#include "mpsx/types.h"

namespace mpsx {

// Host values a data source hands over; `owner` keeps them alive while read.
struct HostArray {
  const void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
  std::shared_ptr<void> owner;
};

}  // namespace mpsx

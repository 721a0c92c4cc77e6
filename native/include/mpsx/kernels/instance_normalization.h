// MPSCNNInstanceNormalization: group normalization with one channel per
// group; everything but the class names lives in kernels/group_normalization.h.
#pragma once

#include <memory>
#include <vector>

#include "mpsx/kernels/group_normalization.h"

namespace mpsx {

// The group count of an instance normalization's native weights: none (0).
inline constexpr int64_t kInstanceNormalizationGroups = 0;

class CNNInstanceNormalization final : public GroupNormalizationKernel {
 public:
  CNNInstanceNormalization(std::shared_ptr<Device> device, std::shared_ptr<GroupNormalizationDataSource> data_source)
      : GroupNormalizationKernel(std::move(device), std::move(data_source), GroupNormalizationKind::Instance) {}
  const char* class_name() const override { return "MPSCNNInstanceNormalization"; }
  std::vector<std::shared_ptr<GradientKernel>> make_gradient_kernels() const override;
};

class CNNInstanceNormalizationGradient final : public GroupNormalizationGradientKernel {
 public:
  explicit CNNInstanceNormalizationGradient(std::shared_ptr<Device> device)
      : GroupNormalizationGradientKernel(std::move(device), GroupNormalizationKind::Instance) {}
  const char* class_name() const override { return "MPSCNNInstanceNormalizationGradient"; }
};

}  // namespace mpsx

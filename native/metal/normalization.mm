#include "normalization.h"

#include <vector>

#include "mpsx/kernels/normalization.h"

@implementation MPSXNeutralNormalizationDataSource {
  std::vector<float> _gamma, _beta;
}

- (instancetype)initWithChannels:(int64_t)channels {
  if ((self = [super init])) {
    using mpsx::NormalizationArray;
    const size_t count = static_cast<size_t>(channels);
    _gamma.assign(count, mpsx::normalization_default(NormalizationArray::Gamma));
    _beta.assign(count, mpsx::normalization_default(NormalizationArray::Beta));
  }
  return self;
}

- (NSUInteger)numberOfFeatureChannels {
  return static_cast<NSUInteger>(_gamma.size());
}

- (float*)gamma {
  return _gamma.data();
}

- (float*)beta {
  return _beta.data();
}

- (float)epsilon {
  return mpsx::kNormalizationDefaultEpsilon;
}

- (BOOL)load {
  return YES;
}

// The arrays are the source's own and never change: nothing to purge.
- (void)purge {
}

- (id)copyWithZone:(NSZone*)zone {
  return self;
}

@end

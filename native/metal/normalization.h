// What the metal files of the normalization families share (batch,
// instance and group normalization).
#pragma once

#import <MetalPerformanceShaders/MetalPerformanceShaders.h>

#include <cstdint>

// The neutral normalization of mpsx/kernels/normalization.h (gamma ones, beta
// zeros, the default epsilon) as the data source of the MPS kernels a
// primitive makes for itself: every encode brings its own values. It has what
// MPS calls of each family's source: the required methods, epsilon, load,
// purge and NSCopying's copy. Immutable: a copy is the same values. Each
// family's source adopts its protocol and adds what it lacks.
@interface MPSXNeutralNormalizationDataSource : NSObject <NSCopying>
- (instancetype)initWithChannels:(int64_t)channels NS_DESIGNATED_INITIALIZER;
- (instancetype)init NS_UNAVAILABLE;
- (NSUInteger)numberOfFeatureChannels;
- (float*)gamma;
- (float*)beta;
- (float)epsilon;
- (BOOL)load;
- (void)purge;
@end

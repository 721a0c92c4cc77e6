// What the convolution and convolution-transpose files share: the MPS
// descriptor of a convolution and the data source protocol over mpsx's.
#pragma once

#include <exception>
#include <memory>

#include "backend.h"
#include "mpsx/kernels/convolution.h"

namespace mpsx::metal {

// Throws ArgumentError for groups MPS cannot run.
MPSCNNConvolutionDescriptor* convolution_descriptor(const ConvolutionDescriptor& descriptor);

}  // namespace mpsx::metal

// MPSCNNConvolutionDataSource over a C++ ConvolutionDataSource (native, or a
// Python one through its C++ subclass). load takes everything the getters
// return and holds the arrays' owners until purge: the protocol calls load
// before anything else, and MPS reads the pointers until it purges. A C++
// exception cannot cross MPS's frames, so load returns NO instead and keeps it
// for takeError. The update methods are not forwarded: their C++ forms take
// mpsx's states, which MPS's states cannot become, and mpsx calls them itself
// (CNNConvolution::encode_weights_and_bias_update); MPS calls them only from
// MPSNNGraph.
@interface MPSXConvolutionDataSource : NSObject <MPSCNNConvolutionDataSource>
- (instancetype)initWithSource:(std::shared_ptr<mpsx::ConvolutionDataSource>)source;
// The first exception a forwarded call raised since the last takeError; null if none.
- (std::exception_ptr)takeError;
@end

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

namespace mpsx::metal {

// The filter of `window` between channel counts, as a data source describes it.
ConvolutionDescriptor filter_of(const ConvolutionWindow& window, int64_t input_channels, int64_t output_channels);
// A data source of `filter` with zero weights and biases, for making MPS
// kernels whose weights every encode reloads. half: MPS computes with float16
// weights (its half accumulator; float32 weights need the float one).
MPSXConvolutionDataSource* zero_weights_data_source(const ConvolutionDescriptor& filter, bool half);
// MPS kernels compute with their own copy of the weights, loaded at init,
// while mpsx's change in place between encodes (GPU-side updates write them):
// a state over the weights an encode is given, for
// reloadWeightsAndBiasesWithCommandBuffer:state:, ordered on the command
// buffer. Without biases (gradients read none) a zeroed buffer stands in.
MPSCNNConvolutionWeightsAndBiasesState* weights_and_biases_state(MetalBackend& backend, const void* weights,
                                                                 const void* biases,
                                                                 MPSCNNConvolutionDescriptor* descriptor);
// Blits a gradient state's batch sums (float32 OHWI weights, [out] biases) to
// the given addresses; either may be null.
void copy_gradients(MetalContext& context, MPSCNNConvolutionGradientState* state, const ConvolutionDescriptor& filter,
                    void* weights_gradient, void* biases_gradient);
}  // namespace mpsx::metal

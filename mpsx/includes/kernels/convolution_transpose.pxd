# cdef extern declarations of native/include/mpsx/kernels/convolution_transpose.h
from mpsx.includes.kernel cimport *
from mpsx.includes.kernels.convolution cimport (
    CCNNConvolution, CCNNConvolutionGradient, CConvolutionDataSource, CConvolutionGradientState)

cdef extern from "mpsx/kernels/convolution_transpose.h" namespace "mpsx" nogil:
    cdef cppclass CConvolutionTransposeGradientState "mpsx::ConvolutionTransposeGradientState"(CConvolutionGradientState):
        shared_ptr[CConvolutionGradientState] convolution_gradient_state

    cdef cppclass CCNNConvolutionTranspose "mpsx::CNNConvolutionTranspose"(CCNNConvolution):
        CCNNConvolutionTranspose(shared_ptr[CDevice] device,
                                 shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error
        int64_t kernel_offset_x, kernel_offset_y
        Encoded encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                       const shared_ptr[CState]& convolution_gradient_state, const shared_ptr[CImage]& destination,
                       const shared_ptr[CState]& state, bool want_state) except +raise_py_error
        ImageDescriptor destination_image_descriptor(
            const CImage& source, const shared_ptr[CState]& convolution_gradient_state) except +raise_py_error
        shared_ptr[CConvolutionTransposeGradientState] result_state(
            const CImage& source, const shared_ptr[CState]& convolution_gradient_state) except +raise_py_error

    cdef cppclass CCNNConvolutionTransposeGradient "mpsx::CNNConvolutionTransposeGradient"(CCNNConvolutionGradient):
        CCNNConvolutionTransposeGradient(shared_ptr[CDevice] device,
                                         shared_ptr[CConvolutionDataSource] data_source) except +raise_py_error

# cdef extern declarations of native/include/mpsx/kernels/reshape.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/reshape.h" namespace "mpsx" nogil:
    cdef cppclass ImageCoordinate "mpsx::ImageCoordinate":
        int64_t x, y, channel

    cdef cppclass CNNPad "mpsx::NNPad"(CUnaryKernel):
        CNNPad(shared_ptr[CDevice] device, ImageCoordinate padding_size_before, ImageCoordinate padding_size_after,
               vector[float] fill_value_array) except +raise_py_error
        ImageCoordinate padding_size_before
        ImageCoordinate padding_size_after
        float fill_value
        const shared_ptr[const vector[float]]& fill_value_array()

    cdef cppclass CNNPadGradient "mpsx::NNPadGradient"(CGradientKernel):
        CNNPadGradient(shared_ptr[CDevice] device) except +raise_py_error

    cdef cppclass CNNReshape "mpsx::NNReshape"(CUnaryKernel):
        CNNReshape(shared_ptr[CDevice] device, int64_t reshaped_width, int64_t reshaped_height,
                   int64_t reshaped_feature_channels) except +raise_py_error
        Encoded encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                       const shared_ptr[CImage]& destination, const shared_ptr[CState]& state, bool want_state,
                       int64_t reshaped_width, int64_t reshaped_height,
                       int64_t reshaped_feature_channels) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source, int64_t reshaped_width,
                                                     int64_t reshaped_height,
                                                     int64_t reshaped_feature_channels) except +raise_py_error
        const ImageCoordinate& reshaped()

    cdef cppclass CNNReshapeGradient "mpsx::NNReshapeGradient"(CGradientKernel):
        CNNReshapeGradient(shared_ptr[CDevice] device) except +raise_py_error

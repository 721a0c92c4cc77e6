# cdef extern declarations of native/include/mpsx/kernel.h
from mpsx.includes.common cimport *
from mpsx.includes.image cimport CImage, ImageDescriptor
from mpsx.includes.padding cimport CDefaultPadding, CPaddingPolicy
from mpsx.includes.state cimport CState
from mpsx.includes.types cimport EdgeMode, Offset, Region

cdef extern from "mpsx/kernel.h" namespace "mpsx" nogil:
    cdef cppclass CGradientKernel "mpsx::GradientKernel"

    cdef cppclass CImageAllocator "mpsx::ImageAllocator":
        pass

    cdef cppclass CDefaultImageAllocator "mpsx::DefaultImageAllocator"(CImageAllocator):
        @staticmethod
        const shared_ptr[CDefaultImageAllocator]& for_images()
        @staticmethod
        const shared_ptr[CDefaultImageAllocator]& for_temporary_images()
        bint temporary()
        shared_ptr[CImage] make(CCommandBuffer& command_buffer, const ImageDescriptor& descriptor) except +raise_py_error

    cdef cppclass CKernel "mpsx::Kernel":
        CDevice& device()
        const shared_ptr[CDevice]& device_ptr()
        const char* class_name()
        Offset offset
        Region clip_rect
        EdgeMode edge_mode
        int64_t destination_feature_channel_offset
        int64_t source_feature_channel_offset
        int64_t source_feature_channel_max_count
        uint32_t padding_method
        shared_ptr[const CPaddingPolicy] padding_policy
        string label
        uint32_t options
        shared_ptr[CImageAllocator] destination_image_allocator
        vector[shared_ptr[CGradientKernel]] make_gradient_kernels() except +raise_py_error
        bool extended_edge_modes()
        bool is_backwards()
        bool is_state_modified()
        bool append_batch_barrier()

    cdef cppclass Encoded "mpsx::UnaryKernel::Encoded":
        shared_ptr[CImage] image
        shared_ptr[CState] state

    cdef cppclass CUnaryKernel "mpsx::UnaryKernel"(CKernel):
        Encoded encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                       const shared_ptr[CImage]& destination, const shared_ptr[CState]& state,
                       bool want_state) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source) except +raise_py_error
        shared_ptr[CState] result_state(const CImage& source) except +raise_py_error

    cdef cppclass BinarySource "mpsx::BinarySource":
        Offset offset
        EdgeMode edge_mode
        int64_t stride_x, stride_y
        int64_t feature_channel_offset
        int64_t feature_channel_max_count

    cdef cppclass CBinaryKernel "mpsx::BinaryKernel"(CKernel):
        BinarySource primary
        BinarySource secondary
        Encoded encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& primary_image,
                       const shared_ptr[CImage]& secondary_image, const shared_ptr[CImage]& destination,
                       const shared_ptr[CState]& state, bool want_state) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& primary_image,
                                                     const CImage& secondary_image) except +raise_py_error
        shared_ptr[CState] result_state(const CImage& primary_image, const CImage& secondary_image) except +raise_py_error
        int64_t kernel_width(bool secondary)
        int64_t kernel_height(bool secondary)
        int64_t dilation_rate_x(bool secondary)
        int64_t dilation_rate_y(bool secondary)

    cdef cppclass CGradientKernel "mpsx::GradientKernel"(CBinaryKernel):
        int64_t kernel_offset_x
        int64_t kernel_offset_y
        shared_ptr[CImage] encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source_gradient,
                                  const shared_ptr[CImage]& source_image, const shared_ptr[CState]& gradient_state,
                                  const shared_ptr[CImage]& destination_gradient) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source_gradient,
                                                     const CState& gradient_state) except +raise_py_error

# mpsx/_padding.h: Python objects as padding policies.
cdef extern from "_padding.h" namespace "mpsx::python":
    cdef cppclass PaddingCalls:
        string (*label)(object) except *
        ImageDescriptor (*destination_image_descriptor)(object, const vector[shared_ptr[CImage]]&,
                                                        const vector[shared_ptr[CState]]&, const shared_ptr[CKernel]&,
                                                        const ImageDescriptor&) except *
        shared_ptr[const CPaddingPolicy] (*inverse)(object) except *

    PaddingCalls& padding_calls()

    cdef cppclass CPythonPaddingPolicy "mpsx::python::PythonPaddingPolicy"(CPaddingPolicy):
        CPythonPaddingPolicy(PyObject* policy, uint32_t method)

    PyObject* python_policy_of(const shared_ptr[const CPaddingPolicy]& policy)
    shared_ptr[const CDefaultPadding] default_padding_of(const shared_ptr[const CPaddingPolicy]& policy)

# mpsx/_image_allocator.h: Python objects as image allocators.
cdef extern from "_image_allocator.h" namespace "mpsx::python":
    cdef cppclass ImageAllocatorCalls:
        shared_ptr[CImage] (*image)(object, const shared_ptr[CCommandBuffer]&, const ImageDescriptor&,
                                    const shared_ptr[CKernel]&) except *

    ImageAllocatorCalls& image_allocator_calls()

    cdef cppclass CPythonImageAllocator "mpsx::python::PythonImageAllocator"(CImageAllocator):
        CPythonImageAllocator(PyObject* allocator)

    PyObject* python_allocator_of(const shared_ptr[CImageAllocator]& allocator)
    shared_ptr[CDefaultImageAllocator] default_allocator_of(const shared_ptr[CImageAllocator]& allocator)

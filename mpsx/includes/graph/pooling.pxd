# cdef extern declarations of native/include/mpsx/graph/pooling.h
from mpsx.includes.graph cimport *
from mpsx.includes.kernels.pooling cimport PoolingKind

cdef extern from "mpsx/graph/pooling.h" namespace "mpsx" nogil:
    cdef cppclass PoolingNodeWindow "mpsx::PoolingNodeWindow":
        PoolingKind kind
        int64_t kernel_width, kernel_height, stride_x, stride_y, dilation_x, dilation_y

    cdef cppclass CCNNPoolingNode "mpsx::CNNPoolingNode"(CFilterNode):
        CCNNPoolingNode(shared_ptr[CImageNode] source, PoolingNodeWindow window) except +raise_py_error
        const PoolingNodeWindow& window()

    cdef cppclass CCNNPoolingGradientNode "mpsx::CNNPoolingGradientNode"(CFilterNode):
        CCNNPoolingGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                shared_ptr[CStateNode] gradient_state, PoolingNodeWindow window,
                                uint32_t padding_policy) except +raise_py_error
        const PoolingNodeWindow& window()

# cdef extern declarations of native/include/mpsx/graph/scale.h
from cpython.ref cimport PyObject
from mpsx.includes.graph cimport *
from mpsx.includes.graph.loss cimport WrapLossImage
from mpsx.includes.kernels.scale cimport ScaleKind

cdef extern from "mpsx/graph/scale.h" namespace "mpsx" nogil:
    cdef cppclass CImageTransformProvider "mpsx::ImageTransformProvider":
        pass

    cdef cppclass CNNScaleNode "mpsx::NNScaleNode"(CFilterNode):
        CNNScaleNode(shared_ptr[CImageNode] source, ScaleKind kind, shared_ptr[CImageTransformProvider] provider,
                     int64_t width, int64_t height, int64_t depth) except +raise_py_error
        ScaleKind kind()
        int64_t output_width()
        int64_t output_height()
        int64_t output_depth()
        const shared_ptr[CImageTransformProvider]& transform_provider()

cdef extern from "_graph.h" namespace "mpsx::python":
    shared_ptr[CImageTransformProvider] make_python_transform_provider(object provider, WrapLossImage wrap)
    PyObject* python_transform_provider_object(const shared_ptr[CImageTransformProvider]& provider)

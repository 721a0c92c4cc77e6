# cdef extern declarations of native/include/mpsx/graph/gram_matrix_calculation.h
from cpython.ref cimport PyObject
from mpsx.includes.graph cimport *
from mpsx.includes.graph.loss cimport WrapLossImage

cdef extern from "mpsx/graph/gram_matrix_calculation.h" namespace "mpsx" nogil:
    cdef cppclass CGramMatrixCallback "mpsx::GramMatrixCallback":
        pass

    cdef cppclass CNNGramMatrixCalculationNode "mpsx::NNGramMatrixCalculationNode"(CFilterNode):
        CNNGramMatrixCalculationNode(shared_ptr[CImageNode] source, float alpha) except +raise_py_error
        float alpha()
        shared_ptr[CGramMatrixCallback] property_call_back

    cdef cppclass CNNGramMatrixCalculationGradientNode "mpsx::NNGramMatrixCalculationGradientNode"(CFilterNode):
        CNNGramMatrixCalculationGradientNode(shared_ptr[CImageNode] source_gradient, shared_ptr[CImageNode] source_image,
                                             shared_ptr[CStateNode] gradient_state, float alpha) except +raise_py_error
        float alpha()

cdef extern from "_graph.h" namespace "mpsx::python":
    shared_ptr[CGramMatrixCallback] make_python_gram_matrix_callback(object callback, WrapLossImage wrap)
    PyObject* python_gram_matrix_callback_object(const shared_ptr[CGramMatrixCallback]& callback)

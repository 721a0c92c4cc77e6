# cdef extern declarations of native/include/mpsx/kernels/scale.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/scale.h" namespace "mpsx" nogil:
    cdef enum class ScaleKind "mpsx::ScaleKind"(int32_t):
        Bilinear "mpsx::ScaleKind::Bilinear"
        Lanczos "mpsx::ScaleKind::Lanczos"

# cdef extern declarations of native/include/mpsx/kernels/reduction.h
from mpsx.includes.kernel cimport *

cdef extern from "mpsx/kernels/reduction.h" namespace "mpsx" nogil:
    cdef enum class ReductionKind "mpsx::ReductionKind"(int32_t):
        SpatialMean "mpsx::ReductionKind::SpatialMean"
        FeatureChannelsSum "mpsx::ReductionKind::FeatureChannelsSum"

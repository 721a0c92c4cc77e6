# cdef extern declarations of native/include/mpsx/kernels/instance_normalization.h;
# the classes are declared in group_normalization.pxd (one native model).
from libc.stdint cimport int64_t

cdef extern from "mpsx/kernels/instance_normalization.h" namespace "mpsx" nogil:
    const int64_t kInstanceNormalizationGroups

# cdef extern declarations of native/include/mpsx/kernels/instance_normalization.h;
# the classes are declared in group_normalization.pxd (one native model).
from mpsx.includes.common cimport *

cdef extern from "mpsx/kernels/instance_normalization.h" namespace "mpsx" nogil:
    const int64_t kInstanceNormalizationGroups

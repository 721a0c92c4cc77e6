# cdef extern declarations of native/include/mpsx/types.h
from libc.stdint cimport int64_t, uint8_t

cdef extern from "mpsx/types.h" namespace "mpsx" nogil:
    cdef enum class DataType "mpsx::DataType"(uint8_t):
        Float32 "mpsx::DataType::Float32"
        Float16 "mpsx::DataType::Float16"
        UInt8 "mpsx::DataType::UInt8"

    const int64_t kMaxDimension "mpsx::kMaxDimension"

    size_t size_of(DataType)

    cdef cppclass Offset "mpsx::Offset":
        int64_t x, y, z

    cdef cppclass Region "mpsx::Region":
        int64_t x, y, z, width, height, depth

    const Region kRectNoClip "mpsx::kRectNoClip"

    cdef enum class EdgeMode "mpsx::EdgeMode"(uint8_t):
        pass

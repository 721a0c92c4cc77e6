# cdef extern declarations of native/include/mpsx/capture.h
cdef extern from "mpsx/capture.h" namespace "mpsx" nogil:
    void invalidate_captures()

# cdef extern declarations of native/include/mpsx/registry.h

cdef extern from "mpsx/registry.h" namespace "mpsx" nogil:
    void unregister_primitive(const char* family, const char* backend_kind)

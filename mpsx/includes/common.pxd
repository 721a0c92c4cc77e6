# What nearly every declaration file of mpsx/includes needs, cimported with
# `from mpsx.includes.common cimport *` (the pattern of pyarrow/includes/common.pxd).
# errors, types, device and command_buffer, which this file draws on, cimport what they need by name.
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.vector cimport vector

from mpsx.includes.command_buffer cimport CCommandBuffer
from mpsx.includes.device cimport CDevice
from mpsx.includes.errors cimport raise_py_error
from mpsx.includes.types cimport DataType

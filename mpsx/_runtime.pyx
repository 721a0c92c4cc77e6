# cython: language_level=3, boundscheck=False, wraparound=False, binding=True
# binding=True: functions and methods are introspectable (inspect.signature). An extension class declares its
# constructor's signature as its docstring's first line, "Name(parameters)" then a "--" line (CPython's
# __text_signature__), for help() and inspect.signature; tests/test_typing.py checks it against __init__.
"""Device, CommandQueue, CommandBuffer, Buffer, Vector, images and states."""

import atexit
import operator
import os
import reprlib
import sys
import threading

cimport cython
import enum

import numpy as np

from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New, PyCapsule_SetName)
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint8_t, uint16_t, int32_t, uint64_t
from libcpp.memory cimport shared_ptr
from mpsx.includes.errors cimport make_native
from libcpp.string cimport string
from libcpp.vector cimport vector

from mpsx.includes.buffer cimport CBuffer, CVector
from mpsx.includes.command_buffer cimport (
    CCommandBuffer, CCommandQueue, CommandBufferStatus, completed_handler, end_at_exit, finalizing,
    install_interrupt_check, threads_abandoned, wait_until_all_idle, before_fork, after_fork)
from mpsx.includes.device cimport CDevice, backend_load_errors
from mpsx.includes.dlpack cimport (
    Copy, DLDevice, DLManagedTensor, DLManagedTensorVersioned, ExportRequest, Exported, ImportAs, ImportPlan,
    check_device, device_of as dlpack_device_of, export_buffer, export_image, export_request, import_buffer,
    import_image, import_stream, kTensorCapsule, kUsedTensorCapsule, kUsedVersionedCapsule, kVersionedCapsule,
    plan_import, release)
from mpsx.includes.distributed cimport (
    CCollectiveDescriptor, CCommunicator, ReduceOperation, host_all_reduce as host_all_reduce_of, new_group_id)
from mpsx.includes.errors cimport raise_stored
from mpsx.includes.image cimport (CImage, FeatureChannelRange, ImageBlock, ImageLayout,
                                  ImageDescriptor as CImageDescriptor)
from mpsx.includes.registry cimport unregister_primitive
from mpsx.includes.state cimport CState
from mpsx.includes.types cimport DataType as CDataType, kMaxDimension, size_of

from mpsx._errors import DeviceMismatchError, MPSXError, StateError
from mpsx.persistence import _unpickle_device, device_of, reduce as persistence_reduce


class DataType(enum.IntEnum):
    """The data types of images, weights, vectors and buffers.

    FLOAT32, FLOAT16 and UINT8 map to numpy's float32, float16 and uint8; BFLOAT16 has no numpy type and is read as
    float32.

    MPS: MPSDataType
    """
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2
    UINT8 = 3


cdef dict _NUMPY_OF = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    3: np.dtype(np.uint8),
}


cdef CDataType data_type_of_numpy(object dtype) except *:
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return CDataType.Float32
    if dtype == np.float16:
        return CDataType.Float16
    if dtype == np.uint8:
        return CDataType.UInt8
    raise TypeError(f"expected a float32, float16 or uint8 array, given {dtype}")


cdef object numpy_of(CDataType t):
    try:
        return _NUMPY_OF[<int>t]
    except KeyError:
        raise TypeError("bfloat16 data has no numpy type; read it as float32") from None


# The runtime by topic, one file each.
include "runtime/device.pxi"
include "runtime/command_buffer.pxi"
include "runtime/buffer.pxi"
include "runtime/image.pxi"
include "runtime/state.pxi"
include "runtime/distributed.pxi"

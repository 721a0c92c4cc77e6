# Padding policy objects (MPSNNPadding, MPSNNDefaultPadding): what kernels' ``padding`` and filter nodes'
# ``padding_policy`` take besides NNPaddingMethod bits.

from mpsx.includes.padding cimport CDefaultPadding, CPaddingPolicy
from mpsx.includes.kernel cimport CPythonPaddingPolicy, PaddingCalls, default_padding_of, padding_calls, python_policy_of
from libcpp.string cimport string
from mpsx.includes.image cimport ImageDescriptor as CImageDescriptor

__all__ += ["NNPadding", "NNDefaultPadding"]


cdef class NNPadding:
    """NNPadding()
--

    The padding policy protocol: subclass it, or write any class with ``padding_method()``, and set an object of it
    as a kernel's ``padding`` or a filter node's ``padding_policy``.

    ``padding_method()`` (required) gives the NNPaddingMethod bits, read once when the object is set. Where they
    include CUSTOM, ``destination_image_descriptor_for_source_images`` runs last whenever the kernel sizes a
    destination (after the bits' sizing, the family's own and the source states'): it returns the destination's
    ImageDescriptor and may set the kernel's properties (``offset``, ``edge_mode``, ...). ``inverse()`` gives the
    policy of the gradient filters a filter node makes (None: theirs stays). In a graph the kernel is the graph's
    own, wrapped anew for the call.

    MPS: MPSNNPadding
    """

    def padding_method(self):
        """The NNPaddingMethod bits of the policy; a subclass must implement it (NotImplementedError here).

        MPS: -[MPSNNPadding paddingMethod]
        """
        raise NotImplementedError(f"{type(self).__name__} must implement padding_method()")

    def label(self):
        """A description of the policy, for messages (default: the class name).

        MPS: -[MPSNNPadding label]
        """
        return type(self).__name__

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        """The destination's ImageDescriptor for an encode of ``for_kernel`` over ``source_images`` (a list of
        Images) and ``source_states`` (a list of States, maybe empty), given the ``suggested_descriptor`` the
        policy's bits gave; called only where they include CUSTOM. It may set properties of ``for_kernel``. Here:
        ``suggested_descriptor`` unchanged.

        MPS: -[MPSNNPadding destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:]
        """
        return suggested_descriptor

    def inverse(self):
        """The policy of the gradient pass, or None (the default) to leave the gradient filters' own.

        MPS: -[MPSNNPadding inverse]
        """
        return None


cdef class NNDefaultPadding(NNPadding):
    """NNDefaultPadding(method)
--

    A padding policy of NNPaddingMethod bits, or TensorFlow's average pooling (``padding_for_tensorflow_average_
    pooling``): SIZE_SAME (or SIZE_VALID_ONLY), ALIGN_CENTERED, ADD_REMAINDER_TO_BOTTOM_RIGHT and CUSTOM, whose
    custom step sets the kernel's ``edge_mode`` to CLAMP so that the average divides by the pixels inside the
    image. ``NNDefaultPadding(method)`` is ``padding_with_method(method)``. Equal policies compare equal.

    MPS: MPSNNDefaultPadding
    """
    cdef shared_ptr[const CDefaultPadding] c

    cdef const CDefaultPadding* native(self) except NULL:
        if not self.c:
            raise_uninitialized(self)
        return self.c.get()

    def __init__(self, method):
        self.c = CDefaultPadding.with_method(_padding_method_argument(method, "method"))

    @classmethod
    def padding_with_method(cls, method):
        """The policy of NNPaddingMethod bits ``method``.

        MPS: +[MPSNNDefaultPadding paddingWithMethod:]
        """
        return cls(method)

    @classmethod
    def padding_for_tensorflow_average_pooling(cls):
        """TensorFlow's SAME average pooling: the destination of the source's size over the stride, the remainder
        of the padding at the bottom right, and edge mode CLAMP.

        MPS: +[MPSNNDefaultPadding paddingForTensorflowAveragePooling]
        """
        return _wrap_default_padding(CDefaultPadding.for_tensorflow_average_pooling(False))

    @classmethod
    def padding_for_tensorflow_average_pooling_valid_only(cls):
        """TensorFlow's VALID average pooling: windows inside the source only, and edge mode CLAMP.

        MPS: +[MPSNNDefaultPadding paddingForTensorflowAveragePoolingValidOnly]
        """
        return _wrap_default_padding(CDefaultPadding.for_tensorflow_average_pooling(True))

    def padding_method(self):
        """The policy's NNPaddingMethod bits.

        MPS: -[MPSNNDefaultPadding paddingMethod]
        """
        return NNPaddingMethod(self.native().padding_method())

    def label(self):
        """What the policy does, in MPS's names of its bits.

        MPS: -[MPSNNDefaultPadding label]
        """
        return self.native().label().decode()

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        """``suggested_descriptor``; the TensorFlow average pooling policies set ``for_kernel.edge_mode`` to CLAMP
        first.

        MPS: -[MPSNNPadding destinationImageDescriptorForSourceImages:sourceStates:forKernel:suggestedDescriptor:]
        """
        if not isinstance(for_kernel, CNNKernel):
            raise TypeError(f"for_kernel: expected an mpsx kernel (CNNKernel), given {type(for_kernel).__name__}")
        if self.native().clamps_edges():
            for_kernel.edge_mode = ImageEdgeMode.CLAMP
        return suggested_descriptor

    def inverse(self):
        """The same policy: a gradient is sized as its forward source whatever the bits.

        MPS: -[MPSNNPadding inverse]
        """
        self.native()
        return self

    def __mpsx_state__(self):
        return {"method": int(self.native().padding_method()), "clamps_edges": bool(self.native().clamps_edges())}

    @classmethod
    def __mpsx_restore__(cls, state, device):
        if state["clamps_edges"]:
            valid_only = (state["method"] & int(NNPaddingMethod.SIZE_FULL | NNPaddingMethod.SIZE_SAME)) == 0
            return _wrap_default_padding(CDefaultPadding.for_tensorflow_average_pooling(valid_only))
        return cls(state["method"])

    def __reduce__(self):
        return persistence_reduce(self)

    def __eq__(self, other):
        if not isinstance(other, NNDefaultPadding) or not self.c or not (<NNDefaultPadding>other).c:
            return NotImplemented
        return (self.native().padding_method() == (<NNDefaultPadding>other).native().padding_method() and
                self.native().clamps_edges() == (<NNDefaultPadding>other).native().clamps_edges())

    def __hash__(self):
        return hash((self.native().padding_method(), self.native().clamps_edges()))

    def __repr__(self):
        if not self.c:
            return uninitialized_repr(self)
        return f"mpsx.NNDefaultPadding({self.label()!r})"


cdef NNDefaultPadding _wrap_default_padding(shared_ptr[const CDefaultPadding] policy):
    cdef NNDefaultPadding p = NNDefaultPadding.__new__(NNDefaultPadding)
    p.c = policy
    return p


cdef uint32_t _padding_method_argument(object value, str name) except? 0xffffffff:
    cdef int64_t method = integer_argument(value, name)
    if method < 0 or method > 0xffffffff:
        raise ValueError(f"{name} must be an NNPaddingMethod (a 32-bit unsigned int), given {method}")
    return <uint32_t>method


cdef shared_ptr[const CPaddingPolicy] _padding_policy_of(object policy, str name) except *:
    """The native policy of a padding object (an NNDefaultPadding, or any object with padding_method())."""
    if isinstance(policy, NNDefaultPadding):
        return <shared_ptr[const CPaddingPolicy]>(<NNDefaultPadding>policy).c
    check_protocol(policy, "MPSNNPadding")
    cdef uint32_t method = _padding_method_argument(policy.padding_method(), f"{name}.padding_method()")
    if method & NNPaddingMethod.CUSTOM and not callable(
            getattr(policy, "destination_image_descriptor_for_source_images", None)):
        raise TypeError(f"{type(policy).__name__}.padding_method() sets CUSTOM, which needs "
                        f"destination_image_descriptor_for_source_images(source_images, source_states, for_kernel, "
                        f"suggested_descriptor)")
    return <shared_ptr[const CPaddingPolicy]>make_native[CPythonPaddingPolicy](<PyObject*>policy, method)


cdef set_padding(uint32_t* method, shared_ptr[const CPaddingPolicy]* policy, object value, str name):
    """Sets a kernel's or filter node's padding from ``value``: NNPaddingMethod bits, or a padding object."""
    cdef shared_ptr[const CPaddingPolicy] made
    if isinstance(value, (int, np.integer)):
        method[0] = _padding_method_argument(value, name)
        policy[0].reset()
        return
    if not hasattr(value, "padding_method"):
        raise TypeError(f"{name} must be an NNPaddingMethod or a padding policy (an object with padding_method(), "
                        f"such as an NNDefaultPadding), given {quoted(value)}")
    made = _padding_policy_of(value, name)
    method[0] = made.get().padding_method()
    policy[0] = made


cdef object padding_value(uint32_t method, const shared_ptr[const CPaddingPolicy]& policy):
    """What a kernel's padding or a node's padding_policy reads: the object it was set to, else the bits."""
    if not policy:
        return NNPaddingMethod(method)
    cdef PyObject* python = python_policy_of(policy)
    if python != NULL:
        return <object>python
    return _wrap_default_padding(default_padding_of(policy))


# ---- the calls the runtime makes into Python padding objects (_padding.h)

cdef string _padding_label(object policy) except *:
    label = policy.label() if callable(getattr(policy, "label", None)) else None
    return str(type(policy).__name__ if label is None else label).encode()


cdef CImageDescriptor _padding_destination(object policy, const vector[shared_ptr[CImage]]& sources,
                                           const vector[shared_ptr[CState]]& states, const shared_ptr[CKernel]& kernel,
                                           const CImageDescriptor& suggested) except *:
    cdef ImageDescriptor given = ImageDescriptor.__new__(ImageDescriptor)
    given.c = suggested
    images = [wrap_image(sources[i]) for i in range(sources.size())]
    source_states = [_wrap_any_state(states[i]) for i in range(states.size())]
    result = policy.destination_image_descriptor_for_source_images(images, source_states, _wrap_kernel(kernel), given)
    if not isinstance(result, ImageDescriptor):
        raise TypeError(f"{type(policy).__name__}.destination_image_descriptor_for_source_images() must return an "
                        f"mpsx.ImageDescriptor, returned {quoted(result)}")
    return (<ImageDescriptor>result).c


cdef shared_ptr[const CPaddingPolicy] _padding_inverse(object policy) except *:
    cdef shared_ptr[const CPaddingPolicy] none
    inverse = policy.inverse() if callable(getattr(policy, "inverse", None)) else None
    if inverse is None:
        return none
    return _padding_policy_of(inverse, f"{type(policy).__name__}.inverse()")


cdef PaddingCalls* _padding_calls = &padding_calls()
_padding_calls.label = _padding_label
_padding_calls.destination_image_descriptor = _padding_destination
_padding_calls.inverse = _padding_inverse

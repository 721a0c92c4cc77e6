# MPSNNInitialGradient (included by _kernels.pyx).

from mpsx.includes.kernels.initial_gradient cimport CNNInitialGradient

__all__ += ["NNInitialGradient"]


cdef class NNInitialGradient(CNNUnaryKernel):
    """NNInitialGradient(device)
--

    Ones for every source element the kernel reads: the destination is the source's size (as a 1x1 window's padding
    policy makes it), the gradient of an image with itself that starts a backward pass at any image. It has no
    gradient kernel. As ``-[MPSNNInitialGradient initWithDevice:]``.

    MPS: MPSNNInitialGradient
    """

    def __init__(self, Device device not None):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CNNInitialGradient](device.shared()), NNGradientState)

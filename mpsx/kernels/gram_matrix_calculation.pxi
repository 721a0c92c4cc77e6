# MPSNNGramMatrixCalculation and MPSNNGramMatrixCalculationGradient (included by _kernels.pyx).

from mpsx.includes.kernels.gram_matrix_calculation cimport (
    CNNGramMatrixCalculation as CGramMatrixCalculation,
    CNNGramMatrixCalculationGradient as CGramMatrixCalculationGradient)

__all__ += ["NNGramMatrixCalculation", "NNGramMatrixCalculationGradient"]


cdef class NNGramMatrixCalculation(CNNUnaryKernel):
    """NNGramMatrixCalculation(device, alpha=1.0)
--

    The Gram matrix of each image: for C source channels (from ``source_feature_channel_offset``, at most
    ``source_feature_channel_max_count``), ``G[f][c] = alpha * sum_{y,x} x[f, y, x] * x[c, y, x]``, written to a
    destination of C x 1 pixels and C feature channels, ``G[f][c]`` at feature channel c of pixel (f, 0), as
    ``torch.einsum("nfyx,ncyx->ncf", x, x) * alpha`` read as (N, C, 1, C). ``offset`` and ``clip_rect`` must keep their
    defaults (ValueError at encode), as MPS supports no other. ValueError for a NaN or infinite alpha. As
    ``-[MPSNNGramMatrixCalculation initWithDevice:alpha:]``; ``-initWithDevice:`` is ``alpha=1.0``.

    MPS: MPSNNGramMatrixCalculation
    """

    def __init__(self, Device device not None, alpha=1.0):
        self._set(<shared_ptr[CUnaryKernel]>make_native[CGramMatrixCalculation](
            device.shared(), parameter(b"MPSNNGramMatrixCalculation", alpha, "alpha")), NNGradientState)

    def _mpsx_arguments(self):
        return (self.alpha,)

    cdef CGramMatrixCalculation* _gram(self) except NULL:
        return <CGramMatrixCalculation*>self.unary_kernel()

    @property
    def alpha(self):
        """The scale of the result (default 1.0); the result state of an encode carries it to the gradient.

        MPS: MPSNNGramMatrixCalculation.alpha
        """
        return self._gram().alpha()

    @alpha.setter
    def alpha(self, value):
        self._gram().set_alpha(parameter(b"MPSNNGramMatrixCalculation", value, "alpha"))


cdef class NNGramMatrixCalculationGradient(CNNGradientKernel):
    """NNGramMatrixCalculationGradient(device, alpha=1.0)
--

    The gradient of NNGramMatrixCalculation with respect to its source:
    ``dx[f, y, x] = alpha * sum_c (dG[f][c] + dG[c][f]) * x[c, y, x]``. The alpha is the forward encode's, from the
    gradient state: an encode sets ``alpha`` to it, as MPS's state "automatically adjusts" it. ValueError for a NaN or
    infinite alpha. As ``-[MPSNNGramMatrixCalculationGradient initWithDevice:alpha:]``; ``-initWithDevice:`` is
    ``alpha=1.0``.

    MPS: MPSNNGramMatrixCalculationGradient
    """

    def __init__(self, Device device not None, alpha=1.0):
        self._set(<shared_ptr[CGradientKernel]>make_native[CGramMatrixCalculationGradient](
            device.shared(), parameter(b"MPSNNGramMatrixCalculationGradient", alpha, "alpha")))

    def _mpsx_arguments(self):
        return (self.alpha,)

    cdef CGramMatrixCalculationGradient* _gram(self) except NULL:
        return <CGramMatrixCalculationGradient*>self.gradient_kernel()

    @property
    def alpha(self):
        """The scale of the forward result: the constructor's, then that of the last gradient state encoded with.

        MPS: MPSNNGramMatrixCalculationGradient.alpha
        """
        return self._gram().alpha()

    @alpha.setter
    def alpha(self, value):
        self._gram().set_alpha(parameter(b"MPSNNGramMatrixCalculationGradient", value, "alpha"))

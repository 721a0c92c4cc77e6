# cdef extern declarations of native/include/mpsx/kernels/loss.h
from mpsx.includes.kernel cimport *
from mpsx.includes.state cimport CGradientState

cdef extern from "mpsx/kernels/loss.h" namespace "mpsx" nogil:
    cdef enum class LossType "mpsx::LossType"(uint32_t):
        pass

    cdef enum class ReductionType "mpsx::ReductionType"(int32_t):
        pass

    cdef cppclass LossDescriptor "mpsx::LossDescriptor":
        LossType loss_type
        ReductionType reduction_type
        bool reduce_across_batch
        float weight
        float label_smoothing
        uint64_t number_of_classes
        float epsilon
        float delta
        bool operator==(const LossDescriptor&)
        void validate() except +raise_py_error

    cdef cppclass LossImageSize "mpsx::LossImageSize":
        int64_t width
        int64_t height
        int64_t feature_channels
        bool given()

    cdef cppclass CCNNLossLabels "mpsx::CNNLossLabels"(CState):
        CCNNLossLabels(shared_ptr[CDevice] device, shared_ptr[CImage] labels,
                       shared_ptr[CImage] weights, LossImageSize loss_image_size) except +raise_py_error
        const shared_ptr[CImage]& labels_image()
        const shared_ptr[CImage]& weights_image()
        const shared_ptr[CImage]& loss_image()
        const LossImageSize& loss_image_size()

    cdef cppclass CCNNLossLabelsBatch "mpsx::CNNLossLabelsBatch"(CState):
        CCNNLossLabelsBatch(shared_ptr[CDevice] device, vector[shared_ptr[CCNNLossLabels]] items) except +raise_py_error

    cdef cppclass CCNNLoss "mpsx::CNNLoss"(CKernel):
        CCNNLoss(shared_ptr[CDevice] device, LossDescriptor descriptor) except +raise_py_error
        const LossDescriptor& loss_descriptor()
        shared_ptr[CImage] encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                                  const shared_ptr[CCNNLossLabels]* labels, size_t count,
                                  const shared_ptr[CImage]& destination) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source) except +raise_py_error

    cdef cppclass CLossGradientState "mpsx::LossGradientState"(CGradientState):
        float weight
        float label_smoothing
        float epsilon
        float delta

    cdef cppclass CSeparatedLoss "mpsx::SeparatedLoss"(CKernel):
        float weight
        float label_smoothing
        float epsilon
        float delta
        LossDescriptor loss_descriptor()

    cdef cppclass CForwardLossEncoded "mpsx::NNForwardLoss::Encoded":
        shared_ptr[CImage] image
        shared_ptr[CLossGradientState] state

    cdef cppclass CNNForwardLoss "mpsx::NNForwardLoss"(CSeparatedLoss):
        CNNForwardLoss(shared_ptr[CDevice] device, LossDescriptor descriptor) except +raise_py_error
        CForwardLossEncoded encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source,
                                   const shared_ptr[CImage]& labels, const shared_ptr[CImage]& weights,
                                   const shared_ptr[CImage]& destination, const shared_ptr[CState]& state,
                                   bool want_state) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source) except +raise_py_error
        shared_ptr[CLossGradientState] result_state(const CImage& source) except +raise_py_error

    cdef cppclass CNNLossGradient "mpsx::NNLossGradient"(CSeparatedLoss):
        CNNLossGradient(shared_ptr[CDevice] device, LossDescriptor descriptor) except +raise_py_error
        bool compute_label_gradients
        shared_ptr[CImage] encode(CCommandBuffer& command_buffer, const shared_ptr[CImage]& source_gradient,
                                  const shared_ptr[CImage]& source, const shared_ptr[CImage]& labels,
                                  const shared_ptr[CImage]& weights, const shared_ptr[CState]& state,
                                  const shared_ptr[CImage]& destination) except +raise_py_error
        ImageDescriptor destination_image_descriptor(const CImage& source_gradient,
                                                     const CImage& source) except +raise_py_error

# cdef extern declarations of native/include/mpsx/graph.h
from mpsx.includes.common cimport *
from mpsx.includes.distributed cimport CCommunicator
from mpsx.includes.image cimport CImage
from mpsx.includes.padding cimport CPaddingPolicy
from mpsx.includes.kernel cimport CImageAllocator
from mpsx.includes.state cimport CState

cdef extern from "mpsx/graph.h" namespace "mpsx" nogil:
    cdef cppclass CFilterNode "mpsx::FilterNode"

    cdef cppclass CImageNode "mpsx::ImageNode":
        CImageNode(shared_ptr[void] handle)
        shared_ptr[void] handle
        bool export_from_graph
        bool synchronize_resource
        bool stop_gradient
        optional[DataType] format
        shared_ptr[CImageAllocator] image_allocator
        shared_ptr[CFilterNode] producer()

    cdef enum class StateNodeKind "mpsx::StateNodeKind"(uint8_t):
        ConvolutionGradient "mpsx::StateNodeKind::ConvolutionGradient"
        BinaryGradient "mpsx::StateNodeKind::BinaryGradient"
        ConvolutionTransposeGradient "mpsx::StateNodeKind::ConvolutionTransposeGradient"
        Labels "mpsx::StateNodeKind::Labels"

    cdef cppclass CStateNode "mpsx::StateNode":
        CStateNode(StateNodeKind kind, shared_ptr[void] handle)
        shared_ptr[void] handle
        bool export_from_graph
        bool synchronize_resource
        StateNodeKind kind()
        const char* class_name()
        shared_ptr[CFilterNode] producer()

    cdef enum class TrainingStyle "mpsx::TrainingStyle"(uint8_t):
        pass

    cdef cppclass CGradientOrigin "mpsx::FilterNode::GradientOrigin":
        shared_ptr[CFilterNode] forward
        vector[shared_ptr[CImageNode]] gradient_images
        size_t index

    cdef cppclass CFilterNode "mpsx::FilterNode":
        const char* class_name()
        shared_ptr[void] constructor_arguments
        const optional[CGradientOrigin]& gradient_origin()
        vector[shared_ptr[CImageNode]] sources()
        vector[shared_ptr[CStateNode]] source_states()
        shared_ptr[CImageNode] result_image() except +raise_py_error
        vector[shared_ptr[CStateNode]] result_states() except +raise_py_error
        string label
        uint32_t padding_method
        shared_ptr[const CPaddingPolicy] padding_policy
        TrainingStyle training_style
        vector[shared_ptr[CFilterNode]] gradient_filters(const vector[shared_ptr[CImageNode]]& gradients) except +raise_py_error

    cdef cppclass CGraphEncoded "mpsx::NNGraph::Encoded":
        shared_ptr[CImage] result
        vector[shared_ptr[CImage]] intermediate_images
        vector[shared_ptr[CState]] result_states

    cdef cppclass CNNGraph "mpsx::NNGraph":
        CNNGraph(shared_ptr[CDevice] device, vector[shared_ptr[CImageNode]] results,
                 vector[bool] results_are_needed) except +raise_py_error
        const shared_ptr[CDevice]& device()
        vector[shared_ptr[CImageNode]] source_images()
        vector[shared_ptr[CStateNode]] source_states()
        int64_t read_count_for_source_image(size_t index) except +raise_py_error
        int64_t read_count_for_source_state(size_t index) except +raise_py_error
        vector[shared_ptr[CImageNode]] intermediate_images()
        vector[shared_ptr[CStateNode]] result_states()
        const shared_ptr[CImageNode]& result()
        bool result_image_is_needed()
        vector[shared_ptr[CImageNode]] results()
        vector[bool] results_are_needed()
        size_t step_count()
        size_t fused_count()
        DataType format()
        bool output_state_is_temporary
        bool capture_encodes
        uint64_t captured_encode_count()
        shared_ptr[CImageAllocator] destination_image_allocator
        void set_format(DataType format) except +raise_py_error
        CGraphEncoded encode(CCommandBuffer& command_buffer, const vector[shared_ptr[CImage]]& source_images,
                             const vector[shared_ptr[CState]]& source_states) except +raise_py_error
        void reload_from_data_sources() except +raise_py_error
        const shared_ptr[CCommunicator]& data_parallel()
        void set_data_parallel(shared_ptr[CCommunicator] communicator) except +raise_py_error

cdef extern from "_graph.h" namespace "mpsx::python":
    ctypedef object (*WrapFilterNode)(const shared_ptr[CFilterNode]&)
    ctypedef object (*WrapImageNode)(const shared_ptr[CImageNode]&)
    vector[shared_ptr[CFilterNode]] python_training_graph(const shared_ptr[CFilterNode]& last,
                                                          shared_ptr[CImageNode] source_gradient, object handler,
                                                          WrapFilterNode wrap_filter,
                                                          WrapImageNode wrap_image) except +raise_py_error

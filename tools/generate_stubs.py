#!/usr/bin/env python3
"""Writes mpsx's type stubs (mpsx/*.pyi) from the built package.

    PYTHONPATH=build/dev/stage python tools/generate_stubs.py          # rewrite the stubs
    PYTHONPATH=build/dev/stage python tools/generate_stubs.py --check  # exit 1 with a diff if they differ

What the runtime tells, the stubs take from it: the classes and their bases, each member on the class that
defines it (a subclass inherits rather than repeats), every signature as inspect reads it (a constructor's
from its class's declared __text_signature__), defaults, which properties are settable, enum members, module
functions and constants, __all__ and where each exported name comes from. What the runtime cannot tell is
the types: Cython's untyped arguments and the Python modules carry no annotations, so the types come from the
tables below, keyed by the names mpsx gives the same thing everywhere (a ``kernel_width`` is an int wherever
it stands), with the exceptions by class and member. A name the tables lack stops the generator."""

import argparse
import difflib
import enum
import inspect
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = "# Written by tools/generate_stubs.py from the built package: change the tool, not this file."
WIDTH = 120  # the line length of the project's formatter

# --- Types the runtime cannot tell -------------------------------------------------------------------------
# Each key is a type; each value the parameter, property and class-attribute names that have it wherever they
# stand. A parameter whose default is None also takes None.
TYPES = {
    "Any": "memo mpi_comm result_handle tensor",
    "BaseException | None": "error exc",
    "Buffer": ("predicate_buffer beta buffer gradient_for_beta gradient_for_biases gradient_for_gamma "
        "gradient_for_weights mean variance"
    ),
    "CNNBatchNormalization": "batch_normalization",
    "CNNBatchNormalizationFlags": "flags",
    "CNNBatchNormalizationState": "batch_normalization_gradient_state batch_normalization_source_state",
    "CNNBatchNormalizationState | StateBatch": "batch_normalization_state",
    "CNNConvolution": "convolution",
    "CNNConvolutionGradientOption": "gradient_option",
    "CNNConvolutionGradientState": "convolution_gradient_state",
    "CNNConvolutionTranspose": "convolution_transpose",
    "CNNConvolutionWeightsAndBiasesState": "convolution_source_state",
    "CNNGroupNormalization | None": "group_normalization",
    "CNNInstanceNormalization | None": "instance_normalization",
    "CNNKernel | None": "kernel",
    "CNNLossDataDescriptor": "labels_descriptor weights_descriptor",
    "CNNLossDescriptor": "loss_descriptor",
    "CNNLossType": "loss_type",
    "CNNNeuron | None": "neuron",
    "CNNNormalizationGammaAndBetaState": "gamma_and_beta_state",
    "CNNNormalizationMeanAndVarianceState": "mean_and_variance_state",
    "CNNReductionType": "reduction_type",
    "Callable[[CommandBuffer], object]": "handler",
    "Callable[[Image | None, BaseException | None], object]": "completion_handler",
    'Callable[[npt.NDArray[np.float32], Literal["sum", "mean"]], object]': "host_all_reduce",
    "CommandBuffer": "command_buffer root_command_buffer",
    "Predicate | None": "predicate",
    "ImageAllocator": "destination_image_allocator image_allocator",
    "CommandQueue": "command_queue",
    "Communicator": "communicator",
    "Communicator | _ProcessGroup": "data_parallel",
    "DataLayout | int": "layout",
    "DataType": "channel_format data_type format",
    "Device": "device",
    "Image": "destination_gradient source_gradient source_image",
    "Image | ImageBatch": "destination_image labels_image primary_image secondary_image weights_image",
    "ImageBatch": "destination_gradients destination_images",
    "ImageDescriptor": "descriptor image_descriptor suggested_descriptor",
    "list[ImageDescriptor]": "image_descriptor_list",
    "list[VectorDescriptor]": "descriptor_list",
    "ImageCoordinate": "padding_size_before padding_size_after",
    "ImageEdgeMode": "edge_mode primary_edge_mode secondary_edge_mode",
    "Iterable[State] | None": "batch",
    "Iterable[str]": "names",
    'Literal["cpu", "cuda", "metal"]': "backend",
    'Literal["not_enqueued", "committed", "completed", "error"]': "status",
    'Literal["sum", "mean"]': "op",
    "Mapping[str, npt.ArrayLike]": "state_dict",
    "Mapping[str, object]": "data_sources properties",
    "NNBinaryArithmeticNode": "forward_filter",
    "NNBinaryGradientStateNode | None": "binary_gradient_state",
    "NNComparisonType": "comparison_type",
    "NNConvolutionAccumulatorPrecisionOption": "accumulator_precision accumulator_precision_option",
    "NNFilterNode | None": "producer",
    "NNImageNode": "gradient_image left_source result_image right_source source",
    "NNLabelsNode": "input_labels",
    "NNNeuronDescriptor": "neuron_descriptor",
    "NNNeuronDescriptor | None": "fused_neuron_descriptor",
    "NNOptimizer": "optimizer",
    "NNOptimizerDescriptor": "optimizer_descriptor",
    "NNPaddingMethod": "method",
    "NNPaddingMethod | NNPadding": "padding padding_policy",
    "CNNKernel": "for_kernel",
    "NNRegularizationType": "regularization_type",
    "NNStateNode": "convolution_transpose_gradient_state",
    "NNTrainingStyle": "training_style",
    "NeuronType": "neuron_type",
    "Offset": "offset primary_offset secondary_offset",
    "Region | None": "clip_rect clip_rect_source",
    "Sequence[NNImageNode]": "gradient_images result_images sources",
    "Sequence[Vector]": (
        "input_momentum_vectors input_sum_of_squares_vectors input_velocity_vectors maximum_velocity_vectors"
    ),
    "Sequence[bool]": "results_are_needed",
    "State": "gradient_state result_state",
    "TracebackType | None": "tb",
    "Vector": (
        "input_gradient_vector input_momentum_vector input_sum_of_squares_vector input_values_vector "
        "input_velocity_vector maximum_velocity_vector result_values_vector"
    ),
    "_ConvolutionDataSource": "data_source",
    "_Handle | None": "handle",
    "_ImageSource": "labels primary_images secondary_images source_gradients source_images weights",
    "_LossCallback | None": "property_call_back",
    "_TransformProvider | None": "transform_provider",
    "tuple[int, int] | tuple[int, int, int]": "output_size",
    "_NodeHandler": "node_handler",
    "_Reducible | Sequence[_Reducible]": "items",
    "_StateSource": (
        "convolution_gradient_states gradient_states group_normalization_state_batch "
        "instance_normalization_state_batch source_state source_states"
    ),
    "bool": (
        "align_corners no_copy use_nestrov_momentum apply_gradient_clipping compute_label_gradients copy "
        "destination_state "
        "destination_state_is_temporary destination_states deterministic export_from_graph intermediate_images "
        "is_backwards is_labels_gradient_filter is_secondary_source_filter is_state_modified is_temporary linear "
        "capture_encodes capture_command_buffers output_state_is_temporary "
        "reduce_across_batch replayable result_image_is_needed result_state_can_be_temporary "
        "serialize_weights_and_biases stop_gradient synchronize_resource use_nesterov_momentum"
    ),
    "bytes": "group_id",
    "dict[str, Sequence[npt.ArrayLike]]": "state",
    "KernelOptions": "options",
    "float": (
        "scale_x scale_y translate_x translate_y "
        "a alpha b fill_value parameter_a parameter_b neuron_parameter_a neuron_parameter_b neuron_parameter_c beta1 "
        "beta2 bias c "
        "decay delta epsilon gradient_clip_max gradient_clip_min "
        "gradient_rescale "
        "keep_probability label_smoothing learning_rate maximum_value minimum_value momentum momentum_scale p0 pm "
        "primary_scale ps regularization_scale scale_factor_x scale_factor_y secondary_scale threshold timeout weight"
    ),
    "int": (
        "amount source_width source_height resource_count predicate_offset biases_offset channel "
        "result_feature_channels "
        "result_height result_width "
        "sub_pixel_scale_factor "
        "bytes_cached bytes_in_use bytes_per_column bytes_per_image bytes_per_row collective_calls image_index "
        "pixel_size precision "
        "command_count count depth destination_feature_channel_offset dilation_rate dilation_rate_x dilation_rate_y "
        "feature_channels filter_size groups height input_feature_channels integer_scale_factor_x "
        "index integer_scale_factor_y kernel_height kernel_offset_x kernel_offset_y kernel_size "
        "kernel_size_in_feature_channels kernel_width layout_checks length local_rank number_of_classes "
        "captured_encode_count captured_command_buffer_count number_of_feature_channels number_of_filters number_of_fused_filters number_of_groups number_of_images "
        "output_feature_channels peak_bytes_in_use primary_dilation_rate_x primary_dilation_rate_y "
        "primary_kernel_height primary_kernel_width primary_source_feature_channel_max_count "
        "primary_source_feature_channel_offset primary_stride_in_feature_channels primary_stride_in_pixels_x "
        "primary_stride_in_pixels_y rank read_count secondary_dilation_rate_x secondary_dilation_rate_y "
        "secondary_kernel_height secondary_kernel_width secondary_source_feature_channel_max_count "
        "secondary_source_feature_channel_offset secondary_stride_in_feature_channels secondary_stride_in_pixels_x "
        "secondary_stride_in_pixels_y seed source_feature_channel_max_count source_feature_channel_offset "
        "source_gradient_feature_channels source_image_feature_channels source_index stream stride stride_in_pixels_x "
        "stride_in_pixels_y time_step usage weights_offset width world_size x y z zero_pad_size_x zero_pad_size_y"
    ),
    "int | None": "bucket_bytes reshaped_feature_channels reshaped_height reshaped_width",
    "list[Any]": "intermediate_image_handles result_state_handles source_image_handles source_state_handles",
    "list[NNStateNode]": "result_states",
    "npt.ArrayLike": "array biases data gamma parameters_a",
    "npt.NDArray[np.float32] | None": "fill_value_array",
    "npt.DTypeLike": "dtype",
    "object": "obj value",
    "str": "label library name",
    "str | PathLike[str]": "path",
    "tuple[int, int, int, int]": "shape weights_shape",
    "tuple[int, int, int]": "loss_image_size mask_stride_in_pixels size",
    "tuple[int, int, int] | None": "source_size",
    "tuple[int, int]": "dl_device max_version",
    "type": "cls",
    "type[BaseException] | None": "exc_type",
}
# The graph's nodes name their node inputs as the kernels name their images and states.
NODE_TYPES = {
    "Any": "data_source",
    "DataType | None": "format",
    "NNImageNode": "labels source_gradient source_image",
    "NNNeuronDescriptor": "descriptor",
    "NNStateNode": "gradient_state",
    "NNStateNode | None": "convolution_gradient_state result_state",
    "_ConvolutionDataSource": "weights",
    "list[NNImageNode]": "source_images",
    "list[NNStateNode]": "source_states",
}
# Return types by method name.
RETURNS = {
    "Any": "__dlpack__",
    "BatchNormalizationWeights": "batch_normalization_weights_from_torch",
    "Buffer": "from_dlpack predicate_buffer",
    "CNNConvolutionDescriptor": "descriptor",
    "CNNConvolutionWeightsAndBiasesState": "export_weights_and_biases",
    "CNNNormalizationGammaAndBetaState": "temporary_state update_gamma_and_beta_with_command_buffer",
    "CNNNormalizationMeanAndVarianceState": "update_mean_and_variance_with_command_buffer",
    "CommandBuffer": "command_buffer command_buffer_from_command_queue root_command_buffer",
    "Predicate | None": "predicate",
    "ImageAllocator": "default_allocator",
    "State": "temporary_state_with_command_buffer",
    "Buffer | None": "resource_at_index",
    "StateResourceType": "resource_type_at_index",
    "Image | ImageBatch": "image_for_command_buffer image_batch_for_command_buffer",
    "CommandQueue": "new_command_queue",
    "ConvolutionWeights": "convolution_weights_from_torch",
    "Device": "device_of",
    "Image": "encode labels_image loss_image",
    "Image | None": "execute_async weights_image",
    "ImageBatch": "encode_batch",
    "type[NNArithmeticGradientNode] | None": "gradient_class",
    "ImageDescriptor": "destination_image_descriptor destination_image_descriptor_for_source_images",
    "NNPaddingMethod": "padding_method",
    "NNPadding | None": "inverse",
    "Iterator[Image]": "__iter__",
    "Literal[False]": "__exit__",
    "NNGradientFilterNode": "gradient_filter_with_source gradient_filter_with_sources",
    "None": (
        "add_completed_handler all_reduce append_buffer barrier commit commit_and_continue destroy empty_cache "
        "encode_all_reduce "
        "encode_gamma_and_beta_update encode_mean_and_variance_update encode_weights_and_bias_update purge "
        "reload_data_source reload_from_data_sources reload_gamma_and_beta reload_gamma_and_beta_from_data_source "
        "reload_mean_and_variance reload_mean_and_variance_from_data_source reload_weights_and_biases "
        "reload_weights_and_biases_from_data_source prefetch_heap_for_workload_size "
        "prefetch_storage_with_command_buffer "
        "replay reset "
        "reset_peak_bytes_in_use restore_properties save set_learning_rate set_neuron_to_p_re_lu_with_parameters_a "
        "set_gamma_and_beta set_mean_and_variance set_neuron_type "
        "set_optimizer_state set_weights_and_biases synchronize "
        "wait_until_completed wait_until_idle write"
    ),
    "NeuronType": "neuron_type",
    "ProcessGroup": "group init",
    "Self": (
        "__copy__ __deepcopy__ __enter__ __new__ copy exported_node_with_handle node_with_handle node_with_source "
        "node_with_source_gradient node_with_sources with_gradient_images cnn_convolution_descriptor_with_kernel_width "
        "cnn_loss_descriptor_with_type image_descriptor_with_channel_format node_with_left_source "
        "optimizer_descriptor_with_learning_rate temporary_image_with_command_buffer "
        "temporary_vector_with_command_buffer cnn_neuron_descriptor_with_type "
        "cnn_neuron_p_re_lu_descriptor_with_data graph_with_device resource_list resource_list_with_buffer_sizes "
        "vector_descriptor_with_length padding_with_method padding_for_tensorflow_average_pooling "
        "padding_for_tensorflow_average_pooling_valid_only command_buffer_with_command_buffer predicate_with_buffer"
    ),
    "State | None": "temporary_result_state",
    "StateBatch | None": "result_state_batch temporary_result_state_batch",
    "Vector": "from_numpy",
    "_S": "result_state",
    "bool": "append_batch_barrier is_result_state_reused_across_batch load",
    "dict[str, list[npt.NDArray[np.float32]]]": "optimizer_state",
    "dict[str, npt.NDArray[np.float32]]": "torch_state_dict",
    "float": "alpha_for_source_image neuron_parameter_a neuron_parameter_b scalar_weight_for_source_image",
    "int": (
        "__len__ batch_encoding_storage_size buffer_size_at_index encoding_storage_size number_of_feature_channels "
        "rank "
        "read_count_for_source_image_at_index read_count_for_source_state_at_index resource_size "
        "state_batch_increment_read_count world_size"
    ),
    "list[CNNGradientKernel]": "gradient_kernels",
    "list[Device]": "devices",
    "list[NNFilterNode]": "training_graph",
    "list[NNGradientFilterNode]": "gradient_filters_with_source gradient_filters_with_sources",
    "list[str]": "property_names",
    "npt.NDArray[Any]": "__array__ to_numpy weights",
    "npt.NDArray[np.float32]": "weights_from_torch weights_to_torch",
    "npt.NDArray[np.float32] | None": "beta bias_terms gamma mean variance",
    "npt.NDArray[np.uint8]": "mask_data",
    "str": "quoted",
    "str | None": "label",
    "tuple[Any, tuple[Any, ...]]": "reduce",
    "tuple[int, int]": "__dlpack_device__",
}
# The exceptions: "Class.member" (a property's type or a method's return) or "Class.method.parameter".
OVERRIDES = {
    "BatchNormalizationWeights.__init__.beta": "npt.ArrayLike",
    "BatchNormalizationWeights.set_gamma_and_beta.beta": "npt.ArrayLike",
    "BatchNormalizationWeights.set_mean_and_variance.mean": "npt.ArrayLike",
    "BatchNormalizationWeights.set_mean_and_variance.variance": "npt.ArrayLike",
    "_NormalizationWeights.set_gamma_and_beta.beta": "npt.ArrayLike",
    "ConvolutionWeights.set_weights_and_biases.weights": "npt.ArrayLike",
    "BatchNormalizationWeights.__init__.mean": "npt.ArrayLike",
    "BatchNormalizationWeights.__init__.variance": "npt.ArrayLike",
    "BatchNormalizationWeights.optimizer": "NNOptimizer | None",
    "Buffer.dtype": "np.dtype[Any]",
    "Buffer.shape": "tuple[int, ...]",
    "CNNBatchNormalization.__init__.data_source": "Any",
    "CNNBatchNormalization.data_source": "Any",
    "CNNBatchNormalization.encode.batch_normalization_state": "CNNBatchNormalizationState",
    "CNNBatchNormalization.encode.destination_image": "Image",
    "CNNBatchNormalizationGradient.encode.batch_normalization_state": "CNNBatchNormalizationState",
    "CNNBatchNormalizationState.gamma": "Buffer",
    "CNNBatchNormalizationStatistics.encode_batch": "None",
    "CNNBatchNormalizationStatisticsGradient.encode": "Any",
    "CNNBatchNormalizationStatisticsGradient.encode_batch": "None",
    "CNNBinaryKernel.destination_image_descriptor.source_images": "Sequence[Image | ImageBatch]",
    "CNNConvolutionNode.convolution_gradient_state": "CNNConvolutionGradientStateNode",
    "CNNConvolutionTranspose.destination_image_descriptor.source_states": "State | Sequence[State]",
    "CNNConvolutionTransposeGradientState.convolution": "CNNConvolution | None",
    "CNNConvolutionWeightsAndBiasesState.__init__.biases": "Buffer | npt.ArrayLike",
    "CNNConvolutionWeightsAndBiasesState.__init__.weights": "Buffer | npt.ArrayLike",
    "CNNConvolutionWeightsAndBiasesState.biases": "Buffer | None",
    "CNNConvolutionWeightsAndBiasesState.weights": "Buffer",
    "CNNDilatedPoolingMax.__init__.stride_in_pixels_x": "int | None",
    "CNNDilatedPoolingMax.__init__.stride_in_pixels_y": "int | None",
    "CNNDilatedPoolingMaxGradient.__init__.stride_in_pixels_x": "int | None",
    "CNNDilatedPoolingMaxGradient.__init__.stride_in_pixels_y": "int | None",
    "CNNGradientKernel.destination_image_descriptor.source_images": "_ImageSource | Sequence[Image | ImageBatch]",
    "CNNGradientKernel.result_state": "None",
    "CNNGroupNormalization.__init__.data_source": "Any",
    "CNNInstanceNormalization.__init__.data_source": "Any",
    "CNNKernel.batch_encoding_storage_size.source_images": "_ImageSource",
    "CNNKernel.encoding_storage_size.source_images": "Image",
    "CNNKernel.result_state_batch.source_images": "_ImageSource",
    "CNNKernel.temporary_result_state.source_images": "Image | ImageBatch",
    "CNNKernel.temporary_result_state_batch.source_images": "_ImageSource",
    "CNNLoss.destination_image_descriptor.source_states": "State | Sequence[State]",
    "CNNLoss.encode.destination_image": "Image",
    "CNNLoss.encode.labels": "CNNLossLabels",
    "CNNLoss.encode_batch.labels": "CNNLossLabels | Sequence[CNNLossLabels]",
    "CNNLossDataDescriptor.__init__.data": "npt.NDArray[np.float32] | bytes | bytearray | memoryview",
    "CNNLossDataDescriptor.data": "bytes",
    "CNNLossDataDescriptor.layout": "DataLayout",
    "CNNLossDataDescriptor.to_numpy": "npt.NDArray[np.float32]",
    "CNNLossLabels.__init__.labels": "_LossData",
    "CNNLossLabels.__init__.weights": "_LossData",
    "CNNLossLabels.loss_image_size": "tuple[int, int, int] | None",
    "CNNNeuron.data": "npt.NDArray[np.float32] | None",
    "CNNNeuronGradient.data": "npt.NDArray[np.float32] | None",
    "CNNNeuronPReLU.__init__.a": "npt.ArrayLike",
    "CNNNeuronPReLUNode.__init__.a_data": "npt.ArrayLike",
    "CNNNeuronPReLUNode.node_with_source.a_data": "npt.ArrayLike",
    "CNNNormalizationGammaAndBetaState.__init__.beta": "Buffer | npt.ArrayLike",
    "CNNNormalizationGammaAndBetaState.__init__.gamma": "Buffer | npt.ArrayLike",
    "CNNNormalizationGammaAndBetaState.gamma": "Buffer",
    "CNNNormalizationMeanAndVarianceState.__init__.mean": "Buffer | npt.ArrayLike",
    "CNNNormalizationMeanAndVarianceState.__init__.variance": "Buffer | npt.ArrayLike",
    "CNNNormalizationMeanAndVarianceState.temporary_state": "CNNNormalizationMeanAndVarianceState",
    "CNNPoolingGradientNode.__init__.padding_policy": "NNPaddingMethod | int | NNPadding",
    "CommandBuffer.prefetch_heap_for_workload_size.size": "int",
    "Predicate.__init__.offset": "int",
    "State.destination_image_descriptor_for_source_images.source_images": "Sequence[Image]",
    "State.destination_image_descriptor_for_source_images.source_states": "Sequence[State]",
    "VectorDescriptor.__init__.vectors": "int",
    "VectorDescriptor.__init__.vector_bytes": "int | None",
    "VectorDescriptor.__init__.length": "int",
    "VectorDescriptor.__init__.data_type": "DataType | int",
    "VectorDescriptor.vector_descriptor_with_length.vectors": "int",
    "VectorDescriptor.vector_descriptor_with_length.vector_bytes": "int | None",
    "VectorDescriptor.vector_descriptor_with_length.length": "int",
    "VectorDescriptor.vector_descriptor_with_length.data_type": "DataType | int",
    "VectorDescriptor.vector_bytes_for_length.length": "int",
    "VectorDescriptor.vector_bytes_for_length.data_type": "DataType | int",
    "Vector.__init__.offset": "int",
    "Vector.__init__.length": "int | None",
    "Vector.__init__.descriptor": "VectorDescriptor | None",
    "Vector.__init__.buffer": "Buffer | None",
    "TemporaryVector.__init__.descriptor": "VectorDescriptor",
    "TemporaryVector.temporary_vector_with_command_buffer.descriptor": "VectorDescriptor",
    "Vector.vectors": "int",
    "Vector.vector_bytes": "int",
    "Vector.offset": "int",
    "VectorDescriptor.vector_bytes_for_length": "int",
    "Vector.resource_size": "int",
    "VectorDescriptor.vectors": "int",
    "VectorDescriptor.vector_bytes": "int",
    "State.__init__.buffer_size": "int | None",
    "State.__init__.resource_list": "StateResourceList | None",
    "State.__init__.resource": "Buffer | None",
    "State.__init__.resources": "Sequence[Buffer] | None",
    "State.temporary_state_with_command_buffer.buffer_size": "int | None",
    "State.temporary_state_with_command_buffer.resource_list": "StateResourceList | None",
    "State.resource_at_index.allocate_memory": "bool",
    "State.resource_at_index.index": "int",
    "State.buffer_size_at_index.index": "int",
    "State.resource_type_at_index.index": "int",
    "StateResourceList.append_buffer.size": "int",
    "State.resource": "Buffer | None",
    "State.label": "str | None",
    "StateResourceList.resource_list_with_buffer_sizes.sizes": "int",
    "Predicate.predicate_with_buffer.offset": "int",
    "CNNPoolingGradientNode.node_with_source_gradient.padding_policy": "NNPaddingMethod | int | NNPadding",
    "CNNUnaryKernel.result_state.source_image": "Image | ImageBatch",
    "ConvolutionWeights.__init__.descriptor": "CNNConvolutionDescriptor",
    "ConvolutionWeights.__init__.weights": "npt.ArrayLike",
    "ConvolutionWeights.optimizer": "NNOptimizer | None",
    "ConvolutionWeights.weights": "npt.NDArray[np.float32]",
    "GroupNormalizationWeights.__init__.beta": "npt.ArrayLike",
    "Image.from_dlpack": "Image",
    "Image.from_numpy": "Image",
    "ImageBatch.from_dlpack": "ImageBatch",
    "ImageBatch.from_numpy": "ImageBatch",
    "InstanceNormalizationWeights.__init__.beta": "npt.ArrayLike",
    "NNForwardLoss.destination_image_descriptor.source_states": "State | Sequence[State]",
    "NNForwardLoss.result_state.source_image": "_ImageSource",
    "NNForwardLossNode.__init__.weights": "NNImageNode",
    "NNGramMatrixCalculationNode.property_call_back": "_GramMatrixCallback | None",
    "NNScaleNode.output_size": "tuple[int, int, int]",
    "ImageTransformProvider.transform_for_source_image": "ScaleTransform | tuple[float, float, float, float]",
    "ImageTransformProvider.transform_for_source_image.image": "Image",
    "NNGramMatrixCallback.alpha_for_source_image.destination_image": "Image",
    "NNGraph.data_parallel": "Communicator | None",
    "NNGraph.execute_async.source_images": "Sequence[Image]",
    "NNHandle.__init__.label": "str | None",
    "NNLossCallback.scalar_weight_for_source_image.destination_image": "Image | None",
    "NNLossGradient.encode_batch.destination_gradients": "ImageBatch | Image",
    "NNLossGradientNode.__init__.weights": "NNImageNode",
    "NNNeuronDescriptor.data": "npt.NDArray[np.float32] | None",
    "NNOptimizer.set_learning_rate.learning_rate": "float | None",
    "NNOptimizerAdam.encode": "None",
    "NNOptimizerRMSProp.encode": "None",
    "NNOptimizerStochasticGradientDescent.encode": "None",
    "NNPad.__init__.fill_value_array": "npt.ArrayLike | None",
    "NNPad.__init__.padding_size_after": "ImageCoordinate | tuple[int, int, int]",
    "NNPad.__init__.padding_size_before": "ImageCoordinate | tuple[int, int, int]",
    "NNPadNode.__init__.padding_size_after": "ImageCoordinate | tuple[int, int, int]",
    "NNPadNode.__init__.padding_size_before": "ImageCoordinate | tuple[int, int, int]",
    "ProcessGroup.__init__.backend": 'Literal["nccl", "mpi"]',
    "ProcessGroup.backend": 'Literal["nccl", "mpi"]',
    "StateBatch.__new__.state": "State",
    "_ConvolutionGradientKernel.descriptor": "CNNConvolutionDescriptor",
    "_ConvolutionGradientKernel.reload_weights_and_biases.state": "CNNConvolutionWeightsAndBiasesState",
    "_ConvolutionKernel.descriptor": "CNNConvolutionDescriptor",
    "_ConvolutionKernel.encode_weights_and_bias_update.gradient_state": "CNNConvolutionGradientState",
    "_ConvolutionKernel.reload_weights_and_biases.state": "CNNConvolutionWeightsAndBiasesState",
    "_NormalizationGradientState.gamma": "Buffer",
    "_NormalizationKernel.data_source": "Any",
    "_NormalizationKernel.encode_gamma_and_beta_update.state": "_StateSource",
    "_NormalizationKernel.reload_data_source.data_source": "Any",
    "_NormalizationWeights.optimizer": "NNOptimizer | None",
    "convolution_weights_from_torch.descriptor": "CNNConvolutionDescriptor",
    "copy": "_T",
    "copy.obj": "_T",
    "device_of.device": "Device | None",
    "device_of.state": "Mapping[str, object]",
    "init.backend": 'Literal["nccl", "mpi"]',
    "load": "Any",
    "weights_from_torch.descriptor": "CNNConvolutionDescriptor",
    "weights_from_torch.weight": "npt.ArrayLike",
    "weights_to_torch.weight": "npt.ArrayLike",
    # mpsx.imported: torch's types stay out of the stubs.
    "from_torch.module": "Any",
    "from_torch.example_input": "Any",
    "from_torch.device": "Device | None",
    "from_torch.optimizer": "NNOptimizer | None",
    "from_torch": "ImportedModel",
    "from_onnx.model_or_path": "Any",
    "from_onnx.device": "Device | None",
    "from_onnx.optimizer": "NNOptimizer | None",
    "from_onnx": "ImportedModel",
    "to_onnx.model": "ImportedModel",
    "to_onnx.path": "str | None",
    "to_onnx": "Any",
    "ImportedModel.__init__.description": "Any",
    "ImportedModel.__init__.device": "Device | None",
    "ImportedModel.__init__.optimizer": "NNOptimizer | None",
    "ImportedModel.inference_graph": "NNGraph",
    "ImportedModel.training_graph": "NNGraph",
    "ImportedModel.training_graph.optimizer": "NNOptimizer | None",
    "ImportedModel.training_graph.loss_descriptor": "CNNLossDescriptor | Any",
    "loss_from_torch.loss": "Any",
    "loss_from_torch.number_of_classes": "int",
    "loss_from_torch": "CNNLossDescriptor",
    "ImportedModel.source_handles": "list[NNHandle]",
    "ImportedModel.data_sources": (
        "dict[str, ConvolutionWeights | BatchNormalizationWeights | GroupNormalizationWeights | "
        "InstanceNormalizationWeights]"
    ),
    "ImportedModel.state_dict": "dict[str, npt.NDArray[np.float32] | npt.NDArray[np.int64]]",
    "ImportedModel.load_state_dict": "None",
    "ImportedModel.load_state_dict.state_dict": "Mapping[str, Any]",
}
OVERRIDES.update({
    # MPSImage's members (MPSImage.h).
    "Images.read_bytes.data_bytes": "bytearray | memoryview | npt.NDArray[Any]",
    "Images.write_bytes.data_bytes": "bytes | bytearray | memoryview | npt.NDArray[Any]",
    "Images.read_bytes.region": "tuple[tuple[int, int, int], tuple[int, int, int]]",
    "Images.write_bytes.region": "tuple[tuple[int, int, int], tuple[int, int, int]]",
    "Images.read_bytes.feature_channel_info": "tuple[int, int]",
    "Images.write_bytes.feature_channel_info": "tuple[int, int]",
    "Images.read_bytes.data_layout": "int",  # a DataLayout (of mpsx._kernels)
    "Images.write_bytes.data_layout": "int",
    "Images.read_bytes": "None",
    "Images.write_bytes": "None",
    "Images.batch_representation_with_sub_range.sub_range": "tuple[int, int]",
    "Images.set_purgeable_state.state": "PurgeableState | int",
    "Images.set_purgeable_state": "PurgeableState",
    "Images.batch_representation": "ImageBatch",
    "Images.batch_representation_with_sub_range": "ImageBatch",
    "Images.parent": "Images | None",
    "Images.label": "str | None",
    "Image.with_parent_image.slice_range": "tuple[int, int]",
    "Image.sub_image_with_feature_channel_range.range": "tuple[int, int]",
    "Image.sub_image_with_feature_channel_range": "Image",
    "Image.with_parent_image": "Image",
    "Image.with_parent_image.parent": "Images",
})
OVERRIDES.update({
    # The convolution data source protocol's optional members.
    "CNNConvolutionDataSource.kernel_weights_data_type": "DataType",
    "CNNConvolutionDataSource.weights_layout": "CNNConvolutionWeightsLayout",
    "CNNConvolutionDataSource.weights_quantization_type": 'Literal["none", "linear", "lookup_table"]',
    "CNNConvolutionDataSource.ranges_for_uint8_kernel": "npt.ArrayLike | None",
    "CNNConvolutionDataSource.lookup_table_for_uint8_kernel": "npt.ArrayLike | None",
    "CNNConvolutionDataSource.update_with_gradient_state": "bool",
    "CNNConvolutionDataSource.update_with_command_buffer": "CNNConvolutionWeightsAndBiasesState | None",
    "CNNConvolutionDataSource.update_with_gradient_state.gradient_state": "CNNConvolutionGradientState",
    "CNNConvolutionDataSource.update_with_gradient_state.source_state": "CNNConvolutionWeightsAndBiasesState",
    "CNNConvolutionDataSource.update_with_command_buffer.gradient_state": "CNNConvolutionGradientState",
    "CNNConvolutionDataSource.update_with_command_buffer.source_state": "CNNConvolutionWeightsAndBiasesState",
    "CNNConvolutionGradientState.gradient_for_weights_layout": "CNNConvolutionWeightsLayout",
    "CNNDepthWiseConvolutionDescriptor.channel_multiplier": "int",
    "CNNConvolution.channel_multiplier": "int",
    "CNNConvolutionDescriptor.set_batch_normalization_parameters_for_inference_with_mean.mean": "npt.ArrayLike | None",
    "CNNConvolutionDescriptor.set_batch_normalization_parameters_for_inference_with_mean.variance": (
        "npt.ArrayLike | None"),
    "CNNConvolutionDescriptor.set_batch_normalization_parameters_for_inference_with_mean.gamma": "npt.ArrayLike | None",
    "CNNConvolutionDescriptor.set_batch_normalization_parameters_for_inference_with_mean.beta": "npt.ArrayLike | None",
    "CNNConvolutionDescriptor.set_batch_normalization_parameters_for_inference_with_mean": "None",
    "CNNConvolution.reload_weights_and_biases_with_data_source": "None",
    "CNNConvolutionWeightsAndBiasesState.__init__.device": "Device | None",
    "CNNConvolutionWeightsAndBiasesState.__init__.weights": "Buffer | npt.ArrayLike | None",
    "CNNConvolutionWeightsAndBiasesState.__init__.biases": "Buffer | npt.ArrayLike | None",
    "CNNConvolutionWeightsAndBiasesState.__init__.cnn_convolution_descriptor": "CNNConvolutionDescriptor | None",
    "CNNConvolutionWeightsAndBiasesState.temporary_cnn_convolution_weights_and_biases_state_with_command_buffer": (
        "Self"),
    "CNNConvolutionWeightsAndBiasesState.temporary_cnn_convolution_weights_and_biases_state_with_command_buffer."
    "cnn_convolution_descriptor": "CNNConvolutionDescriptor",
    "CNNConvolutionGradient.channel_multiplier": "int",
})
OVERRIDES.update({
    # The normalization data source protocols' CPU-side updates, CNNBatchNormalization.reload_data_source and the
    # loss data descriptor's factory.
    "CNNBatchNormalizationDataSource.update_gamma_and_beta_with_batch_normalization_state": "bool",
    "CNNBatchNormalizationDataSource.update_gamma_and_beta_with_batch_normalization_state.batch_normalization_state":
        "CNNBatchNormalizationState",
    "CNNBatchNormalizationDataSource.update_mean_and_variance_with_batch_normalization_state": "bool",
    "CNNBatchNormalizationDataSource.update_mean_and_variance_with_batch_normalization_state."
    "batch_normalization_state": "CNNBatchNormalizationState",
    "CNNGroupNormalizationDataSource.update_gamma_and_beta_with_group_normalization_state_batch": "bool",
    "CNNGroupNormalizationDataSource.update_gamma_and_beta_with_group_normalization_state_batch."
    "group_normalization_state_batch": "list[CNNGroupNormalizationGradientState]",
    "CNNInstanceNormalizationDataSource.update_gamma_and_beta_with_instance_normalization_state_batch": "bool",
    "CNNInstanceNormalizationDataSource.update_gamma_and_beta_with_instance_normalization_state_batch."
    "instance_normalization_state_batch": "list[CNNInstanceNormalizationGradientState]",
    "CNNBatchNormalization.reload_data_source.data_source": "Any",
    "CNNLossDataDescriptor.cnn_loss_data_descriptor_with_data": "Self",
    "CNNLossDataDescriptor.cnn_loss_data_descriptor_with_data.data":
        "npt.NDArray[np.float32] | bytes | bytearray | memoryview",
    "CNNLossDataDescriptor.cnn_loss_data_descriptor_with_data.size": "tuple[int, int, int]",
})
OVERRIDES.update({
    # The encodes that the overload rules below write several times.
    "CNNBinaryKernel.encode.destination_image": "Image",
    "CNNBinaryKernel.encode.primary_image": "Image",
    "CNNBinaryKernel.encode.secondary_image": "Image",
    "CNNConvolutionTranspose.encode.convolution_gradient_state": "_StateSource",
    "CNNConvolutionTranspose.encode.destination_image": "Image",
    "CNNConvolutionTranspose.result_state.source_image": "Image | ImageBatch",
    "CNNUnaryKernel.encode.destination_image": "Image",
    "ImageBatch.__getitem__.key": "int | slice",
    "NNForwardLoss.encode.destination_image": "Image",
    "NNForwardLoss.encode_batch.destination_images": "ImageBatch | Image",
    "NNGraph.encode.source_images": "Sequence[Image]",
    "NNGraph.encode.source_states": "Sequence[State]",
    "NNGraph.encode_batch.source_images": "Sequence[_ImageSource]",
    "NNGraph.encode_batch.source_states": "Sequence[State | Sequence[CNNLossLabels]]",
})
# Setters that take more than their getter returns (an enum setter also takes its int).
SETTERS = {
    "accumulator_precision": 'NNConvolutionAccumulatorPrecisionOption | int | Literal["float", "half"]',
    "accumulator_precision_option": 'NNConvolutionAccumulatorPrecisionOption | int | Literal["float", "half"]',
    "clip_rect": "tuple[int, int, int, int, int, int] | None",
    "clip_rect_source": "tuple[int, int, int, int, int, int] | None",
    "data": "npt.ArrayLike | None",
    "offset": "tuple[int, int] | tuple[int, int, int]",
    "padding": "NNPaddingMethod | int | NNPadding",
    "destination_image_allocator": "ImageAllocator | None",
    "image_allocator": "ImageAllocator | None",
    "padding_policy": "NNPaddingMethod | int | NNPadding",
    "primary_offset": "tuple[int, int] | tuple[int, int, int]",
    "secondary_offset": "tuple[int, int] | tuple[int, int, int]",
    "training_style": 'NNTrainingStyle | int | Literal["none", "cpu", "gpu"]',
}
# The attributes a Python class's __init__ sets, which its class does not show.
INSTANCE_ATTRIBUTES = {"ProcessGroup": "communicator backend local_rank"}
# Methods whose result's type follows its one argument's: (argument type, result type) per overload.
PARAMETER_OVERLOADS = {"ImageBatch.__getitem__": [("int", "Image"), ("slice", "ImageBatch")]}
# The results of NNGraph's encodes by their flags: (result, intermediate images).
GRAPH_ENCODES = {"encode": ("Image | None", "list[Image]"), "encode_batch": ("ImageBatch | None", "list[ImageBatch]")}

# The kernels generic in the gradient state that destination_state=True returns (CNNUnaryKernel[_S]): a subclass
# names its family's state, Name + "GradientState" unless STATES says otherwise.
GENERIC = {"CNNUnaryKernel", "CNNBinaryKernel", "_ConvolutionKernel", "_NormalizationKernel"}
STATES = {"CNNGradientKernel": "NNGradientState", "CNNBatchNormalization": "CNNBatchNormalizationState",
          "NNForwardLoss": "NNLossGradientState"}
BASES = {"StateBatch": "tuple[State, ...]"}
# The dunders of the typed API (the rest are object's, pickling's or mpsx's persistence protocol).
DUNDERS = {"__init__", "__new__", "__enter__", "__exit__", "__array__", "__dlpack__", "__dlpack_device__",
           "__len__", "__getitem__", "__iter__", "__call__", "__copy__", "__deepcopy__"}


def fail(message):
    sys.exit(f"generate_stubs: {message}")


def by_name(table):
    """name -> type from a table of type -> names."""
    found = {}
    for type_, names in table.items():
        for name in names.split():
            if name in found:
                fail(f"{name} has two types in one table")
            found[name] = type_
    return found


TYPES, NODE_TYPES, RETURNS = by_name(TYPES), by_name(NODE_TYPES), by_name(RETURNS)

# What the stubs may import, found by the names they use.
IMPORTED = {
    "Callable": "collections.abc", "Iterable": "collections.abc", "Iterator": "collections.abc",
    "Mapping": "collections.abc", "Sequence": "collections.abc", "PathLike": "os", "TracebackType": "types",
    "Any": "typing", "Generic": "typing", "Literal": "typing", "NamedTuple": "typing", "Protocol": "typing",
    "TypeVar": "typing", "overload": "typing", "Self": "typing_extensions", "disjoint_base": "typing_extensions",
    "MPSXError": "mpsx._errors",
}
MODULE_IMPORTS = {"enum": "import enum", "np": "import numpy as np", "npt": "import numpy.typing as npt"}
# Each stub's docstring, and the aliases and protocols its types use.
MODULES = {
    "mpsx": ("Type stubs of the mpsx package: the names of mpsx._runtime, mpsx._kernels and mpsx._errors it exports.",
             ""),
    "mpsx.distributed": (
        "Type stubs of mpsx.distributed: data-parallel training, NCCL on cuda and MPI on cpu.",
        """
_Reducible = Buffer | Vector | State
""",
    ),
    "mpsx.persistence": (
        "Type stubs of mpsx.persistence: mpsx.save, mpsx.load and copies, and PyTorch weights.",
        """
_T = TypeVar("_T")
""",
    ),
    "mpsx.imported": (
        "Type stubs of mpsx.imported: PyTorch modules as NNGraphs (mpsx.from_torch).",
        "",
    ),
    "mpsx._runtime": (
        "Type stubs of mpsx._runtime: devices, command queues and buffers, memory, images and states.",
        """
_Reducible = Buffer | Vector | State
""",
    ),
    "mpsx._kernels": (
        "Type stubs of mpsx._kernels: the kernel families (MPSCNNKernel and MPSCNNGradientKernel), their data "
        "sources,\nstates and optimizers, and the graph (MPSNNGraph and its nodes).",
        """
# What the encodes over a batch take: an ImageBatch, an Image (a batch of its images) or a list of Images.
_ImageSource = ImageBatch | Image | Sequence[Image]
# A forward encode's state: the state, or its StateBatch (whose items are that state).
_StateSource = State | Sequence[State]
# The state type parameter is the family's gradient state class: what destination_state=True returns.
_S = TypeVar("_S", bound=State)
_LossData = npt.ArrayLike | Image | ImageBatch | CNNLossDataDescriptor
_NodeHandler = Callable[[NNFilterNode, NNFilterNode, NNImageNode, NNImageNode], object]

class _Handle(Protocol):
    \"\"\"An MPSHandle: anything with a label.\"\"\"

    @property
    def label(self) -> str: ...

class _LossCallback(Protocol):
    def scalar_weight_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...

class _GramMatrixCallback(Protocol):
    def alpha_for_source_image(self, source_image: Image, destination_image: Image) -> float: ...

class _TransformProvider(Protocol):
    def transform_for_source_image(
        self, image: Image, handle: _Handle | None
    ) -> ScaleTransform | tuple[float, float, float, float]: ...

class _ConvolutionDataSource(Protocol):
    \"\"\"What a convolution data source needs (CNNConvolutionDataSource lists the optional members).\"\"\"

    def descriptor(self) -> CNNConvolutionDescriptor: ...
    def weights(self) -> npt.ArrayLike: ...

class _ProcessGroup(Protocol):
    \"\"\"An mpsx.distributed.ProcessGroup: what NNGraph's data_parallel takes besides a Communicator.\"\"\"

    @property
    def communicator(self) -> Communicator: ...
""",
    ),
}


def is_disjoint_base(cls):
    """Whether instances of cls have a layout of their own (PEP 800's @disjoint_base): mypy's stubtest
    checks the stubs say so, with this rule (CPython's shape_differs in typeobject.c)."""
    base = cls.__base__
    if sys.version_info >= (3, 12) or cls.__itemsize__ or base.__itemsize__:
        return cls.__basicsize__ != base.__basicsize__ or cls.__itemsize__ != base.__itemsize__
    pointer = struct.calcsize("P")
    size = cls.__basicsize__
    if not base.__weakrefoffset__ and cls.__weakrefoffset__ + pointer == size:
        size -= pointer
    if not base.__dictoffset__ and cls.__dictoffset__ + pointer == size:
        size -= pointer
    if not base.__weakrefoffset__ and base.__weakrefoffset__ == size:
        size -= pointer
    return size != base.__basicsize__


class Module:
    """The stub of one module of the package."""

    def __init__(self, module):
        self.module = module
        self.rendered = {}  # (class, member) -> its lines, for the overrides
        self.name = module.__name__
        names = getattr(module, "__all__", None) or self.exported(module, constants=True)
        self.public = {n: getattr(module, n) for n in names}
        self.classes = []
        for obj in self.public.values():
            if isinstance(obj, type) and origin(obj, self.name) == self.name:
                self.add_class(obj)
        self.enums = {c.__name__ for c in self.classes if issubclass(c, enum.Enum)}

    def add_class(self, cls):
        """cls after its bases of this module (private ones included)."""
        if cls in self.classes:
            return
        for base in cls.__bases__:
            if base.__module__ == cls.__module__ and not issubclass(base, enum.Enum):
                self.add_class(base)
        self.classes.append(cls)

    def is_node(self, cls):
        """Whether cls is a graph node (whose arguments are nodes where a kernel's are images and states)."""
        return any(k.__name__ in ("NNFilterNode", "NNStateNode", "NNImageNode") for k in cls.__mro__)

    # The types.

    def lookup(self, cls, name, default=inspect.Parameter.empty, member=None):
        """The type of a parameter or property called name."""
        found = OVERRIDES.get(f"{cls.__name__}.{member}.{name}" if member else f"{cls.__name__}.{name}")
        if found is None and self.is_node(cls):
            found = NODE_TYPES.get(name)
        if found is None:
            found = TYPES.get(name)
        if found is None:
            where = ".".join(filter(None, [cls.__name__, member, name]))
            return fail(f"no type for {where}: add it to TYPES or OVERRIDES")
        return with_none(found, default)

    def returns(self, cls, member):
        """The type a method returns."""
        found = OVERRIDES.get(f"{cls.__name__}.{member}") or RETURNS.get(member)
        if found is None:
            return fail(f"no return type for {cls.__name__}.{member}: add it to RETURNS or OVERRIDES")
        return self.state_of(cls) if found == "_S" else found

    def state_of(self, cls):
        """The gradient state a kernel class's destination_state=True returns (_S in a generic class)."""
        if cls.__name__ in GENERIC:
            return "_S"
        for k in cls.__mro__:
            if k.__name__ in STATES:
                return STATES[k.__name__]
            if hasattr(self.module, k.__name__ + "GradientState"):
                return k.__name__ + "GradientState"
            if k.__name__ in GENERIC:
                break
        return "NNGradientState"

    # The text.

    def render(self):
        header, aliases = MODULES[self.name]
        out = []
        if hasattr(self.module, "__all__"):
            out += ["__all__ = ["] + [f'    "{n}",' for n in self.module.__all__] + ["]", ""]
        out += [aliases.strip("\n"), ""]
        for name, obj in self.public.items():
            if type(obj) in (int, float, str):
                out += [f"{name}: {type(obj).__name__}", ""]
            elif inspect.isroutine(obj) and origin(obj, self.name) == self.name:
                out += format_def("", name, render(self.parameters(None, name, inspect.signature(obj), False)),
                                  OVERRIDES.get(name) or RETURNS.get(name) or fail(f"no return type for {name}"))
        for cls in self.classes:
            out += [""] + self.class_(cls)
        out = [f'"""{header}"""', "", GENERATED, ""] + self.imports("\n".join(out)) + [""] + out
        return "\n".join(out).replace("\n\n\n", "\n\n").rstrip("\n") + "\n"

    def imports(self, body):
        """The imports of what body names and of what the module exports from another (isort's sections)."""
        code = re.sub(r'""".*?"""|"[^"\n]*"|#[^\n]*', "", body, flags=re.S)  # names, not words
        used = set(re.findall(r"\b\w+\b", code))
        found = {}  # module -> names as imported
        for name, where in IMPORTED.items():
            if name in used:
                found.setdefault(where, []).append(name)
        defined = {c.__name__ for c in self.classes} | set(self.public)
        for module in ("mpsx._runtime", "mpsx._kernels"):
            if module != self.name:
                found.setdefault(module, []).extend(
                    n for n in Module.exported(sys.modules[module]) if n in used and n not in defined)
        for name, obj in self.public.items():
            if origin(obj, self.name) != self.name:
                found.setdefault(origin(obj, self.name), []).append(f"{name} as {name}")
        def section(module):  # the standard library's, other packages', mpsx's
            top = module.split(".")[0]
            return 2 if top == "mpsx" else int(top in ("numpy", "typing_extensions"))

        sections = [[], [], []]
        for name, statement in MODULE_IMPORTS.items():
            if re.search(rf"\b{name}\.", code):
                sections[section(statement.split()[1])].append(statement)
        for module, names in sorted(found.items()):
            if names:
                sections[section(module)] += format_import(module, names)
        return [line for section in sections if section for line in section + [""]][:-1]

    @staticmethod
    def exported(module, constants=False):
        """A module's public names: its __all__, else what it defines (and its constants)."""
        return getattr(module, "__all__", None) or [
            n for n, v in vars(module).items() if not n.startswith("_") and (
                getattr(v, "__module__", None) == module.__name__ or constants and type(v) in (int, float, str))]

    def class_(self, cls):
        """An enum, a named tuple, or a class with its members."""
        if issubclass(cls, enum.Enum):
            base = next(b for b in (enum.IntFlag, enum.IntEnum, enum.Enum) if issubclass(cls, b))
            return [f"class {cls.__name__}(enum.{base.__name__}):"] + [
                f"    {n} = {int(v)}" for n, v in cls.__members__.items()]
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            lines = [f"class {cls.__name__}(NamedTuple):"]
            for f in cls._fields:
                default = cls._field_defaults.get(f, inspect.Parameter.empty)
                lines.append(f"    {f}: {self.lookup(cls, f)}" + ("" if default is inspect.Parameter.empty
                                                                     else f" = {self.literal(default)}"))
            return lines
        bases = [BASES.get(cls.__name__)] if cls.__name__ in BASES else [self.base(cls, b) for b in cls.__bases__
                                                                          if b is not object]
        if cls.__name__ in GENERIC and not any(b.__name__ in GENERIC for b in cls.__bases__):
            bases.append("Generic[_S]")
        lines = ["@disjoint_base"] if is_disjoint_base(cls) else []
        lines.append(f"class {cls.__name__}" + (f"({', '.join(bases)})" if bases else "") + ":")
        body = self.members(cls)
        if not body:
            lines[-1] += " ..."
        return lines + body

    def base(self, cls, base):
        """A base's name, with its state type where it is generic."""
        if base.__name__ in GENERIC:
            return f"{base.__name__}[{self.state_of(cls)}]"
        return base.__name__

    def members(self, cls):
        """The members cls defines (not those it inherits)."""
        lines = [f"    {name}: {self.lookup(cls, name)}" for name in INSTANCE_ATTRIBUTES.get(cls.__name__, "").split()]
        attributes = vars(cls)
        if "__init__" in attributes:
            lines += self.method(cls, "__init__", inspect.signature(cls), bound=True)
        for name, value in attributes.items():
            if name == "__init__" or name.startswith("_") and name not in DUNDERS:
                continue
            if isinstance(value, (staticmethod, classmethod)):
                decorator = [] if name == "__new__" else [f"    @{type(value).__name__}"]  # __new__ is static
                lines += decorator + self.method(cls, name, value.__func__)
            elif inspect.isroutine(value):
                if type(value).__name__ != "builtin_function_or_method":  # not an extension type's tp_new
                    lines += self.method(cls, name, value)
            elif inspect.isdatadescriptor(value):
                lines += self.override(cls, name, self.property(cls, name, value))
            elif not callable(value):
                lines.append(f"    {name}: {self.lookup(cls, name)}")
        return lines

    def method(self, cls, name, value, bound=False):
        """The def (or the @overload defs) of a method, marked where it overrides a base's differently."""
        signature = value if isinstance(value, inspect.Signature) else inspect.signature(value)
        parameters = self.parameters(cls, name, signature, bound)
        flags = [p for p in parameters if p[0] in ("destination_state", "destination_states")]
        if cls.__name__ == "NNGraph" and name in GRAPH_ENCODES:
            variants = self.graph_overloads(name, parameters)
        elif f"{cls.__name__}.{name}" in PARAMETER_OVERLOADS:
            variants = [(parameters[:1] + [(parameters[1][0], "pos_only", t, None)], r)
                        for t, r in PARAMETER_OVERLOADS[f"{cls.__name__}.{name}"]]
        elif flags and not issubclass(cls, self.module.CNNGradientKernel):
            variants = self.state_overloads(cls, name, parameters, parameters.index(flags[0]),
                                            self.returns(cls, name))
        else:
            variants = [(parameters, "None" if name == "__init__" else self.returns(cls, name))]
        lines = []
        for variant, returns in variants:
            lines += ["    @overload"] if len(variants) > 1 else []
            lines += format_def("    ", name, render(variant), returns)
        return self.override(cls, name, lines)

    def override(self, cls, name, lines):
        """lines, marked where they override a base's member with another signature (mypy checks that an
        override takes whatever its base takes; MPS's gradient kernels encode with other arguments)."""
        self.rendered[cls, name] = list(lines)
        base = next((k for k in cls.__mro__[1:] if (k, name) in self.rendered), None)
        if base is not None and self.rendered[base, name] != lines and name not in ("__init__", "__new__"):
            lines[lines[0] == "    @property"] += "  # type: ignore[override]"
        return lines

    def parameters(self, cls, member, signature, bound):
        """[(name, kind, type, default text)] of a signature, kind one of self, pos_only, normal, kw_only, var,
        var_kw."""
        found = [("self", "self", None, None)] if bound else []
        for i, p in enumerate(signature.parameters.values()):
            if i == 0 and not bound and cls is not None and p.name in ("self", "cls"):
                found.append((p.name, "self", None, None))
                continue
            kind = {p.POSITIONAL_ONLY: "pos_only", p.POSITIONAL_OR_KEYWORD: "normal", p.KEYWORD_ONLY: "kw_only",
                    p.VAR_POSITIONAL: "var", p.VAR_KEYWORD: "var_kw"}[p.kind]
            if kind in ("var", "var_kw"):
                type_ = OVERRIDES.get(f"{getattr(cls, '__name__', '')}.{member}.{p.name}", "Any")
            elif cls is None:
                type_ = OVERRIDES.get(f"{member}.{p.name}") or TYPES.get(p.name) or fail(
                    f"no type for {self.name}.{member}.{p.name}: add it to TYPES or OVERRIDES")
                type_ = with_none(type_, p.default)
            else:
                type_ = self.lookup(cls, p.name, p.default, member)
            if type_ in self.enums:
                type_ += " | int"  # an enum argument may be given as its value
            found.append((p.name, kind, type_, None if p.default is p.empty else self.literal(p.default)))
        return found

    def settable(self, cls, descriptor):
        """Whether a property has a setter."""
        if isinstance(descriptor, property):
            return descriptor.fset is not None
        # An extension type's property: a getset without a setter refuses before any code of the class runs
        # (an instance made without __init__ is safe: the standards ask it of every class).
        instance = cls.__new__(cls)
        try:
            descriptor.__set__(instance, Unset())
        except AttributeError as e:
            return "not writable" not in str(e)
        except Exception:  # noqa: BLE001 (the setter ran and refused the placeholder: it exists)
            pass
        return True

    def property(self, cls, name, descriptor):
        """A read-only property, a settable one as an attribute, or a getter and a setter of wider type."""
        getter = self.lookup(cls, name)
        get = ["    @property"] + format_def("    ", name, ["self"], getter)
        if not self.settable(cls, descriptor):
            return get
        setter = SETTERS.get(f"{cls.__name__}.{name}") or SETTERS.get(name)
        if setter is None and getter in self.enums:
            setter = f"{getter} | int"
        if setter is None or setter == getter:
            return [f"    {name}: {getter}"]
        return get + [f"    @{name}.setter"] + format_def("    ", name, ["self", f"value: {setter}"], "None")

    def literal(self, value):
        """A default as the stub writes it: the value where it is a literal, else ...."""
        if isinstance(value, enum.Enum):
            return f"{type(value).__name__}.{value.name}"
        if isinstance(value, str) and '"' not in value and "\\" not in value:
            return f'"{value}"'
        if isinstance(value, bytes) and b'"' not in value and value.isascii() and value.decode().isprintable():
            return f'b"{value.decode()}"'
        if value is None or isinstance(value, (bool, int, str, bytes)) or (
                isinstance(value, float) and len(repr(value)) < 12):
            return repr(value)
        if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
            return repr(value)
        return "..."

    def state_overloads(self, cls, name, parameters, k, result):
        """An encode whose destination_state(s)=True also returns the result state: three overloads, as False,
        as True by keyword, and as True by position."""
        flag, kind = parameters[k][:2]
        state = self.state_of(cls)
        true = f"Literal[True] | {state}" + (" | StateBatch" if flag.endswith("s") else "")
        both = f"tuple[{result}, {'StateBatch' if flag.endswith('s') else state}]"
        before, after = parameters[:k], parameters[k + 1:]
        return [
            (before + [(flag, kind, "Literal[False] | None", "False")] + after, result),
            (before + [(flag, "kw_only", true, None)] + [(p[0], "kw_only", p[2], p[3]) for p in after], both),
            ([p[:3] + (None,) for p in before] + [(flag, kind, true, None)] + after, both),
        ]

    def graph_overloads(self, name, parameters):
        """NNGraph's encodes return the intermediate images and the result states as their flags ask."""
        result, intermediates = GRAPH_ENCODES[name]
        flags = parameters[-2:]
        variants = []
        for asked in ((False, False), (True, False), (False, True), (True, True)):
            variant, extra, keyword = list(parameters[:-2]), [], False
            for (flag, kind, _, _), on, more in zip(flags, asked, (intermediates, "list[State]")):
                keyword |= on
                variant.append((flag, "kw_only" if keyword else kind, f"Literal[{on}]", None if on else "False"))
                extra += [more] if on else []
            variants.append((variant, f"tuple[{', '.join([result] + extra)}]" if extra else result))
        everything = list(parameters[:-2]) + [(f[0], f[1], "bool", "False") for f in flags]
        return variants + [(everything, f"{result} | tuple[Any, ...]")]


class Unset:
    """A value no setter takes."""


def render(parameters):
    """The parameters' text, with / after the positional-only ones and * before the keyword-only ones."""
    text, star = [], False
    for i, (name, kind, type_, default) in enumerate(parameters):
        if kind == "kw_only" and not star:
            text.append("*")
        star |= kind in ("kw_only", "var")
        prefix = {"var": "*", "var_kw": "**"}.get(kind, "")
        text.append(name if kind == "self" else f"{prefix}{name}: {type_}" + (f" = {default}" if default else ""))
        if kind == "pos_only" and (i + 1 == len(parameters) or parameters[i + 1][1] != "pos_only"):
            text.append("/")
    return text


def format_def(indent, name, parameters, result):
    """A def as the project's formatter writes it: one line, else the parameters on one line, else one a line."""
    head = f"{indent}def {name}("
    tail = f") -> {result}: ..."
    line = head + ", ".join(parameters) + tail
    if len(line) <= WIDTH:
        return [line]
    inner = indent + "    " + ", ".join(parameters)
    if len(inner) <= WIDTH:
        return [head, inner, indent + tail]
    return [head] + [f"{indent}    {p}," for p in parameters] + [indent + tail]


def with_none(type_, default):
    """A parameter whose default is None also takes None."""
    return type_ + " | None" if default is None and type_ != "Any" and "None" not in type_.split(" | ") else type_


def origin(obj, here):
    """The module obj comes from, as far as a stub of module here is concerned: here, or another module."""
    where = getattr(obj, "__module__", here)
    return where if where in sys.modules and where != "mpsx" else here


def format_import(module, names):
    """from module import names (each a name, or "a as a" for a name the stub exports)."""
    names = sorted(set(names), key=lambda n: n.split()[0])
    line = f"from {module} import {', '.join(names)}"
    return [line] if len(line) <= WIDTH else [f"from {module} import ("] + [f"    {n}," for n in names] + [")"]


def package_stub():
    """mpsx/__init__.pyi: where each of mpsx's names comes from (all of a module with __all__ as *)."""
    import mpsx
    modules, version = {}, None
    for name, obj in vars(mpsx).items():
        if inspect.ismodule(obj) and not name.startswith("_"):
            modules.setdefault("mpsx", []).append(name)
        elif name == "__version__":
            version = f"__version__: {type(obj).__name__}"
        elif not name.startswith("_"):
            where = origin(obj, "mpsx")
            if where == "mpsx":  # made in one module, named after the package (namedtuple's default)
                where = next(m for m, v in sorted(sys.modules.items())
                             if m.startswith("mpsx.") and name in getattr(v, "__all__", ()))
            modules.setdefault(where, []).append(name)
    out = [f'"""{MODULES["mpsx"][0]}"""', "", GENERATED, ""]
    for module, names in sorted(modules.items()):
        exported = getattr(sys.modules[module], "__all__", None)
        if module != "mpsx" and exported and set(exported) <= set(names):
            out.append(f"from {module} import *")
            names = [n for n in names if n not in exported]
        if names:
            out += format_import(module, [f"{n} as {n}" for n in names])
    return "\n".join(out + ["", version]) + "\n"


def generate():
    import mpsx._kernels
    import mpsx._runtime
    import mpsx.distributed
    import mpsx.imported
    import mpsx.persistence
    stubs = {ROOT / "mpsx" / "__init__.pyi": package_stub()}
    for module in (mpsx._runtime, mpsx._kernels, mpsx.distributed, mpsx.imported, mpsx.persistence):
        stubs[ROOT / "mpsx" / f"{module.__name__.split('.')[-1]}.pyi"] = Module(module).render()
    return stubs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff if the committed stubs differ")
    arguments = parser.parse_args()
    different = False
    for path, text in generate().items():
        old = path.read_text() if path.exists() else ""
        if old == text:
            continue
        different = True
        if arguments.check:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                       f"{path.relative_to(ROOT)} (committed)",
                                                       f"{path.relative_to(ROOT)} (generated)"))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if arguments.check and different:
        sys.exit("generate_stubs: the committed stubs differ from the generated ones: write them with "
                 "PYTHONPATH=build/dev/stage python tools/generate_stubs.py")


if __name__ == "__main__":
    main()

"""Valid instances of every public mpsx class, for tests/test_fuzz.py.

FACTORIES maps each public class name to one or more code snippets. A
snippet runs after fuzz.snippets.PRELUDE (which defines np, mpsx, rng, dev,
device, q, cb, command_buffer, FuzzError and fuzz_raise) and must:
- bind `obj` to a valid instance of the class (of a concrete subclass for an
  abstract one), made on `dev`, encoding only onto `cb`;
- bind valid arguments for the class's constructor and methods to variables
  named after their parameters (`source_image`, `gradient_state`, ...): the
  fuzzer passes those where it keeps an argument valid and mutates them where
  it makes one hostile. An optional parameter the snippet does not bind keeps
  its default.
Keep every size small: the fuzzer runs each snippet thousands of times. Its
size cases replace every occurrence of one int literal of a snippet by a
hostile int, so write a size that must stay consistent (a vector's length, a
channel count) as the same literal everywhere. A Python data source class (a
subclass of a public *DataSource class) in a snippet gets its members
replaced by hostile ones in the fuzzer's data source cases.
"""

IMAGES = """
source_image = mpsx.Image.from_numpy(dev, rng.standard_normal((1, 2, 6, 6)).astype(np.float32))
source_images = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
"""

CONVOLUTION_SOURCE = """
class ConvolutionSource(mpsx.CNNConvolutionDataSource):
    data_type = mpsx.DataType.FLOAT32
    kernel_weights_data_type = mpsx.DataType.FLOAT32
    weights_quantization_type = "none"

    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)

    def weights(self):
        return np.full((4, 3, 3, 2), 0.1, np.float32)

    def bias_terms(self):
        return np.zeros(4, np.float32)

    def load(self):
        return True

    def purge(self):
        pass

    def label(self):
        return "convolution"

    def update_with_gradient_state(self, gradient_state, source_state):
        return False

data_source = ConvolutionSource()
"""

# A source whose weights update on the command buffer (MPS's GPU training style).
CONVOLUTION_DEVICE_SOURCE = """
class DeviceUpdatedSource(mpsx.CNNConvolutionDataSource):
    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)

    def weights(self):
        return np.full((4, 3, 3, 2), 0.1, np.float32)

    def bias_terms(self):
        return np.zeros(4, np.float32)

    def update_with_command_buffer(self, command_buffer, gradient_state, source_state):
        return source_state

data_source = DeviceUpdatedSource()
"""

# uint8 weights through a lookup table.
CONVOLUTION_QUANTIZED_SOURCE = """
class QuantizedSource(mpsx.CNNConvolutionDataSource):
    data_type = mpsx.DataType.UINT8
    weights_quantization_type = "lookup_table"

    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)

    def weights(self):
        return np.full((4, 3, 3, 2), 7, np.uint8)

    def lookup_table_for_uint8_kernel(self):
        return np.linspace(-1, 1, 256).astype(np.float32)

data_source = QuantizedSource()
"""

FULLY_CONNECTED_SOURCE = """
data_source = mpsx.ConvolutionWeights(
    mpsx.CNNConvolutionDescriptor(6, 6, 2, 3), np.full((3, 6, 6, 2), 0.01, np.float32), np.zeros(3, np.float32),
    optimizer=mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate=0.1))
"""

NORMALIZATION_SOURCE = """
class NormalizationSource(mpsx.CNNBatchNormalizationDataSource):
    epsilon = 1e-5

    def number_of_feature_channels(self):
        return 2

    def gamma(self):
        return np.ones(2, np.float32)

    def beta(self):
        return np.zeros(2, np.float32)

    def mean(self):
        return np.zeros(2, np.float32)

    def variance(self):
        return np.ones(2, np.float32)

    def label(self):
        return "normalization"

    def update_gamma_and_beta_with_batch_normalization_state(self, batch_normalization_state):
        return False

    def update_mean_and_variance_with_batch_normalization_state(self, batch_normalization_state):
        return False

data_source = NormalizationSource()
"""

# Batch normalization encodes one batch, given as one Image of two images, so
# that encode and encode_batch may both use the one state.
NORMALIZATION_BATCH = """
source_image = mpsx.Image.from_numpy(dev, rng.standard_normal((2, 2, 6, 6)).astype(np.float32))
source_images = source_image
fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
"""

NORMALIZATION_STATE = """
normalization = mpsx.CNNBatchNormalization(dev, data_source)
batch_normalization_state = normalization.result_state(source_image)
mpsx.CNNBatchNormalizationStatistics(dev).encode_batch(cb, source_image, batch_normalization_state)
"""

NORMALIZATION_GRADIENT = NORMALIZATION_SOURCE + NORMALIZATION_BATCH + NORMALIZATION_STATE + """
normalized = normalization.encode(cb, source_image, batch_normalization_state)
source_gradient = mpsx.Image.from_numpy(dev, rng.standard_normal(normalized.shape).astype(np.float32))
source_gradients = source_gradient
source_states = batch_normalization_state
"""


def forward(make, setup=""):
    """A forward kernel `make` with valid sources and destinations."""
    return setup + IMAGES + f"""
obj = {make}
destination_image = obj.encode(cb, source_image)
destination_images = obj.encode_batch(cb, source_images)
destination_state = True
destination_states = True
"""


def gradient(make_forward, make_gradient, setup=""):
    """The gradient kernel `make_gradient` of the forward kernel `make_forward`,
    with the states and gradients of one forward encode of each form."""
    return setup + IMAGES + f"""
forward = {make_forward}
result, gradient_state = forward.encode(cb, source_image, destination_state=True)
results, gradient_states = forward.encode_batch(cb, source_images, destination_states=True)
source_gradient = mpsx.Image.from_numpy(dev, rng.standard_normal(result.shape).astype(np.float32))
source_gradients = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal(results.shape).astype(np.float32))
source_states = gradient_states
destination_gradient = mpsx.Image.from_numpy(dev, np.zeros(source_image.shape, np.float32))
obj = {make_gradient}
"""


def state_of(make_forward, setup=""):
    """The gradient state one forward encode of `make_forward` returns."""
    return setup + IMAGES + f"""
forward = {make_forward}
result, obj = forward.encode(cb, source_image, destination_state=True)
"""


POOLING = """
kernel_width = 2
kernel_height = 2
stride_in_pixels_x = 2
stride_in_pixels_y = 2
"""

DILATED_POOLING = """
kernel_width = 2
kernel_height = 2
dilation_rate_x = 2
dilation_rate_y = 2
stride_in_pixels_x = 1
stride_in_pixels_y = 1
"""


def pooling(name):
    return forward(f"mpsx.{name}(dev, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)", POOLING)


def pooling_gradient(name):
    arguments = "(dev, kernel_width, kernel_height, stride_in_pixels_x, stride_in_pixels_y)"
    return gradient(f"mpsx.{name}{arguments}", f"mpsx.{name}Gradient{arguments}", POOLING)


DILATED_ARGUMENTS = ("(dev, kernel_width, kernel_height, dilation_rate_x, dilation_rate_y, stride_in_pixels_x, "
                     "stride_in_pixels_y)")

LOCAL_CONTRAST_NORMALIZATION = """
kernel_width = 3
kernel_height = 3
"""
LCN_ARGUMENTS = "(dev, kernel_width, kernel_height)"

NEURON = """
neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
"""

DROPOUT = """
keep_probability = 0.5
seed = 7
mask_stride_in_pixels = (1, 1, 1)
"""

UPSAMPLING = """
integer_scale_factor_x = 2
integer_scale_factor_y = 3
align_corners = True
"""

GRAM_MATRIX = """
alpha = 0.5
"""

CONVOLUTION = "mpsx.CNNConvolution(dev, data_source)"

SUB_PIXEL_SOURCE = """
data_source = mpsx.ConvolutionWeights(
    mpsx.CNNSubPixelConvolutionDescriptor(
        3, 3, 2, 16, fused_neuron_descriptor=mpsx.NNNeuronDescriptor(
            mpsx.NeuronType.PRELU, data=np.linspace(-1, 1, 16, dtype=np.float32)), sub_pixel_scale_factor=2),
    np.full((16, 3, 3, 2), 0.1, np.float32), np.zeros(16, np.float32))
"""

CONVOLUTION_EXTRAS = """
result, gradient_state = obj.encode(cb, source_image, destination_state=True)
mpsx.CNNConvolutionGradient(dev, data_source).encode(
    cb, mpsx.Image.from_numpy(dev, np.ones(result.shape, np.float32)), source_image, gradient_state)
state = obj.export_weights_and_biases(cb)
result_state_can_be_temporary = False
"""

TRANSPOSE_EXTRAS = """
result, gradient_state = obj.encode(cb, source_image, destination_state=True)
mpsx.CNNConvolutionTransposeGradient(dev, data_source).encode(
    cb, mpsx.Image.from_numpy(dev, np.ones(result.shape, np.float32)), source_image, gradient_state)
state = obj.export_weights_and_biases(cb)
"""

# The forward kernel's weights, for a gradient kernel's reload_weights_and_biases.
EXPORTED = """
state = forward.export_weights_and_biases(cb)
"""


def optimizer(make, vector_arguments, list_arguments):
    """The optimizer `make` with valid arguments for each form of its encode:
    vectors, a convolution's states and a batch normalization's state."""
    vectors = "".join(f"{name} = mpsx.Vector(dev, 4)\n" for name in vector_arguments)
    convolution_lists = "".join(f"{name} = [mpsx.Vector(dev, 72), mpsx.Vector(dev, 4)]\n" for name in list_arguments)
    normalization_lists = "".join(f"{name} = [mpsx.Vector(dev, 2), mpsx.Vector(dev, 2)]\n" for name in list_arguments)
    settings = f"""
learning_rate = 0.1
optimizer_descriptor = mpsx.NNOptimizerDescriptor(learning_rate=0.1)
obj = {make}
"""
    return [
        # mpsx.Vector(dev, 4) everywhere (zeros): one size the fuzzer's size cases change together
        settings + f"""
input_gradient_vector = mpsx.Vector(dev, 4)
input_values_vector = mpsx.Vector(dev, 4)
result_values_vector = input_values_vector
{vectors}""",
        settings + IMAGES + """
convolution = mpsx.CNNConvolution(dev, mpsx.ConvolutionWeights(
    mpsx.CNNConvolutionDescriptor(3, 3, 2, 4), np.full((4, 3, 3, 2), 0.1, np.float32), np.zeros(4, np.float32)))
result, convolution_gradient_state = convolution.encode(cb, source_image, destination_state=True)
mpsx.CNNConvolutionGradient(dev, convolution.data_source).encode(
    cb, mpsx.Image.from_numpy(dev, np.ones(result.shape, np.float32)), source_image, convolution_gradient_state)
convolution_source_state = convolution.export_weights_and_biases(cb)
result_state = convolution_source_state
""" + convolution_lists,
        settings + NORMALIZATION_GRADIENT + """
mpsx.CNNBatchNormalizationStatisticsGradient(dev).encode_batch(
    cb, source_gradient, source_image, batch_normalization_state)
result_state = mpsx.CNNNormalizationGammaAndBetaState(dev, np.ones(2, np.float32), np.zeros(2, np.float32))
""" + normalization_lists,
    ]


# The softmax gradients read the forward result where other gradients read the forward source.
SOFTMAX_RESULTS = """
source_image = result
source_images = results
"""

CROSS_CHANNEL = """
kernel_size = 3
"""

SPATIAL = """
kernel_width = 3
kernel_height = 3
"""

NEURON_GRADIENT = gradient("mpsx.CNNNeuron(dev, neuron_descriptor)", "mpsx.CNNNeuronGradient(dev, neuron_descriptor)",
                           NEURON)
SGD = optimizer("mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate, momentum_scale=0.9, "
                "optimizer_descriptor=optimizer_descriptor)",
                ["input_momentum_vector"], ["input_momentum_vectors"])

FACTORIES = {
    # runtime
    "Device": ["""
obj = dev
name = dev.name
value = dev
"""],
    "CommandQueue": ["""
obj = q
replayable = False
"""],
    "CommandBuffer": ["""
obj = cb
handler = lambda command_buffer: None
exc_type = exc = tb = None
command_buffer = q.command_buffer()
command_queue = q
size = 1024
""", """
obj = mpsx.CommandBuffer.command_buffer_with_command_buffer(cb)
mpsx.CNNNeuron(dev, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
    obj, mpsx.Image.from_numpy(dev, np.ones((1, 2, 3, 3), np.float32)))
obj.commit_and_continue()
obj.predicate = mpsx.Predicate(device=dev)
""", """
obj = q.command_buffer(replayable=True)
mpsx.CNNNeuron(dev, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode(
    obj, mpsx.Image.from_numpy(dev, np.ones((1, 2, 3, 3), np.float32)))
obj.commit()
obj.wait_until_completed()
"""],
    "ImageAllocator": ["""
obj = mpsx.Image.default_allocator()
command_buffer = cb
image_descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 4, 3, 2, 1)
kernel = mpsx.CNNNeuron(dev, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
count = 2
""", """
obj = mpsx.TemporaryImage.default_allocator()
command_buffer = cb
image_descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 4, 3, 2, 1)
kernel = mpsx.CNNAdd(dev)
count = 3
""", """
class KeepingAllocator(mpsx.ImageAllocator):
    def image_for_command_buffer(self, command_buffer, image_descriptor, kernel):
        return mpsx.Image(command_buffer.device, image_descriptor)

obj = KeepingAllocator()
kernel = mpsx.CNNNeuron(dev, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
kernel.destination_image_allocator = obj
command_buffer = cb
image_descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 4, 3, 2, 1)
count = 2
"""],
    "VectorDescriptor": ["""
length = 3
data_type = mpsx.DataType.FLOAT32
vectors = 2
vector_bytes = 16
obj = mpsx.VectorDescriptor(length, data_type, vectors, vector_bytes)
value = 4
"""],
    "Predicate": ["""
buffer = mpsx.Vector(dev, 4).buffer
offset = 8
obj = mpsx.Predicate(buffer, offset)
""", """
obj = mpsx.Predicate(device=dev)
"""],
    "Buffer": ["""
obj = mpsx.Vector.from_numpy(dev, np.arange(4, dtype=np.float32)).buffer
dtype = np.float32
tensor = np.arange(4, dtype=np.float32) if dev.backend != "cuda" else obj
max_version = (1, 0)
dl_device = obj.__dlpack_device__()
""", state_of(CONVOLUTION, CONVOLUTION_SOURCE) + """
obj = obj.gradient_for_weights  # written by the command buffer: not readable before completion
"""],
    "Vector": ["""
length = 4
data_type = mpsx.DataType.FLOAT32
obj = mpsx.Vector(dev, length, data_type)
array = np.arange(4, dtype=np.float32)
"""],
    "TemporaryVector": ["""
command_buffer = cb
descriptor = mpsx.VectorDescriptor(4)
descriptor_list = [descriptor]
obj = mpsx.TemporaryVector(cb, descriptor)
array = np.arange(4, dtype=np.float32)
value = 2
"""],
    "ImageDescriptor": ["""
channel_format = mpsx.DataType.FLOAT32
width = 6
height = 5
feature_channels = 2
number_of_images = 1
obj = mpsx.ImageDescriptor(channel_format, width, height, feature_channels, number_of_images)
value = mpsx.ImageDescriptor(channel_format, width, height, feature_channels, number_of_images)
"""],
    "Image": ["""
descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 6, 5, 2, 1)
obj = mpsx.Image(dev, descriptor)
array = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
tensor = array if dev.backend != "cuda" else obj
max_version = (1, 0)
dl_device = obj.__dlpack_device__()
label = "x"
state = mpsx.PurgeableState.KEEP_CURRENT
sub_range = (0, 1)
parent = obj
slice_range = (0, 1)
feature_channels = 2
range = (0, 4)
data_bytes = np.zeros(180, np.float32)
data_layout = mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
bytes_per_row = 48
region = ((0, 0, 0), (6, 5, 1))
feature_channel_info = (0, 2)
image_index = 0
bytes_per_image = 240
bytes_per_column = 8
""", """
descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 3, 3, 4, 2)
array = rng.standard_normal((2, 4, 3, 3)).astype(np.float16)
obj = mpsx.Image.from_numpy(dev, array)
tensor = array.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2) if dev.backend != "cuda" else obj  # NHWC: shared
"""],
    "TemporaryImage": ["""
command_buffer = cb
image_descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 6, 5, 2, 1)
image_descriptor_list = [image_descriptor]
obj = mpsx.TemporaryImage(cb, image_descriptor)
label = "x"
state = mpsx.PurgeableState.VOLATILE
sub_range = (0, 1)
parent = obj
slice_range = (0, 1)
feature_channels = 2
range = (0, 4)
"""],
    "NNPadding": ["""
class Policy(mpsx.NNPadding):
    def padding_method(self):
        return mpsx.NNPaddingMethod.CUSTOM | mpsx.NNPaddingMethod.SIZE_VALID_ONLY

    def destination_image_descriptor_for_source_images(self, source_images, source_states, for_kernel,
                                                       suggested_descriptor):
        for_kernel.offset = (1, 1, 0)
        return suggested_descriptor

obj = Policy()
for_kernel = mpsx.CNNPoolingMax(dev, 2, 2)
for_kernel.padding = obj
source_images = [mpsx.Image.from_numpy(dev, rng.standard_normal((1, 2, 6, 6)).astype(np.float32))]
source_states = []
suggested_descriptor = for_kernel.destination_image_descriptor(source_images)
"""],
    "NNDefaultPadding": ["""
method = mpsx.NNPaddingMethod.SIZE_VALID_ONLY | mpsx.NNPaddingMethod.ALIGN_TOP_LEFT
obj = mpsx.NNDefaultPadding.padding_with_method(method)
for_kernel = mpsx.CNNPoolingAverage(dev, 2, 2)
for_kernel.padding = obj
source_images = [mpsx.Image.from_numpy(dev, rng.standard_normal((1, 2, 6, 6)).astype(np.float32))]
source_states = []
suggested_descriptor = for_kernel.destination_image_descriptor(source_images)
""", """
obj = mpsx.NNDefaultPadding.padding_for_tensorflow_average_pooling()
for_kernel = mpsx.CNNPoolingAverage(dev, 2, 2)
for_kernel.padding = obj
source_images = [mpsx.Image.from_numpy(dev, rng.standard_normal((1, 2, 5, 5)).astype(np.float32))]
source_states = []
suggested_descriptor = for_kernel.destination_image_descriptor(source_images)
"""],
    "ImageBatch": ["""
descriptor = mpsx.ImageDescriptor(mpsx.DataType.FLOAT32, 6, 5, 2, 3)
obj = mpsx.ImageBatch(dev, descriptor)
array = rng.standard_normal((3, 2, 5, 6)).astype(np.float32)
key = 1
tensor = array if dev.backend != "cuda" else obj
max_version = (1, 0)
label = "x"
state = mpsx.PurgeableState.KEEP_CURRENT
sub_range = (1, 2)
parent = obj
slice_range = (0, 1)
feature_channels = 2
data_bytes = np.zeros(180, np.float32)
data_layout = mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS
bytes_per_row = 48
region = ((0, 0, 0), (6, 5, 1))
feature_channel_info = (0, 2)
image_index = 0
bytes_per_image = 240
bytes_per_column = 8
"""],
    "State": [state_of("mpsx.CNNNeuron(dev, neuron_descriptor)", NEURON), """
device = dev
buffer_size = 16
resource_list = mpsx.StateResourceList.resource_list_with_buffer_sizes(8, 4)
obj = mpsx.State(device, resource_list=resource_list)
command_buffer = cb
index = 1
allocate_memory = True
"""],
    "StateResourceList": ["""
obj = mpsx.StateResourceList.resource_list_with_buffer_sizes(8, 16)
size = 4
sizes = (4, 8)
"""],
    "NNGradientState": [state_of("mpsx.CNNNeuron(dev, neuron_descriptor)", NEURON)],
    "StateBatch": [state_of("mpsx.CNNNeuron(dev, neuron_descriptor)", NEURON) + """
state = obj
count = 2
obj = mpsx.StateBatch(state, count)
"""],
    "Offset": ["""
x, y, z = 1, 2, 0
obj = mpsx.Offset(x, y, z)
"""],
    "Region": ["""
x, y, z, width, height, depth = 0, 0, 0, 3, 3, 1
obj = mpsx.Region(x, y, z, width, height, depth)
"""],
    # neuron
    "NNNeuronDescriptor": ["""
neuron_type = mpsx.NeuronType.LINEAR
a, b, c = 2.0, 1.0, 0.0
obj = mpsx.NNNeuronDescriptor(neuron_type, a, b, c)
value = mpsx.NNNeuronDescriptor(neuron_type, a, b, c)
""", """
neuron_type = mpsx.NeuronType.PRELU
data = np.array([0.1, 0.2], np.float32)
obj = mpsx.NNNeuronDescriptor(neuron_type, data=data)
"""],
    "CNNNeuron": [forward("mpsx.CNNNeuron(dev, neuron_descriptor)", NEURON)],
    "CNNNeuronGradient": [NEURON_GRADIENT],
    # The per-type neurons, over the two channels of IMAGES' images.
    **{f"CNNNeuron{name}": [forward(f"mpsx.CNNNeuron{name}(dev{''.join(', ' + p for p in parameters)})",
                                    "\na, b, c = 0.5, 2.0, 1.5\n")]
       for name, parameters in [("Absolute", ""), ("ELU", "a"), ("Exponential", "abc"), ("HardSigmoid", "ab"),
                                ("Linear", "ab"), ("Logarithm", "abc"), ("Power", "abc"), ("ReLU", "a"),
                                ("ReLUN", "ab"), ("Sigmoid", ""), ("SoftPlus", "ab"), ("SoftSign", ""),
                                ("TanH", "ab")]},
    "CNNNeuronPReLU": [forward("mpsx.CNNNeuronPReLU(dev, a, count)",
                               "\na = np.array([0.1, 0.2], np.float32)\ncount = 2\n")],
    # pooling
    "CNNPoolingMax": [pooling("CNNPoolingMax")],
    "CNNPoolingAverage": [pooling("CNNPoolingAverage")],
    "CNNPoolingL2Norm": [pooling("CNNPoolingL2Norm")],
    "CNNDilatedPoolingMax": [forward("mpsx.CNNDilatedPoolingMax" + DILATED_ARGUMENTS, DILATED_POOLING)],
    "CNNPoolingMaxGradient": [pooling_gradient("CNNPoolingMax")],
    "CNNPoolingAverageGradient": [pooling_gradient("CNNPoolingAverage")],
    "CNNPoolingL2NormGradient": [pooling_gradient("CNNPoolingL2Norm")],
    "CNNDilatedPoolingMaxGradient": [gradient("mpsx.CNNDilatedPoolingMax" + DILATED_ARGUMENTS,
                                              "mpsx.CNNDilatedPoolingMaxGradient" + DILATED_ARGUMENTS,
                                              DILATED_POOLING)],
    # local contrast normalization
    "CNNLocalContrastNormalization": [forward("mpsx.CNNLocalContrastNormalization" + LCN_ARGUMENTS,
                                              LOCAL_CONTRAST_NORMALIZATION)],
    "CNNLocalContrastNormalizationGradient": [gradient("mpsx.CNNLocalContrastNormalization" + LCN_ARGUMENTS,
                                                       "mpsx.CNNLocalContrastNormalizationGradient" + LCN_ARGUMENTS,
                                                       LOCAL_CONTRAST_NORMALIZATION)],
    # softmax
    "CNNSoftMax": [forward("mpsx.CNNSoftMax(dev)")],
    "CNNLogSoftMax": [forward("mpsx.CNNLogSoftMax(dev)")],
    "CNNSoftMaxGradient": [gradient("mpsx.CNNSoftMax(dev)", "mpsx.CNNSoftMaxGradient(dev)") + SOFTMAX_RESULTS],
    "CNNLogSoftMaxGradient": [gradient("mpsx.CNNLogSoftMax(dev)", "mpsx.CNNLogSoftMaxGradient(dev)") +
                              SOFTMAX_RESULTS],
    # cross-channel normalization
    "CNNCrossChannelNormalization": [forward("mpsx.CNNCrossChannelNormalization(dev, kernel_size)", CROSS_CHANNEL)],
    "CNNCrossChannelNormalizationGradient": [gradient("mpsx.CNNCrossChannelNormalization(dev, kernel_size)",
                                                      "mpsx.CNNCrossChannelNormalizationGradient(dev, kernel_size)",
                                                      CROSS_CHANNEL)],
    # spatial normalization
    "CNNSpatialNormalization": [forward("mpsx.CNNSpatialNormalization(dev, kernel_width, kernel_height)", SPATIAL)],
    "CNNSpatialNormalizationGradient": [gradient("mpsx.CNNSpatialNormalization(dev, kernel_width, kernel_height)",
                                                 "mpsx.CNNSpatialNormalizationGradient(dev, kernel_width, kernel_height)",
                                                 SPATIAL)],
    # convolution
    "CNNConvolutionDescriptor": ["""
kernel_width, kernel_height, input_feature_channels, output_feature_channels = 3, 3, 4, 6
stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x, dilation_rate_y, groups = 2, 1, 1, 2, 2
fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
obj = mpsx.CNNConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels, output_feature_channels,
                                    stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x, dilation_rate_y, groups,
                                    fused_neuron_descriptor)
value = mpsx.CNNConvolutionDescriptor(3, 3, 4, 6)
"""],
    "CNNDepthWiseConvolutionDescriptor": ["""
kernel_width, kernel_height, input_feature_channels, output_feature_channels = 3, 3, 4, 8
stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x, dilation_rate_y = 2, 1, 1, 2
fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
obj = mpsx.CNNDepthWiseConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels,
                                             output_feature_channels, stride_in_pixels_x, stride_in_pixels_y,
                                             dilation_rate_x, dilation_rate_y, fused_neuron_descriptor)
value = mpsx.CNNDepthWiseConvolutionDescriptor(3, 3, 4, 4)
"""],
    "CNNSubPixelConvolutionDescriptor": ["""
kernel_width, kernel_height, input_feature_channels, output_feature_channels = 3, 3, 4, 16
stride_in_pixels_x, stride_in_pixels_y, dilation_rate_x, dilation_rate_y, groups = 1, 2, 2, 1, 2
fused_neuron_descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
sub_pixel_scale_factor = 2
obj = mpsx.CNNSubPixelConvolutionDescriptor(kernel_width, kernel_height, input_feature_channels,
                                            output_feature_channels, stride_in_pixels_x, stride_in_pixels_y,
                                            dilation_rate_x, dilation_rate_y, groups, fused_neuron_descriptor,
                                            sub_pixel_scale_factor)
value = mpsx.CNNSubPixelConvolutionDescriptor(3, 3, 4, 4, sub_pixel_scale_factor=2)
"""],
    "CNNConvolutionDataSource": [CONVOLUTION_SOURCE + """
obj = data_source
"""],
    "ConvolutionWeights": ["""
descriptor = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
weights = np.full((4, 3, 3, 2), 0.1, np.float32)
biases = np.zeros(4, np.float32)
optimizer = mpsx.NNOptimizerAdam(dev, learning_rate=0.01)
label = "weights"
obj = mpsx.ConvolutionWeights(descriptor, weights, biases, optimizer, label)
"""],
    "CNNConvolutionWeightsAndBiasesState": ["""
weights = np.full(72, 0.1, np.float32)
biases = np.zeros(4, np.float32)
obj = mpsx.CNNConvolutionWeightsAndBiasesState(dev, weights, biases)
"""],
    "CNNConvolutionGradientState": [state_of(CONVOLUTION, CONVOLUTION_SOURCE)],
    "ImageSizeEncodingState": [state_of(CONVOLUTION, CONVOLUTION_SOURCE)],
    "CNNConvolution": [forward(CONVOLUTION, CONVOLUTION_SOURCE) + CONVOLUTION_EXTRAS,
                       forward(CONVOLUTION, CONVOLUTION_DEVICE_SOURCE) + CONVOLUTION_EXTRAS,
                       forward(CONVOLUTION, CONVOLUTION_QUANTIZED_SOURCE),
                       forward(CONVOLUTION, SUB_PIXEL_SOURCE)],
    "CNNConvolutionGradient": [gradient(CONVOLUTION, "mpsx.CNNConvolutionGradient(dev, data_source)",
                                        CONVOLUTION_SOURCE) + EXPORTED],
    "CNNFullyConnected": [forward("mpsx.CNNFullyConnected(dev, data_source)", FULLY_CONNECTED_SOURCE) + """
result, gradient_state = obj.encode(cb, source_image, destination_state=True)
mpsx.CNNFullyConnectedGradient(dev, data_source).encode(
    cb, mpsx.Image.from_numpy(dev, np.ones(result.shape, np.float32)), source_image, gradient_state)
state = obj.export_weights_and_biases(cb)
"""],
    "CNNFullyConnectedGradient": [gradient("mpsx.CNNFullyConnected(dev, data_source)",
                                           "mpsx.CNNFullyConnectedGradient(dev, data_source)",
                                           FULLY_CONNECTED_SOURCE) + EXPORTED],
    "CNNConvolutionTranspose": [forward("mpsx.CNNConvolutionTranspose(dev, data_source)", CONVOLUTION_SOURCE)
                                + TRANSPOSE_EXTRAS],
    "CNNConvolutionTransposeGradient": [gradient("mpsx.CNNConvolutionTranspose(dev, data_source)",
                                                 "mpsx.CNNConvolutionTransposeGradient(dev, data_source)",
                                                 CONVOLUTION_SOURCE) + EXPORTED],
    "CNNConvolutionTransposeGradientState": [state_of("mpsx.CNNConvolutionTranspose(dev, data_source)",
                                                      CONVOLUTION_SOURCE)],
    # batch normalization
    "CNNBatchNormalizationDataSource": [NORMALIZATION_SOURCE + """
obj = data_source
"""],
    "BatchNormalizationWeights": [NORMALIZATION_BATCH + """
gamma = np.ones(2, np.float32)
beta = np.zeros(2, np.float32)
mean = np.zeros(2, np.float32)
variance = np.ones(2, np.float32)
epsilon = 1e-5
momentum = 0.1
optimizer = mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate=0.1)
label = "normalization"
obj = mpsx.BatchNormalizationWeights(gamma, beta, mean, variance, epsilon, momentum, optimizer, label)
data_source = obj
""" + NORMALIZATION_STATE],
    "CNNNormalizationGammaAndBetaState": ["""
gamma = np.ones(2, np.float32)
beta = np.zeros(2, np.float32)
obj = mpsx.CNNNormalizationGammaAndBetaState(dev, gamma, beta)
number_of_feature_channels = 2
"""],
    "CNNNormalizationMeanAndVarianceState": ["""
mean = np.zeros(2, np.float32)
variance = np.ones(2, np.float32)
obj = mpsx.CNNNormalizationMeanAndVarianceState(dev, mean, variance)
number_of_feature_channels = 2
"""],
    "CNNBatchNormalizationState": [NORMALIZATION_SOURCE + NORMALIZATION_BATCH + NORMALIZATION_STATE + """
obj = batch_normalization_state
"""],
    "CNNBatchNormalization": [NORMALIZATION_SOURCE + NORMALIZATION_BATCH + NORMALIZATION_STATE + """
obj = normalization
destination_image = mpsx.Image.from_numpy(dev, np.zeros((2, 2, 6, 6), np.float32))
gamma_and_beta_state = mpsx.CNNNormalizationGammaAndBetaState(dev, np.ones(2, np.float32), np.zeros(2, np.float32))
mean_and_variance_state = mpsx.CNNNormalizationMeanAndVarianceState(dev, np.zeros(2, np.float32),
                                                                    np.ones(2, np.float32))
"""],
    "CNNBatchNormalizationStatistics": [NORMALIZATION_SOURCE + NORMALIZATION_BATCH + """
normalization = mpsx.CNNBatchNormalization(dev, data_source)
batch_normalization_state = normalization.result_state(source_image)
obj = mpsx.CNNBatchNormalizationStatistics(dev)
"""],
    "CNNBatchNormalizationStatisticsGradient": [NORMALIZATION_GRADIENT + """
obj = mpsx.CNNBatchNormalizationStatisticsGradient(dev, fused_neuron_descriptor)
"""],
    "CNNBatchNormalizationGradient": [NORMALIZATION_GRADIENT + """
mpsx.CNNBatchNormalizationStatisticsGradient(dev).encode_batch(
    cb, source_gradient, source_image, batch_normalization_state)
obj = mpsx.CNNBatchNormalizationGradient(dev, fused_neuron_descriptor)
destination_gradient = mpsx.Image.from_numpy(dev, np.zeros((2, 2, 6, 6), np.float32))
"""],
    # loss
    "CNNLossDescriptor": ["""
loss_type = mpsx.CNNLossType.HUBER
reduction_type = mpsx.CNNReductionType.SUM
weight, label_smoothing, number_of_classes, epsilon, delta, reduce_across_batch = 0.5, 0.1, 3, 1e-7, 1.0, True
obj = mpsx.CNNLossDescriptor(loss_type, reduction_type, weight=weight, label_smoothing=label_smoothing,
                             number_of_classes=number_of_classes, epsilon=epsilon, delta=delta,
                             reduce_across_batch=reduce_across_batch)
value = mpsx.CNNLossDescriptor(loss_type, reduction_type)
"""],
    "CNNLossLabels": ["""
labels = np.eye(3, dtype=np.float32)[[0, 2]].reshape(2, 3, 1, 1)
weights = np.ones((2, 3, 1, 1), np.float32)
obj = mpsx.CNNLossLabels(dev, labels, weights)
""", """
labels_descriptor = mpsx.CNNLossDataDescriptor(np.eye(4, dtype=np.float32)[1],
                                               mpsx.DataLayout.HEIGHT_X_WIDTH_X_FEATURE_CHANNELS, (1, 1, 4))
loss_image_size = (1, 1, 1)
obj = mpsx.CNNLossLabels(dev, loss_image_size=loss_image_size, labels_descriptor=labels_descriptor)
"""],
    "CNNLossDataDescriptor": ["""
data = rng.standard_normal(24).astype(np.float32)
layout = mpsx.DataLayout.FEATURE_CHANNELS_X_HEIGHT_X_WIDTH
size = (2, 3, 4)
obj = mpsx.CNNLossDataDescriptor(data, layout, size)
value = 12
"""],
    "CNNLoss": ["""
loss_descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
obj = mpsx.CNNLoss(dev, loss_descriptor)
source_image = mpsx.Image.from_numpy(dev, rng.standard_normal((2, 3, 1, 1)).astype(np.float32))
source_images = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 3, 1, 1)).astype(np.float32))
labels = mpsx.CNNLossLabels(dev, np.eye(3, dtype=np.float32)[[0, 2]].reshape(2, 3, 1, 1))
destination_image = mpsx.Image.from_numpy(dev, np.zeros((2, 3, 1, 1), np.float32))
"""],
    # optimizers
    "NNOptimizerDescriptor": ["""
learning_rate, gradient_rescale, apply_gradient_clipping = 0.1, 0.5, True
gradient_clip_max, gradient_clip_min = 1.0, -1.0
regularization_type = mpsx.NNRegularizationType.L2
regularization_scale = 0.01
obj = mpsx.NNOptimizerDescriptor(learning_rate, gradient_rescale, apply_gradient_clipping, gradient_clip_max,
                                 gradient_clip_min, regularization_type, regularization_scale)
value = mpsx.NNOptimizerDescriptor()
"""],
    "NNOptimizerStochasticGradientDescent": SGD,
    "NNOptimizerAdam": optimizer(
        "mpsx.NNOptimizerAdam(dev, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-8, time_step=3, "
        "optimizer_descriptor=optimizer_descriptor)",
        ["input_momentum_vector", "input_velocity_vector", "maximum_velocity_vector"],
        ["input_momentum_vectors", "input_velocity_vectors", "maximum_velocity_vectors"]),
    "NNOptimizerRMSProp": optimizer(
        "mpsx.NNOptimizerRMSProp(dev, learning_rate, decay=0.9, epsilon=1e-8, "
        "optimizer_descriptor=optimizer_descriptor)",
        ["input_sum_of_squares_vector"], ["input_sum_of_squares_vectors"]),
    # dropout
    "CNNDropout": [forward("mpsx.CNNDropout(dev, keep_probability, seed, mask_stride_in_pixels)", DROPOUT)],
    "CNNDropoutGradient": [gradient("mpsx.CNNDropout(dev, keep_probability, seed, mask_stride_in_pixels)",
                                    "mpsx.CNNDropoutGradient(dev, keep_probability, seed, mask_stride_in_pixels)",
                                    DROPOUT)],
    "CNNDropoutGradientState": [state_of("mpsx.CNNDropout(dev, keep_probability, seed, mask_stride_in_pixels)",
                                         DROPOUT)],
    # upsampling
    "CNNUpsamplingNearest": [forward("mpsx.CNNUpsamplingNearest(dev, integer_scale_factor_x, integer_scale_factor_y)",
                                     UPSAMPLING)],
    "CNNUpsamplingBilinear": [forward("mpsx.CNNUpsamplingBilinear(dev, integer_scale_factor_x, integer_scale_factor_y, "
                                      "align_corners)", UPSAMPLING)],
    "CNNUpsamplingNearestGradient": [gradient(
        "mpsx.CNNUpsamplingNearest(dev, integer_scale_factor_x, integer_scale_factor_y)",
        "mpsx.CNNUpsamplingNearestGradient(dev, integer_scale_factor_x, integer_scale_factor_y)", UPSAMPLING)],
    "CNNUpsamplingBilinearGradient": [gradient(
        "mpsx.CNNUpsamplingBilinear(dev, integer_scale_factor_x, integer_scale_factor_y, align_corners)",
        "mpsx.CNNUpsamplingBilinearGradient(dev, integer_scale_factor_x, integer_scale_factor_y, align_corners)",
        UPSAMPLING)],
    # gram matrix
    "NNGramMatrixCalculation": [forward("mpsx.NNGramMatrixCalculation(dev, alpha)", GRAM_MATRIX)],
    "NNGramMatrixCalculationGradient": [gradient("mpsx.NNGramMatrixCalculation(dev, alpha)",
                                                 "mpsx.NNGramMatrixCalculationGradient(dev, alpha)", GRAM_MATRIX)],
}

PAD = """
padding_size_before = (1, 2, 1)
padding_size_after = (2, 0, 1)
fill_value_array = np.arange(4, dtype=np.float32)
"""

RESHAPE_EXTRAS = """
reshaped_width = 3
reshaped_height = 4
reshaped_feature_channels = 6
"""

FACTORIES.update({
    "ImageCoordinate": ["""
x, y, channel = 1, 2, 3
obj = mpsx.ImageCoordinate(x, y, channel)
"""],
    "NNPad": [forward("mpsx.NNPad(dev, padding_size_before, padding_size_after, fill_value_array)", PAD)
              + "obj.edge_mode = mpsx.ImageEdgeMode.CONSTANT\n"],
    "NNPadGradient": [gradient("mpsx.NNPad(dev, padding_size_before, padding_size_after)", "mpsx.NNPadGradient(dev)",
                               PAD)],
    "NNReshape": [forward("mpsx.NNReshape(dev)") + RESHAPE_EXTRAS],
    "NNReshapeGradient": [gradient("mpsx.NNReshape(dev)", "mpsx.NNReshapeGradient(dev)")],
})

# Abstract classes: made through a concrete subclass.
FACTORIES.update({
    "CNNKernel": FACTORIES["CNNNeuron"],
    "CNNUnaryKernel": FACTORIES["CNNNeuron"],
    "CNNGradientKernel": FACTORIES["CNNNeuronGradient"],
    "CNNPooling": FACTORIES["CNNPoolingMax"],
    "CNNPoolingGradient": FACTORIES["CNNPoolingMaxGradient"],
    "NNOptimizer": SGD,
    "CNNUpsampling": FACTORIES["CNNUpsamplingBilinear"],
    "CNNUpsamplingGradient": FACTORIES["CNNUpsamplingBilinearGradient"],
})

# Arithmetic (binary kernels): a primary and a secondary image of each form.
ARITHMETIC_IMAGES = IMAGES + """
primary_image = source_image
secondary_image = mpsx.Image.from_numpy(dev, rng.standard_normal((1, 2, 6, 6)).astype(np.float32) + 3)
primary_images = source_images
secondary_images = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 2, 6, 6)).astype(np.float32) + 3)
source_images = [primary_image, secondary_image]
"""


def binary_forward(make):
    return ARITHMETIC_IMAGES + f"""
obj = {make}
destination_image = obj.encode(cb, primary_image, secondary_image)
destination_images = obj.encode_batch(cb, primary_images, secondary_images)
destination_state = True
destination_states = True
"""


def arithmetic_gradient(name, secondary):
    reads_secondary = (name == "Multiply") != secondary
    image = "secondary" if reads_secondary else "primary"
    return ARITHMETIC_IMAGES + f"""
forward = mpsx.CNN{name}(dev)
result, gradient_state = forward.encode(cb, primary_image, secondary_image, destination_state=True)
results, gradient_states = forward.encode_batch(cb, primary_images, secondary_images, destination_states=True)
source_gradient = mpsx.Image.from_numpy(dev, rng.standard_normal(result.shape).astype(np.float32))
source_gradients = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal(results.shape).astype(np.float32))
source_image = {image}_image
source_images = {image}_images
source_states = gradient_states
is_secondary_source_filter = {secondary}
destination_gradient = mpsx.Image.from_numpy(dev, np.zeros(source_image.shape, np.float32))
obj = mpsx.CNN{name}Gradient(dev, is_secondary_source_filter)
"""


FACTORIES.update({
    "CNNAdd": [binary_forward("mpsx.CNNAdd(dev)")],
    "CNNSubtract": [binary_forward("mpsx.CNNSubtract(dev)")],
    "CNNMultiply": [binary_forward("mpsx.CNNMultiply(dev)")],
    "CNNDivide": [binary_forward("mpsx.CNNDivide(dev)")],
    "NNCompare": [binary_forward("mpsx.NNCompare(dev)")],
    "CNNArithmeticGradientState": [ARITHMETIC_IMAGES + """
forward = mpsx.CNNMultiply(dev)
result, obj = forward.encode(cb, primary_image, secondary_image, destination_state=True)
"""],
    "CNNAddGradient": [arithmetic_gradient("Add", False), arithmetic_gradient("Add", True)],
    "CNNSubtractGradient": [arithmetic_gradient("Subtract", False), arithmetic_gradient("Subtract", True)],
    "CNNMultiplyGradient": [arithmetic_gradient("Multiply", False), arithmetic_gradient("Multiply", True)],
})
FACTORIES.update({
    "CNNBinaryKernel": FACTORIES["CNNAdd"],
    "CNNArithmetic": FACTORIES["CNNMultiply"],
    "CNNArithmeticGradient": FACTORIES["CNNMultiplyGradient"],
    "NNBinaryGradientState": FACTORIES["CNNArithmeticGradientState"],
    # No mpsx kernel makes one (mpsx has no MPSCNNMultiaryKernel): the fuzzer drives the members of one made
    # without __init__, which raise TypeError.
    "NNMultiaryGradientState": ["obj = mpsx.NNMultiaryGradientState.__new__(mpsx.NNMultiaryGradientState)\n"],
})


# instance and group normalization
def _group_normalization(kind):
    """Snippets of one family: kind "Instance" or "Group"."""
    groups = "" if kind == "Instance" else "\n    number_of_groups = 2\n"
    update = "instance" if kind == "Instance" else "group"
    weights_groups = "" if kind == "Instance" else "number_of_groups, "
    source = f"""
class NormalizationSource(mpsx.CNN{kind}NormalizationDataSource):
    epsilon = 1e-5{groups}
    def number_of_feature_channels(self):
        return 4

    def gamma(self):
        return np.ones(4, np.float32)

    def beta(self):
        return np.zeros(4, np.float32)

    def label(self):
        return "normalization"

    def update_gamma_and_beta_with_{update}_normalization_state_batch(self, states):
        return False

data_source = NormalizationSource()
source_image = mpsx.Image.from_numpy(dev, rng.standard_normal((2, 4, 5, 3)).astype(np.float32))
source_images = source_image
"""
    forward = source + f"""
normalization = mpsx.CNN{kind}Normalization(dev, data_source)
"""
    state = forward + """
result, gradient_state = normalization.encode(cb, source_image, destination_state=True)
source_gradient = mpsx.Image.from_numpy(dev, rng.standard_normal((2, 4, 5, 3)).astype(np.float32))
"""
    trained = state + f"""
mpsx.CNN{kind}NormalizationGradient(dev).encode(cb, source_gradient, source_image, gradient_state)
state = states = gradient_state
"""
    return {
        f"CNN{kind}NormalizationDataSource": [source + "\nobj = data_source\n"],
        f"{kind}NormalizationWeights": [source + f"""
gamma = np.ones(4, np.float32)
beta = np.zeros(4, np.float32)
number_of_groups = 2
epsilon = 1e-5
optimizer = mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate=0.1)
label = "normalization"
obj = mpsx.{kind}NormalizationWeights(gamma, beta, {weights_groups}epsilon, optimizer, label)
data_source = obj
normalization = mpsx.CNN{kind}Normalization(dev, data_source)
result, gradient_state = normalization.encode(cb, source_image, destination_state=True)
mpsx.CNN{kind}NormalizationGradient(dev).encode(cb, source_image, source_image, gradient_state)
states = gradient_state
"""],
        f"CNN{kind}Normalization": [trained + """
obj = normalization
destination_image = mpsx.Image.from_numpy(dev, np.zeros((2, 4, 5, 3), np.float32))
gamma_and_beta_state = mpsx.CNNNormalizationGammaAndBetaState(dev, np.ones(4, np.float32), np.zeros(4, np.float32))
"""],
        f"CNN{kind}NormalizationGradientState": [state + "\nobj = gradient_state\nstate = gradient_state\n"],
        f"CNN{kind}NormalizationGradient": [state + f"""
obj = mpsx.CNN{kind}NormalizationGradient(dev)
gradient_states = source_states = gradient_state
source_gradients = source_gradient
destination_gradient = mpsx.Image.from_numpy(dev, np.zeros((2, 4, 5, 3), np.float32))
"""],
    }


FACTORIES.update(_group_normalization("Instance"))
FACTORIES.update(_group_normalization("Group"))


# NNGraph and its nodes: a small training model (conv, relu, max pool, fully
# connected, softmax cross entropy) whose weights train on the device.
GRAPH_MODEL = """
class Handle:
    def __init__(self, label):
        self.label = label

handle = Handle("images")
source = mpsx.NNImageNode(handle)
sgd = mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate=0.1)
weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 4), np.full((4, 3, 3, 2), 0.1, np.float32),
                                  np.zeros(4, np.float32), optimizer=sgd)
conv = mpsx.CNNConvolutionNode(source, weights)
descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
relu = mpsx.CNNNeuronNode(conv.result_image, descriptor)
pool = mpsx.CNNPoolingMaxNode(relu.result_image, 2)
fc_weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 4, 3), np.full((3, 3, 3, 4), 0.1, np.float32),
                                     np.zeros(3, np.float32), optimizer=sgd)
fc = mpsx.CNNFullyConnectedNode(pool.result_image, fc_weights)
loss_descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
loss = mpsx.CNNLossNode(fc.result_image, loss_descriptor)
loss.input_labels.handle = Handle("labels")
gradient_image = source_gradient = mpsx.NNImageNode()
gradient_images = [gradient_image]
left_source = conv.result_image
right_source = relu.result_image
filter_size = 2
stride = 2
kernel_width = kernel_height = stride_in_pixels_x = stride_in_pixels_y = 2
"""


def graph_node(make, extra=""):
    return GRAPH_MODEL + extra + f"\nobj = value = {make}\n"


def graph_gradient_node(forward):
    return GRAPH_MODEL + f"""
obj = value = {forward}.gradient_filter_with_source(gradient_image)
source_image = {forward}.source_images[0]
gradient_state = convolution_gradient_state = {forward}.result_state
"""


GRAPH = GRAPH_MODEL + """
result_image = loss.training_graph()[0].result_image
result_image.synchronize_resource = True
result_image_is_needed = True
labels = np.zeros((2, 3, 1, 1), np.float32)
labels[:, 0] = 1
source_images = [mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 2, 6, 6)).astype(np.float32))]
source_states = [mpsx.CNNLossLabels(dev, labels)]
index = 0
obj = mpsx.NNGraph(dev, result_image, result_image_is_needed)
"""

FACTORIES.update({
    "NNImageNode": [GRAPH_MODEL + "\nobj = value = relu.result_image\n", "\nobj = value = mpsx.NNImageNode()\n"],
    "NNGradientStateNode": [graph_node("relu.result_state")],
    "CNNConvolutionGradientStateNode": [graph_node("conv.result_state")],
    "NNLabelsNode": [graph_node("loss.input_labels")],
    "CNNNeuronNode": [graph_node("relu")],
    "CNNNeuronGradientNode": [graph_gradient_node("relu")],
    # The per-type neuron nodes, over the four channels of the convolution's result.
    **{f"CNNNeuron{name}Node": [graph_node(
        f"mpsx.CNNNeuron{name}Node(conv.result_image{''.join(', ' + p for p in parameters)})",
        "\na, b, c = 0.5, 2.0, 1.5\n")]
       for name, parameters in [("Absolute", ""), ("ELU", "a"), ("Exponential", "abc"), ("GeLU", ""),
                                ("HardSigmoid", "ab"), ("Linear", "ab"), ("Logarithm", "abc"), ("Power", "abc"),
                                ("ReLU", "a"), ("ReLUN", "ab"), ("Sigmoid", ""), ("SoftPlus", "ab"), ("SoftSign", ""),
                                ("TanH", "ab")]},
    "CNNNeuronPReLUNode": [graph_node("mpsx.CNNNeuronPReLUNode(conv.result_image, a_data)",
                                      "\na_data = np.array([0.1, 0.2, 0.3, 0.4], np.float32)\n")],
    "CNNPoolingMaxNode": [graph_node("pool")],
    "CNNPoolingAverageNode": [graph_node("mpsx.CNNPoolingAverageNode(relu.result_image, 2)")],
    "CNNPoolingL2NormNode": [graph_node("mpsx.CNNPoolingL2NormNode(relu.result_image, 2)")],
    "CNNDilatedPoolingMaxNode": [graph_node("mpsx.CNNDilatedPoolingMaxNode(relu.result_image, 2, 1, 2)",
                                            "\ndilation_rate = 2\n")],
    "CNNPoolingMaxGradientNode": [graph_gradient_node("pool")],
    "CNNPoolingAverageGradientNode": [graph_gradient_node("mpsx.CNNPoolingAverageNode(relu.result_image, 2)")],
    "CNNPoolingL2NormGradientNode": [graph_gradient_node("mpsx.CNNPoolingL2NormNode(relu.result_image, 2)")],
    "CNNDilatedPoolingMaxGradientNode": [graph_gradient_node("mpsx.CNNDilatedPoolingMaxNode(relu.result_image, 2, 1, 2)")],
    "CNNConvolutionNode": [graph_node("conv")],
    "CNNFullyConnectedNode": [graph_node("fc")],
    "CNNConvolutionGradientNode": [graph_gradient_node("conv")],
    "CNNFullyConnectedGradientNode": [graph_gradient_node("fc")],
    "CNNLossNode": [graph_node("loss")],
    "NNAdditionNode": [graph_node("mpsx.NNAdditionNode(left_source, right_source)")],
    "NNGraph": [GRAPH],
})
FACTORIES.update({
    "NNStateNode": FACTORIES["NNGradientStateNode"],
    "NNFilterNode": FACTORIES["CNNNeuronNode"],
    "NNGradientFilterNode": FACTORIES["CNNNeuronGradientNode"],
    "CNNPoolingNode": FACTORIES["CNNPoolingMaxNode"],
    "CNNPoolingGradientNode": FACTORIES["CNNPoolingMaxGradientNode"],
})


# Softmax, dropout and upsampling nodes over the model's relu. A gradient
# node's valid arguments come from one forward node (their constructors check
# that the state, the source image and the parameters are that node's); the
# softmax gradients read the forward result.
UNARY_NODE_ARGUMENTS = """
keep_probability = 0.5
seed = 3
mask_stride_in_pixels = (1, 1, 1)
integer_scale_factor_x = 2
integer_scale_factor_y = 3
scale_factor_x = 2.0
scale_factor_y = 3.0
align_corners = True
"""


def graph_unary_gradient_node(forward, reads_result=False):
    return GRAPH_MODEL + UNARY_NODE_ARGUMENTS + f"""
forward = {forward}
obj = value = forward.gradient_filter_with_source(gradient_image)
source_image = forward.{"result_image" if reads_result else "source_images[0]"}
gradient_state = forward.result_state
"""


FACTORIES.update({
    "CNNSoftMaxNode": [graph_node("mpsx.CNNSoftMaxNode(relu.result_image)")],
    "CNNLogSoftMaxNode": [graph_node("mpsx.CNNLogSoftMaxNode(relu.result_image)")],
    "CNNSoftMaxGradientNode": [graph_unary_gradient_node("mpsx.CNNSoftMaxNode(relu.result_image)", True)],
    "CNNLogSoftMaxGradientNode": [graph_unary_gradient_node("mpsx.CNNLogSoftMaxNode(relu.result_image)", True)],
    "CNNDropoutNode": [graph_node("mpsx.CNNDropoutNode(relu.result_image, 0.5, 3)", UNARY_NODE_ARGUMENTS)],
    "CNNDropoutGradientNode": [graph_unary_gradient_node("mpsx.CNNDropoutNode(relu.result_image, 0.5, 3)")],
    "CNNUpsamplingNearestNode": [graph_node("mpsx.CNNUpsamplingNearestNode(relu.result_image, 2, 3)",
                                            UNARY_NODE_ARGUMENTS)],
    "CNNUpsamplingBilinearNode": [graph_node("mpsx.CNNUpsamplingBilinearNode(relu.result_image, 2, 3, True)",
                                             UNARY_NODE_ARGUMENTS)],
    "CNNUpsamplingNearestGradientNode": [
        graph_unary_gradient_node("mpsx.CNNUpsamplingNearestNode(relu.result_image, 2, 3)")],
    "CNNUpsamplingBilinearGradientNode": [
        graph_unary_gradient_node("mpsx.CNNUpsamplingBilinearNode(relu.result_image, 2, 3, True)")],
    "NNGramMatrixCalculationNode": [graph_node("mpsx.NNGramMatrixCalculationNode(relu.result_image, alpha)",
                                               GRAM_MATRIX)],
    "NNGramMatrixCalculationGradientNode": [
        GRAM_MATRIX + graph_unary_gradient_node("mpsx.NNGramMatrixCalculationNode(relu.result_image, alpha)")],
})
PAD_NODE_ARGUMENTS = """
padding_size_before = (1, 1, 0)
padding_size_after = (0, 2, 1)
edge_mode = mpsx.ImageEdgeMode.MIRROR
result_width = 3
result_height = 12
result_feature_channels = 4
"""

FACTORIES.update({
    "NNPadNode": [graph_node("mpsx.NNPadNode(relu.result_image, (1, 1, 0), (0, 2, 1), mpsx.ImageEdgeMode.MIRROR)",
                             PAD_NODE_ARGUMENTS)],
    "NNPadGradientNode": [graph_unary_gradient_node(
        "mpsx.NNPadNode(relu.result_image, (1, 1, 0), (0, 2, 1), mpsx.ImageEdgeMode.MIRROR)")],
    "NNReshapeNode": [graph_node("mpsx.NNReshapeNode(relu.result_image, 3, 12, 4)", PAD_NODE_ARGUMENTS)],
    "NNReshapeGradientNode": [graph_unary_gradient_node("mpsx.NNReshapeNode(relu.result_image, 3, 12, 4)")],
})
FACTORIES.update({
    "CNNCrossChannelNormalizationNode": [graph_node("mpsx.CNNCrossChannelNormalizationNode(relu.result_image, 3)",
                                                    "\nkernel_size = 3\n")],
    "CNNCrossChannelNormalizationGradientNode": [
        graph_gradient_node("mpsx.CNNCrossChannelNormalizationNode(relu.result_image, 3)") + "\nkernel_size = 3\n"],
    "CNNSpatialNormalizationNode": [graph_node("mpsx.CNNSpatialNormalizationNode(relu.result_image, 2)",
                                               "\nkernel_size = 2\n")],
    "CNNSpatialNormalizationGradientNode": [
        graph_gradient_node("mpsx.CNNSpatialNormalizationNode(relu.result_image, 2)") + "\nkernel_size = 2\n"],
    "CNNLocalContrastNormalizationNode": [graph_node("mpsx.CNNLocalContrastNormalizationNode(relu.result_image, 2)",
                                                     "\nkernel_size = 2\n")],
    "CNNLocalContrastNormalizationGradientNode": [
        graph_gradient_node("mpsx.CNNLocalContrastNormalizationNode(relu.result_image, 2)") + "\nkernel_size = 2\n"],
})


# The normalization nodes of the graph (batch, group, instance), fed by the
# model's convolution (4 channels) and trained by its optimizer.
GRAPH_NORMALIZATION = """
ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
bn_weights = mpsx.BatchNormalizationWeights(ones, zeros, zeros, ones, 1e-5, optimizer=sgd)
bn = mpsx.CNNBatchNormalizationNode(conv.result_image, bn_weights)
group_weights = mpsx.GroupNormalizationWeights(ones, zeros, 2, optimizer=sgd)
gn = mpsx.CNNGroupNormalizationNode(conv.result_image, group_weights)
instance_weights = mpsx.InstanceNormalizationWeights(ones, zeros, optimizer=sgd)
inn = mpsx.CNNInstanceNormalizationNode(conv.result_image, instance_weights)
flags = mpsx.CNNBatchNormalizationFlags.CALCULATE_STATISTICS_ALWAYS
"""


def graph_normalization_node(node, weights):
    return GRAPH_MODEL + GRAPH_NORMALIZATION + f"\ndata_source = {weights}\nobj = value = {node}\n"


def graph_normalization_gradient_node(forward):
    return GRAPH_MODEL + GRAPH_NORMALIZATION + f"""
obj = value = {forward}.gradient_filter_with_source(gradient_image)
source_image = {forward}.source_images[0]
gradient_state = {forward}.result_state
"""


FACTORIES.update({
    "CNNBatchNormalizationNode": [graph_normalization_node("bn", "bn_weights")],
    "CNNBatchNormalizationGradientNode": [graph_normalization_gradient_node("bn")],
    "CNNGroupNormalizationNode": [graph_normalization_node("gn", "group_weights")],
    "CNNGroupNormalizationGradientNode": [graph_normalization_gradient_node("gn")],
    "CNNInstanceNormalizationNode": [graph_normalization_node("inn", "instance_weights")],
    "CNNInstanceNormalizationGradientNode": [graph_normalization_gradient_node("inn")],
})


# Arithmetic, concatenation and convolution transpose nodes (graph-multi).
GRAPH_MULTI = """
sources = [left_source, right_source]
is_secondary_source_filter = False
transpose_weights = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 4, 2), np.full((2, 3, 3, 4), 0.1, np.float32),
                                            np.zeros(2, np.float32), optimizer=sgd)
weights = transpose_weights
convolution_gradient_state = conv.result_state
"""


def graph_multi_node(make):
    return graph_node(make, GRAPH_MULTI)


def graph_multi_gradient_node(forward, index=0):
    return GRAPH_MODEL + GRAPH_MULTI + f"""
forward = {forward}
obj = value = forward.gradient_filters_with_source(gradient_image)[{index}]
source_image = obj.source_images[1]
gradient_state = convolution_transpose_gradient_state = forward.result_state
is_secondary_source_filter = {bool(index)}
"""


TRANSPOSE = "mpsx.CNNConvolutionTransposeNode(relu.result_image, conv.result_state, transpose_weights)"
FACTORIES.update({
    "NNBinaryGradientStateNode": [graph_multi_node("mpsx.NNAdditionNode(left_source, right_source).result_state")],
    "NNArithmeticGradientStateNode": [graph_multi_node(
        "mpsx.NNSubtractionNode(left_source, right_source).result_state")],
    "NNMultiaryGradientStateNode": ["obj = mpsx.NNMultiaryGradientStateNode.__new__(mpsx.NNMultiaryGradientStateNode)\n"],
    "NNAdditionNode": [graph_multi_node("mpsx.NNAdditionNode(left_source, right_source)")],
    "NNSubtractionNode": [graph_multi_node("mpsx.NNSubtractionNode(left_source, right_source)")],
    "NNMultiplicationNode": [graph_multi_node("mpsx.NNMultiplicationNode(sources=sources)")],
    "NNDivisionNode": [graph_multi_node("mpsx.NNDivisionNode(left_source, right_source)")],
    "NNComparisonNode": [graph_multi_node("mpsx.NNComparisonNode(left_source, right_source)")],
    "NNAdditionGradientNode": [graph_multi_gradient_node("mpsx.NNAdditionNode(left_source, right_source)"),
                               graph_multi_gradient_node("mpsx.NNAdditionNode(left_source, right_source)", 1)],
    "NNSubtractionGradientNode": [graph_multi_gradient_node("mpsx.NNSubtractionNode(left_source, right_source)", 1)],
    "NNMultiplicationGradientNode": [graph_multi_gradient_node("mpsx.NNMultiplicationNode(left_source, right_source)")],
    "NNConcatenationNode": [graph_multi_node("mpsx.NNConcatenationNode(sources)")],
    "NNConcatenationGradientNode": [graph_multi_gradient_node("mpsx.NNConcatenationNode(sources)", 1)],
    "CNNConvolutionTransposeNode": [graph_multi_node(TRANSPOSE)],
    "CNNConvolutionTransposeGradientNode": [graph_multi_gradient_node(TRANSPOSE)],
    "CNNConvolutionTransposeGradientStateNode": [graph_multi_node(TRANSPOSE + ".result_state")],
})
FACTORIES.update({
    "NNBinaryArithmeticNode": FACTORIES["NNAdditionNode"],
    "NNArithmeticGradientNode": FACTORIES["NNAdditionGradientNode"],
})

SCALE_NODE = """
class Zoom(mpsx.ImageTransformProvider):
    def transform_for_source_image(self, image, handle):
        return mpsx.ScaleTransform(1.5, 0.5, -0.5, 0.0)

output_size = (5, 3)
transform_provider = Zoom()
"""

FACTORIES.update({
    "NNInitialGradientNode": [graph_node("mpsx.NNInitialGradientNode(pool.result_image)")],
    "NNInitialGradient": [forward("mpsx.NNInitialGradient(dev)")],
    "NNReductionSpatialMeanNode": [graph_node("mpsx.NNReductionSpatialMeanNode(relu.result_image)")],
    "NNReductionFeatureChannelsSumNode": [graph_node("mpsx.NNReductionFeatureChannelsSumNode(relu.result_image)")],
    "NNReductionSpatialMeanGradientNode": [
        graph_unary_gradient_node("mpsx.NNReductionSpatialMeanNode(relu.result_image)")],
    "NNBilinearScaleNode": [graph_node("mpsx.NNBilinearScaleNode(relu.result_image, output_size)", SCALE_NODE),
                            graph_node("mpsx.NNBilinearScaleNode(relu.result_image, output_size, transform_provider)",
                                       SCALE_NODE)],
    "NNLanczosScaleNode": [graph_node("mpsx.NNLanczosScaleNode(relu.result_image, output_size, transform_provider)",
                                      SCALE_NODE)],
    "NNScaleNode": [graph_node("mpsx.NNLanczosScaleNode(relu.result_image, output_size)", SCALE_NODE)],
    # Abstract bases: made through a concrete subclass.
    "NNUnaryReductionNode": [graph_node("mpsx.NNReductionSpatialMeanNode(relu.result_image)")],
    "CNNNormalizationNode": FACTORIES["CNNCrossChannelNormalizationNode"],
    "NNTrainableNode": FACTORIES["CNNConvolutionNode"],
})

# The separated losses: labels and weights are images shaped as the source.
SEPARATED_LOSS = """
loss_descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
source_image = mpsx.Image.from_numpy(dev, rng.standard_normal((2, 3, 2, 2)).astype(np.float32))
source_images = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 3, 2, 2)).astype(np.float32))
labels = mpsx.ImageBatch.from_numpy(dev, rng.standard_normal((2, 3, 2, 2)).astype(np.float32))
weights = mpsx.ImageBatch.from_numpy(dev, np.ones((2, 3, 2, 2), np.float32))
forward = mpsx.NNForwardLoss(dev, loss_descriptor)
"""
FORWARD_LOSS_NODE = """
labels_node = mpsx.NNImageNode(Handle("labels"))
weights_node = mpsx.NNImageNode(Handle("weights"))
forward_loss = mpsx.NNForwardLossNode(fc.result_image, labels_node, weights_node, loss_descriptor)
labels, weights = labels_node, weights_node
source_image = fc.result_image
gradient_state = forward_loss.result_state
is_labels_gradient_filter = True
"""

FACTORIES.update({
    "NNForwardLoss": [SEPARATED_LOSS + """
obj = forward
destination_state = destination_states = True
destination_image = mpsx.Image.from_numpy(dev, np.zeros((2, 1, 1, 1), np.float32))
destination_images = mpsx.ImageBatch.from_numpy(dev, np.zeros((2, 1, 1, 1), np.float32))
"""],
    "NNLossGradient": [SEPARATED_LOSS + """
_, source_state = forward.encode(cb, source_image, labels, weights, destination_state=True)
_, source_states = forward.encode_batch(cb, source_images, labels, weights, destination_states=True)
source_gradient = mpsx.Image.from_numpy(dev, np.ones((2, 1, 1, 1), np.float32))
source_gradients = mpsx.ImageBatch.from_numpy(dev, np.ones((2, 1, 1, 1), np.float32))
destination_gradient = mpsx.Image.from_numpy(dev, np.zeros((2, 3, 2, 2), np.float32))
destination_gradients = mpsx.ImageBatch.from_numpy(dev, np.zeros((2, 3, 2, 2), np.float32))
obj = mpsx.NNLossGradient(dev, loss_descriptor)
"""],
    "NNLossGradientState": [SEPARATED_LOSS + """
_, obj = forward.encode(cb, source_image, labels, weights, destination_state=True)
"""],
    "NNForwardLossNode": [graph_node("forward_loss", FORWARD_LOSS_NODE +
                                     "sources = [fc.result_image, labels_node, weights_node]\n")],
    "NNLossGradientNode": [graph_node("forward_loss.gradient_filters_with_source(gradient_image)[1]",
                                      FORWARD_LOSS_NODE +
                                      "sources = [gradient_image, fc.result_image, labels_node, weights_node]\n")],
})
FACTORIES.update({
    "NNHandle": ["""
obj = mpsx.NNHandle("images")
label = "labels"
other = mpsx.NNHandle("images")
"""],
    "NNLossCallback": ["""
class Scale(mpsx.NNLossCallback):
    def scalar_weight_for_source_image(self, source_image, destination_image):
        return 2.0

obj = Scale()
source_image = destination_image = mpsx.Image.from_numpy(dev, np.ones((1, 1, 1, 1), np.float32))
"""],
    "ImageTransformProvider": ["""
class Zoom(mpsx.ImageTransformProvider):
    def transform_for_source_image(self, image, handle):
        return mpsx.ScaleTransform(2.0, 1.5, -1.0, 0.5)

obj = Zoom()
image = mpsx.Image.from_numpy(dev, np.ones((1, 1, 2, 2), np.float32))
handle = None
"""],
    "ScaleTransform": ["""
scale_x, scale_y, translate_x, translate_y = 2.0, 0.5, -1.0, 0.25
obj = mpsx.ScaleTransform(scale_x, scale_y, translate_x, translate_y)
"""],
    "NNGramMatrixCallback": ["""
class Alpha(mpsx.NNGramMatrixCallback):
    def alpha_for_source_image(self, source_image, destination_image):
        return 0.5

obj = Alpha()
source_image = destination_image = mpsx.Image.from_numpy(dev, np.ones((1, 1, 1, 1), np.float32))
"""],
})
FACTORIES.update({
    # A small PyTorch module brought in (mpsx.from_torch); its description is what the constructor takes.
    "ImportedModel": ["""
import torch
module = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU(),
                             torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 5))
example_input = torch.zeros(1, 2, 4, 4)
device = dev
optimizer = mpsx.NNOptimizerStochasticGradientDescent(dev, learning_rate=0.1)
obj = mpsx.from_torch(module, example_input, dev, optimizer)
description = obj._description
format = mpsx.DataType.FLOAT32
accumulator_precision = mpsx.NNConvolutionAccumulatorPrecisionOption.HALF
loss_descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
""", """
import torch
# A transposed convolution that a custom padding policy sizes (kernel 4, stride 2, padding 1).
module = torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 3, 4, 2, 1), torch.nn.ReLU(), torch.nn.Flatten(),
                             torch.nn.Linear(3 * 8 * 8, 5))
example_input = torch.zeros(1, 2, 4, 4)
device = dev
optimizer = mpsx.NNOptimizerAdam(dev, learning_rate=0.01)
obj = mpsx.from_torch(module, example_input, dev, optimizer)
description = obj._description
format = mpsx.DataType.FLOAT16
accumulator_precision = mpsx.NNConvolutionAccumulatorPrecisionOption.FLOAT
loss_descriptor = torch.nn.CrossEntropyLoss()
"""],
})
FACTORIES.update({
    # A group of one on the fuzzed device (NCCL's on cuda); joining a larger group waits at most `timeout`.
    "Communicator": ["""
from mpsx.distributed import _nccl_library
library = _nccl_library() if dev.backend == "cuda" else ""
group_id = mpsx._runtime._new_group_id(dev, library)
device = dev
rank = 0
world_size = 1
timeout = 2.0
bucket_bytes = 64
obj = mpsx.Communicator(dev, rank, world_size, group_id, library, None, timeout, bucket_bytes)
command_buffer = cb
items = [mpsx.Vector(dev, 4), mpsx.Vector(dev, 40)]
op = "mean"
"""],
})


"""Members of MPS's kernel base classes (MPSKernel, MPSCNNKernel, MPSCNNBinaryKernel), the pooling base
initializers, MPSNNBinaryGradientState and MPSNNMultiaryGradientState, MPSNNGraph's source read counts and
-[MPSHandle label], each against its header sentence (docs/semantics.md says what mpsx decided)."""

import pickle

import numpy as np
import pytest
import torch

import mpsx
from helpers import assert_uninitialized_raise, read, run


def images(device, rng, shape=(2, 3, 4, 6)):
    return mpsx.Image.from_numpy(device, rng.standard_normal(shape).astype(np.float32))


def relu(device):
    return mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))


def convolution_weights(rng, stride=1):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 3, 2, stride, stride)
    return mpsx.ConvolutionWeights(d, (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32),
                                   np.zeros(2, np.float32))


def kernels(device, rng):
    """{name: kernel} of forward kernels, gradient kernels and the convolution transpose."""
    return {
        "relu": relu(device),
        "pooling": mpsx.CNNPoolingMax(device, 2, 2),
        "convolution": mpsx.CNNConvolution(device, convolution_weights(rng)),
        "add": mpsx.CNNAdd(device),
        "softmax": mpsx.CNNSoftMax(device),
        "statistics": mpsx.CNNBatchNormalizationStatistics(device),
        "transpose": mpsx.CNNConvolutionTranspose(device, convolution_weights(rng, 2)),
        "relu gradient": mpsx.CNNNeuronGradient(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)),
        "pooling gradient": mpsx.CNNPoolingMaxGradient(device, 2, 2),
        "convolution gradient": mpsx.CNNConvolutionGradient(device, convolution_weights(rng)),
        "add gradient": mpsx.CNNAddGradient(device, False),
        "statistics gradient": mpsx.CNNBatchNormalizationStatisticsGradient(device),
        "batch normalization gradient": mpsx.CNNBatchNormalizationGradient(device),
        "group normalization gradient": mpsx.CNNGroupNormalizationGradient(device),
    }


def test_is_backwards_says_which_frame_the_stride_is_in(device, rng):
    """"YES if the filter operates backwards ... The stride is in the destination coordinate frame rather than the
    source coordinate frame": a stride-2 kernel that operates backwards enlarges its source, one that does not
    reduces it."""
    found = {name: k.is_backwards for name, k in kernels(device, rng).items()}
    assert found == {name: name == "transpose" or name.endswith("gradient") for name in found}
    x = images(device, rng, (1, 3, 5, 7))
    transpose = mpsx.CNNConvolutionTranspose(device, convolution_weights(rng, 2))
    transpose.padding = mpsx.NNPaddingMethod.SIZE_SAME
    pooling = mpsx.CNNPoolingMax(device, 2, 2)
    pooling.padding = mpsx.NNPaddingMethod.SIZE_SAME
    for kernel, source in ((transpose, mpsx.Image.from_numpy(device, np.ones((1, 3, 5, 7), np.float32))),
                           (pooling, x)):
        d = kernel.destination_image_descriptor([source])
        if kernel.is_backwards:
            assert d.width >= 2 * source.width - 1 and d.height >= 2 * source.height - 1
        else:
            assert (d.width, d.height) == (-(-source.width // 2), -(-source.height // 2))


def test_is_state_modified_says_whether_the_encode_writes_the_state(device, rng):
    """"Returns true if the -encode call modifies the state object it accepts"."""
    found = {name: k.is_state_modified for name, k in kernels(device, rng).items()}
    readers = {"relu gradient", "pooling gradient", "add gradient"}
    assert found == {name: name not in readers for name in found}


def test_a_state_modifying_gradient_writes_its_state_and_a_reader_leaves_it(device, rng):
    """The convolution gradient (True) writes the weight gradients into its state, as PyTorch computes them; the
    pooling gradient (False) leaves its state as the forward encode left it."""
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    dy = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    source = convolution_weights(rng)
    forward, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    assert gradient.is_state_modified

    def encode(cb):
        xs = mpsx.ImageBatch.from_numpy(device, x)
        _, states = forward.encode_batch(cb, xs, destination_states=True)
        gradient.encode_batch(cb, mpsx.ImageBatch.from_numpy(device, dy), xs, states)
        states[0].synchronize(cb)
        return states[0]

    state = run(device, encode)
    w = torch.tensor(source.weights(), requires_grad=True)  # O, H, W, I
    y = torch.nn.functional.conv2d(torch.tensor(x), w.permute(0, 3, 1, 2), padding=1)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(state.gradient_for_weights.to_numpy().reshape(w.shape), w.grad.numpy(),
                               rtol=1e-4, atol=1e-4)

    pooling, pooling_gradient = mpsx.CNNPoolingMax(device, 2, 2), mpsx.CNNPoolingMaxGradient(device, 2, 2)
    assert not pooling_gradient.is_state_modified
    xi = mpsx.Image.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    y, state = pooling.encode(cb, xi, destination_state=True)
    pooling_gradient.encode(cb, y, xi, state)
    # What the state holds is unchanged: a second gradient encode with it gives the same gradient.
    first = pooling_gradient.encode(cb, y, xi, state)
    second = pooling_gradient.encode(cb, y, xi, state)
    for image in (first, second):
        image.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(first.to_numpy(), second.to_numpy())


def test_append_batch_barrier_is_true_for_batch_statistics(device, rng):
    """"batch normalization statistics requests the graph insert a batch barrier following it by returning YES":
    the statistics of a batch depend on every image of it, a per-image kernel's result on its image alone."""
    found = {name: k.append_batch_barrier() for name, k in kernels(device, rng).items()}
    assert found == {name: name in ("statistics", "statistics gradient") for name in found}
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    changed = x.copy()
    changed[1] += 5.0
    gamma, beta = np.ones(3, np.float32), np.zeros(3, np.float32)

    def normalized(batch):
        bn = mpsx.CNNBatchNormalization(device, mpsx.BatchNormalizationWeights(
            gamma, beta, np.zeros(3, np.float32), np.ones(3, np.float32), epsilon=1e-5))

        def encode(cb):
            xs = mpsx.ImageBatch.from_numpy(device, batch)
            states = bn.result_state_batch(xs)
            mpsx.CNNBatchNormalizationStatistics(device).encode_batch(cb, xs, batch_normalization_state=states)
            y = bn.encode_batch(cb, xs, batch_normalization_state=states)
            y.synchronize(cb)
            return y
        return run(device, encode).to_numpy()

    assert not np.allclose(normalized(x)[0], normalized(changed)[0], atol=1e-3)


def test_encoding_storage_size_is_zero_for_every_kind_of_kernel(device, rng):
    x = images(device, rng)
    xs = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((2, 3, 4, 6)).astype(np.float32))
    for name, kernel in kernels(device, rng).items():
        sources = (x, x) if isinstance(kernel, mpsx.CNNBinaryKernel) else (x,)
        batches = (xs, [x, x]) if isinstance(kernel, mpsx.CNNBinaryKernel) else (xs,)
        assert kernel.encoding_storage_size(*sources, source_states=None, destination_image=x) == 0, name
        assert kernel.batch_encoding_storage_size(*batches, destination_images=xs) == 0, name


def test_encoding_storage_size_refuses_what_an_encode_would(device, rng):
    x = images(device, rng)
    add, neuron = mpsx.CNNAdd(device), relu(device)
    with pytest.raises(TypeError, match="CNNAdd encodes 2 source image"):
        add.encoding_storage_size(x)
    with pytest.raises(TypeError, match="CNNNeuron encodes 1 source image"):
        neuron.encoding_storage_size(x, x)
    with pytest.raises(TypeError, match="expected an mpsx.Image, given ndarray"):
        neuron.encoding_storage_size(np.zeros((1, 1, 1, 1)))
    with pytest.raises(TypeError, match="expected an mpsx.Image, given str"):
        neuron.encoding_storage_size(x, destination_image="x")
    with pytest.raises(TypeError, match="expected an mpsx.ImageBatch or a list of mpsx.Image, given int"):
        add.batch_encoding_storage_size([x], 3)
    with pytest.raises(ValueError, match="expected source images, given an empty list"):
        neuron.batch_encoding_storage_size([])
    assert_uninitialized_raise(mpsx.CNNAdd, ())
    for method in ("encoding_storage_size", "append_batch_barrier"):
        with pytest.raises(TypeError, match="made without __init__"):
            getattr(mpsx.CNNAdd.__new__(mpsx.CNNAdd), method)(x, x) if method != "append_batch_barrier" else \
                mpsx.CNNAdd.__new__(mpsx.CNNAdd).append_batch_barrier()
    assert_uninitialized_raise(mpsx.CNNNeuron, ("is_backwards", "is_state_modified", "options"))


def test_options_are_kept_saved_copied_and_change_no_result(device, rng, tmp_path):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    pooling = mpsx.CNNPoolingMax(device, 2, 2)
    assert pooling.options == mpsx.KernelOptions.NONE
    every = mpsx.KernelOptions(0)
    for flag in mpsx.KernelOptions:
        every |= flag
    pooling.options = every
    assert pooling.options == every and isinstance(pooling.options, mpsx.KernelOptions)
    pooling.options = int(mpsx.KernelOptions.VERBOSE)
    assert pooling.options is mpsx.KernelOptions.VERBOSE
    pooling.options = every
    path = tmp_path / "pooling.mpsx"
    mpsx.save(pooling, path)
    for other in (mpsx.load(path), pooling.copy(), pickle.loads(pickle.dumps(pooling))):
        assert other.options == every
    got = read(device, lambda cb: pooling.encode(cb, mpsx.Image.from_numpy(device, x)))
    expected = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("value, error, message", [
    (1 << 5, ValueError, "options must be KernelOptions bits \\(0 to 31\\), given 32"),
    (-1, ValueError, "given -1"),
    (True, TypeError, "options must be KernelOptions, given bool"),
    (1.0, TypeError, "given float"),
    ("VERBOSE", TypeError, "given str"),
])
def test_bad_options_are_refused(device, value, error, message):
    kernel = relu(device)
    kernel.options = mpsx.KernelOptions.VERBOSE
    with pytest.raises(error, match=message):
        kernel.options = value
    assert kernel.options is mpsx.KernelOptions.VERBOSE


def test_binary_result_states_as_the_unary_kernel_makes_them(device, rng):
    """MPSCNNBinaryKernel's resultStateBatch, temporaryResultState(Batch) and isResultStateReusedAcrossBatch: one
    NNBinaryGradientState per batch, once per image, which the gradients read as the forward encode filled it."""
    x = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    z = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    dy = rng.standard_normal((3, 2, 3, 4)).astype(np.float32)
    multiply = mpsx.CNNMultiply(device)
    assert multiply.is_result_state_reused_across_batch()
    xs, zs, dys = (mpsx.ImageBatch.from_numpy(device, a) for a in (x, z, dy))
    states = multiply.result_state_batch(xs, zs)
    assert len(states) == 3 and all(s is states[0] for s in states)
    assert isinstance(states[0], mpsx.CNNArithmeticGradientState) and states[0].kernel is multiply
    primary, secondary = mpsx.CNNMultiplyGradient(device, False), mpsx.CNNMultiplyGradient(device, True)

    def encode(cb):
        multiply.encode_batch(cb, xs, zs, destination_states=states)
        temporary = multiply.temporary_result_state_batch(cb, xs, [mpsx.Image.from_numpy(device, z[0])])
        assert temporary[0].is_temporary and temporary[0].read_count == 1 and len(temporary) == 3
        one = multiply.temporary_result_state(cb, xs, zs)
        assert isinstance(one, mpsx.NNBinaryGradientState) and one.is_temporary and one.read_count == 1
        dx, dz = primary.encode_batch(cb, dys, zs, states), secondary.encode_batch(cb, dys, xs, states)
        for image in (dx, dz):
            image.synchronize(cb)
        return dx, dz

    dx, dz = run(device, encode)
    np.testing.assert_allclose(dx.to_numpy(), dy * z, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dz.to_numpy(), dy * x, rtol=1e-5, atol=1e-6)
    cb = device.command_queue.command_buffer()
    with pytest.raises(TypeError):
        multiply.result_state_batch(xs)  # the secondary images are missing
    with pytest.raises(TypeError, match="expected an mpsx.ImageBatch or a list of mpsx.Image, given str"):
        multiply.temporary_result_state_batch(cb, xs, "z")
    assert cb.command_count == 0


def test_gradient_states_are_in_the_class_tree_mps_has(device, rng):
    """MPSNNGradientState.h: MPSNNBinaryGradientState and MPSNNMultiaryGradientState are MPSStates, not
    MPSNNGradientStates; MPSCNNArithmeticGradientState is an MPSNNBinaryGradientState."""
    x = images(device, rng)
    assert issubclass(mpsx.CNNArithmeticGradientState, mpsx.NNBinaryGradientState)
    for cls in (mpsx.NNBinaryGradientState, mpsx.NNMultiaryGradientState):
        assert issubclass(cls, mpsx.State) and not issubclass(cls, mpsx.NNGradientState)
        assert not issubclass(mpsx.NNGradientState, cls)
        with pytest.raises(TypeError, match="states come from kernels"):
            cls()
        assert_uninitialized_raise(cls, ("device", "read_count", "is_temporary"))
        assert cls.__new__(cls).kernel is None
    assert isinstance(mpsx.CNNAdd(device).result_state(x, x), mpsx.NNBinaryGradientState)
    unary = relu(device).result_state(x)
    assert isinstance(unary, mpsx.NNGradientState) and not isinstance(unary, mpsx.NNBinaryGradientState)


def test_the_pooling_base_initializers_are_abstract(device):
    """MPSCNNPooling's and MPSCNNPoolingGradient's initializers: the constructor takes their arguments and refuses,
    naming the subclasses that pool."""
    for args in ((2, 2), (2, 2, 1, 1)):
        with pytest.raises(TypeError, match="CNNPooling is abstract: make a CNNPoolingMax, CNNPoolingAverage, "
                                            "CNNPoolingL2Norm or CNNDilatedPoolingMax"):
            mpsx.CNNPooling(device, *args)
        with pytest.raises(TypeError, match="CNNPoolingGradient is abstract: make a CNNPoolingMaxGradient"):
            mpsx.CNNPoolingGradient(device, *args, stride_in_pixels_y=1) if len(args) == 2 else \
                mpsx.CNNPoolingGradient(device, *args)
    with pytest.raises(TypeError):
        mpsx.CNNPooling(None, 2, 2)
    with pytest.raises(TypeError):
        mpsx.CNNPooling(device)  # the window is missing
    assert_uninitialized_raise(mpsx.CNNPooling, ("kernel_width", "stride_in_pixels_x"))
    assert_uninitialized_raise(mpsx.CNNPoolingGradient, ("kernel_width", "source_size"))


def graph_of(device, node):
    """A float32 graph of the filter node `node`'s result, and the source images of the filters it needs (through
    their images and states)."""
    graph = mpsx.NNGraph(device, node.result_image, format=mpsx.DataType.FLOAT32)
    filters, todo = [], [node]
    while todo:
        f = todo.pop()
        if any(f is seen for seen in filters):
            continue
        filters.append(f)
        todo.extend(s.producer for s in f.source_images + f.source_states if s.producer is not None)
    return graph, [s for f in filters for s in f.source_images]


SHAPES = {"x": (1, 2, 4, 4), "g": (1, 2, 2, 2)}


@pytest.mark.parametrize("make", [
    lambda x, g: mpsx.NNAdditionNode(mpsx.CNNNeuronReLUNode(x).result_image, x),
    lambda x, g: mpsx.NNAdditionNode(x, x),
    lambda x, g: mpsx.CNNNeuronReLUNode(mpsx.CNNPoolingMaxNode(x, 2, 2).result_image),
    lambda x, g: mpsx.CNNPoolingMaxNode(x, 2, 2).gradient_filter_with_source(g),
], ids=["two filters", "one filter twice", "once", "forward and gradient"])
def test_read_count_for_source_image_counts_the_graph_reads(device, rng, make):
    """"The read count of the image(s) at the index will be reduced by the value returned when the graph is
    finished encoding": counted here from the nodes, and seen on temporary source images, which the encode reads
    down to exactly 0."""
    x, g = mpsx.NNImageNode(mpsx.NNHandle("x")), mpsx.NNImageNode(mpsx.NNHandle("g"))
    graph, reads = graph_of(device, make(x, g))
    cb = device.command_queue.command_buffer()
    temporaries = []
    for i, handle in enumerate(graph.source_image_handles):
        expected = sum(1 for s in reads if s.handle == handle)
        assert expected and graph.read_count_for_source_image_at_index(i) == expected
        n, c, h, w = SHAPES[handle.label]
        temporary = mpsx.TemporaryImage(cb, mpsx.ImageDescriptor(width=w, height=h, feature_channels=c))
        temporary.read_count = expected
        mpsx.CNNNeuron(device, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 1.0, 0.0)).encode(
            cb, mpsx.Image.from_numpy(device, rng.standard_normal((n, c, h, w)).astype(np.float32)), temporary)
        temporaries.append(temporary)
    graph.encode(cb, temporaries)
    assert [t.read_count for t in temporaries] == [0] * len(temporaries)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_read_count_for_source_state_counts_the_loss_labels(device, rng):
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    loss = mpsx.CNNLossNode(x, mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR,
                                                      mpsx.CNNReductionType.SUM))
    graph = mpsx.NNGraph(device, loss.result_image)
    assert len(graph.source_state_handles) == 1
    assert graph.read_count_for_source_state_at_index(0) == 1  # the loss node is its one reader
    assert graph.read_count_for_source_image_at_index(0) == 1


def test_read_counts_refuse_bad_indexes(device):
    x = mpsx.NNImageNode(mpsx.NNHandle("x"))
    graph = mpsx.NNGraph(device, mpsx.CNNNeuronReLUNode(x).result_image)
    with pytest.raises(ValueError, match="index 1 is past the 1 source images"):
        graph.read_count_for_source_image_at_index(1)
    with pytest.raises(ValueError, match="index 0 is past the 0 source states"):
        graph.read_count_for_source_state_at_index(0)
    with pytest.raises(ValueError, match="index must be at least 0, given -1"):
        graph.read_count_for_source_image_at_index(-1)
    with pytest.raises(TypeError, match="index must be an int"):
        graph.read_count_for_source_image_at_index(0.5)
    with pytest.raises(TypeError, match="made without __init__"):
        mpsx.NNGraph.__new__(mpsx.NNGraph).read_count_for_source_image_at_index(0)


def test_handle_label_is_read_only_and_saved(device, tmp_path):
    handle = mpsx.NNHandle(3)
    assert handle.label == "3" and mpsx.NNHandle.__new__(mpsx.NNHandle).label == ""
    with pytest.raises(AttributeError):
        handle.label = "4"
    assert handle.label == "3" and handle == mpsx.NNHandle("3") and hash(handle) == hash(mpsx.NNHandle("3"))
    x = mpsx.NNImageNode(handle)
    graph = mpsx.NNGraph(device, mpsx.CNNNeuronReLUNode(x).result_image)
    mpsx.save(graph, tmp_path / "g.mpsx")
    loaded = mpsx.load(tmp_path / "g.mpsx")
    assert loaded.source_image_handles == [mpsx.NNHandle("3")]
    assert pickle.loads(pickle.dumps(handle)).label == "3"


def test_loss_nodes_made_from_sources(device, rng):
    """initWithSources:lossDescriptor: and initWithSources:gradientState:lossDescriptor:isLabelsGradientFilter:: the
    sources in the order of the separate arguments, the weights optional; the graph computes the same loss."""
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
    x, t, w, g = (mpsx.NNImageNode(mpsx.NNHandle(n)) for n in "xtwg")
    loss = mpsx.NNForwardLossNode(sources=[x, t, w], loss_descriptor=d)
    assert loss.source_images == [x, t, w] and loss.loss_descriptor == d
    assert mpsx.NNForwardLossNode(sources=(x, t), loss_descriptor=d).source_images == [x, t]
    gradient = mpsx.NNLossGradientNode(sources=[g, x, t, w], gradient_state=loss.result_state, loss_descriptor=d,
                                       is_labels_gradient_filter=True)
    assert gradient.source_images == [g, x, t, w] and gradient.is_labels_gradient_filter
    assert gradient.source_states == [loss.result_state]
    assert mpsx.NNLossGradientNode(sources=[g, x, t], loss_descriptor=d).source_images == [g, x, t]
    data = {n: rng.standard_normal((1, 3, 2, 2)).astype(np.float32) for n in "xtw"}

    def computed(node):
        graph = mpsx.NNGraph(device, node.result_image, format=mpsx.DataType.FLOAT32)
        node.result_image.synchronize_resource = True
        images = [mpsx.Image.from_numpy(device, data[h.label]) for h in graph.source_image_handles]
        return read(device, lambda cb: graph.encode(cb, images))

    np.testing.assert_array_equal(computed(loss), computed(mpsx.NNForwardLossNode(x, t, w, d)))


def test_loss_nodes_refuse_bad_sources(device):
    d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.MEAN_SQUARED_ERROR, mpsx.CNNReductionType.SUM)
    x, t = mpsx.NNImageNode(), mpsx.NNImageNode()
    with pytest.raises(TypeError, match="NNForwardLossNode: give source, labels \\(and weights\\) or sources, not "
                                        "both"):
        mpsx.NNForwardLossNode(x, sources=[x, t], loss_descriptor=d)
    with pytest.raises(ValueError, match="NNForwardLossNode: expected 2 or 3 sources .* given 4"):
        mpsx.NNForwardLossNode(sources=[x, t, t, t], loss_descriptor=d)
    with pytest.raises(TypeError, match="sources must be a list of NNImageNodes, given NNImageNode"):
        mpsx.NNForwardLossNode(sources=x, loss_descriptor=d)
    with pytest.raises(TypeError, match="labels: expected an NNImageNode, given int"):
        mpsx.NNForwardLossNode(sources=[x, 3], loss_descriptor=d)
    with pytest.raises(TypeError, match="NNLossGradientNode: give source_gradient, source_image, labels"):
        mpsx.NNLossGradientNode(x, sources=[x, x, t], loss_descriptor=d)
    with pytest.raises(ValueError, match="NNLossGradientNode: expected 3 or 4 sources .* given 2"):
        mpsx.NNLossGradientNode(sources=[x, t], loss_descriptor=d)


def test_arithmetic_gradient_nodes_from_the_forward_filter(device):
    """initWithGradientImages:forwardFilter:isSecondarySourceFilter: makes the node that the forward node's gradient
    filters are; gradientClass is their class."""
    left, right, g = mpsx.NNImageNode(), mpsx.NNImageNode(), mpsx.NNImageNode()
    for forward_cls, gradient_cls in ((mpsx.NNAdditionNode, mpsx.NNAdditionGradientNode),
                                      (mpsx.NNSubtractionNode, mpsx.NNSubtractionGradientNode),
                                      (mpsx.NNMultiplicationNode, mpsx.NNMultiplicationGradientNode)):
        node = forward_cls(left, right)
        assert node.gradient_class() is gradient_cls
        expected = node.gradient_filters_with_sources([g])
        for secondary in (False, True):
            made = gradient_cls(gradient_images=[g], forward_filter=node, is_secondary_source_filter=secondary)
            assert type(made) is gradient_cls and made.is_secondary_source_filter is secondary
            assert made.source_images == expected[secondary].source_images
            assert made.source_states == [node.result_state]
    for forward_cls in (mpsx.NNDivisionNode, mpsx.NNComparisonNode):
        assert forward_cls(left, right).gradient_class() is None
    node = mpsx.NNAdditionNode(left, right)
    with pytest.raises(TypeError, match="NNSubtractionGradientNode: forward_filter is a NNAdditionNode"):
        mpsx.NNSubtractionGradientNode(gradient_images=[g], forward_filter=node)
    with pytest.raises(TypeError, match="gradient_images and forward_filter go together"):
        mpsx.NNAdditionGradientNode(gradient_images=[g])
    with pytest.raises(TypeError, match="not both"):
        mpsx.NNAdditionGradientNode(g, gradient_images=[g], forward_filter=node)
    with pytest.raises(TypeError, match="forward_filter: expected an arithmetic node, given NNImageNode"):
        mpsx.NNAdditionGradientNode(gradient_images=[g], forward_filter=g)
    with pytest.raises(TypeError, match="gradient_state: expected an NNBinaryGradientStateNode, given NoneType"):
        mpsx.NNAdditionGradientNode(g, left)
    with pytest.raises(TypeError, match="NNArithmeticGradientNode is abstract"):
        mpsx.NNArithmeticGradientNode(gradient_images=[g], forward_filter=node)

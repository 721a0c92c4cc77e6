"""The graph nodes' class-method factories (+nodeWithSource:..., +nodeWithSourceGradient:..., +nodeWithLeftSource:...):
each makes the node its constructor makes from the same arguments (the same class, constructor arguments and
properties), whichever of MPS's forms of the factory is called."""

import numpy as np
import pytest

import mpsx


def weights(c_in=2, c_out=3):
    d = mpsx.CNNConvolutionDescriptor(3, 3, c_in, c_out)
    rng = np.random.default_rng(0)
    return mpsx.ConvolutionWeights(d, rng.standard_normal(d.weights_shape).astype(np.float32),
                                   np.zeros(c_out, np.float32))


def same_node(made, expected):
    assert type(made) is type(expected)
    a, b = made.__mpsx_state__(), expected.__mpsx_state__()
    assert (a["arguments"], a["keywords"]) == (b["arguments"], b["keywords"])
    assert a["properties"] == b["properties"]


def forward_cases():
    x, labels, w = mpsx.NNImageNode(), mpsx.NNImageNode(), mpsx.NNImageNode()
    data = weights()
    conv = mpsx.CNNConvolutionNode(x, data)
    transpose_data = weights(3, 2)
    loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    return [
        (mpsx.CNNConvolutionNode.node_with_source(x, data), mpsx.CNNConvolutionNode(x, data)),
        (mpsx.CNNFullyConnectedNode.node_with_source(x, data), mpsx.CNNFullyConnectedNode(x, data)),
        (mpsx.CNNConvolutionTransposeNode.node_with_source(x, conv.result_state, transpose_data),
         mpsx.CNNConvolutionTransposeNode(x, conv.result_state, transpose_data)),
        (mpsx.CNNPoolingMaxNode.node_with_source(x, 2), mpsx.CNNPoolingMaxNode(x, 2, 2)),
        (mpsx.CNNPoolingAverageNode.node_with_source(x, 3, 2), mpsx.CNNPoolingAverageNode(x, 3, 2)),
        (mpsx.CNNPoolingL2NormNode.node_with_source(x, 3, stride=1), mpsx.CNNPoolingL2NormNode(x, 3, 1)),
        (mpsx.CNNDilatedPoolingMaxNode.node_with_source(x, 3), mpsx.CNNDilatedPoolingMaxNode(x, 3, 3, 1)),
        (mpsx.CNNDilatedPoolingMaxNode.node_with_source(x, 3, 1, 2), mpsx.CNNDilatedPoolingMaxNode(x, 3, 1, 2)),
        (mpsx.NNAdditionNode.node_with_left_source(x, labels), mpsx.NNAdditionNode(x, labels)),
        (mpsx.NNMultiplicationNode.node_with_left_source(x, labels), mpsx.NNMultiplicationNode(x, labels)),
        (mpsx.CNNLossNode.node_with_source(x, loss), mpsx.CNNLossNode(x, loss)),
        (mpsx.NNForwardLossNode.node_with_source(x, labels, w, loss), mpsx.NNForwardLossNode(x, labels, w, loss)),
        (mpsx.NNForwardLossNode.node_with_source(x, labels, loss_descriptor=loss),
         mpsx.NNForwardLossNode(x, labels, None, loss)),
    ]


def gradient_cases():
    x, y, dy, labels = mpsx.NNImageNode(), mpsx.NNImageNode(), mpsx.NNImageNode(), mpsx.NNImageNode()
    data = weights()
    conv = mpsx.CNNConvolutionNode(x, data)
    transpose = mpsx.CNNConvolutionTransposeNode(x, conv.result_state, weights(3, 2))
    loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    forward_loss = mpsx.NNForwardLossNode(x, labels, None, loss)

    def g(forward):  # the gradient node's first three arguments, with the state of `forward`
        return [dy, x, forward.result_state]
    same = int(mpsx.NNPaddingMethod.SIZE_SAME)
    max_pool, dilated = mpsx.CNNPoolingMaxNode(x, 2), mpsx.CNNDilatedPoolingMaxNode(x, 3, 1, 2)
    spatial, local = mpsx.CNNSpatialNormalizationNode(x, 3), mpsx.CNNLocalContrastNormalizationNode(x, 3)
    cross, dropout = mpsx.CNNCrossChannelNormalizationNode(x, 3), mpsx.CNNDropoutNode(x, 0.25, 7, (1, 1, 0))
    concatenation, softmax = mpsx.NNConcatenationNode([x, y]), mpsx.CNNSoftMaxNode(x)
    log_softmax, addition = mpsx.CNNLogSoftMaxNode(x), mpsx.NNAdditionNode(x, y)
    nearest, bilinear = mpsx.CNNUpsamplingNearestNode(x, 2, 3), mpsx.CNNUpsamplingBilinearNode(x, 2, 3)
    return [
        (mpsx.CNNConvolutionGradientNode.node_with_source_gradient(dy, x, conv.result_state, data),
         mpsx.CNNConvolutionGradientNode(dy, x, conv.result_state, data)),
        (mpsx.CNNConvolutionTransposeGradientNode.node_with_source_gradient(dy, x, transpose.result_state, None),
         mpsx.CNNConvolutionTransposeGradientNode(dy, x, transpose.result_state, None)),
        (mpsx.CNNPoolingMaxGradientNode.node_with_source_gradient(*g(max_pool), 2, 2, 2, 2, same),
         mpsx.CNNPoolingMaxGradientNode(*g(max_pool), 2, 2, 2, 2, same)),
        (mpsx.CNNDilatedPoolingMaxGradientNode.node_with_source_gradient(*g(dilated), 3, 3, 1, 1, 2, 2),
         mpsx.CNNDilatedPoolingMaxGradientNode(*g(dilated), 3, 3, 1, 1, dilation_rate_x=2, dilation_rate_y=2)),
        (mpsx.CNNSpatialNormalizationGradientNode.node_with_source_gradient(*g(spatial), 3),
         mpsx.CNNSpatialNormalizationGradientNode(*g(spatial), 3)),
        (mpsx.CNNLocalContrastNormalizationGradientNode.node_with_source_gradient(*g(local), 3, 5),
         mpsx.CNNLocalContrastNormalizationGradientNode(*g(local), 3, 5)),
        (mpsx.CNNCrossChannelNormalizationGradientNode.node_with_source_gradient(*g(cross), 3),
         mpsx.CNNCrossChannelNormalizationGradientNode(*g(cross), 3)),
        (mpsx.CNNDropoutGradientNode.node_with_source_gradient(*g(dropout), 0.25, 7, (1, 1, 0)),
         mpsx.CNNDropoutGradientNode(*g(dropout), 0.25, 7, (1, 1, 0))),
        (mpsx.NNConcatenationGradientNode.node_with_source_gradient(*g(concatenation)),
         mpsx.NNConcatenationGradientNode(*g(concatenation))),
        # The softmax gradients read the forward result, not its source.
        (mpsx.CNNSoftMaxGradientNode.node_with_source_gradient(dy, softmax.result_image, softmax.result_state),
         mpsx.CNNSoftMaxGradientNode(dy, softmax.result_image, softmax.result_state)),
        (mpsx.CNNLogSoftMaxGradientNode.node_with_source_gradient(dy, log_softmax.result_image,
                                                                 log_softmax.result_state),
         mpsx.CNNLogSoftMaxGradientNode(dy, log_softmax.result_image, log_softmax.result_state)),
        (mpsx.CNNUpsamplingNearestGradientNode.node_with_source_gradient(*g(nearest), 2, 3),
         mpsx.CNNUpsamplingNearestGradientNode(*g(nearest), 2, 3)),
        (mpsx.CNNUpsamplingBilinearGradientNode.node_with_source_gradient(*g(bilinear), 2, 3),
         mpsx.CNNUpsamplingBilinearGradientNode(*g(bilinear), 2, 3)),
        (mpsx.NNAdditionGradientNode.node_with_source_gradient(*g(addition), True),
         mpsx.NNAdditionGradientNode(*g(addition), True)),
        (mpsx.NNLossGradientNode.node_with_source_gradient(dy, x, labels, gradient_state=forward_loss.result_state,
                                                          loss_descriptor=loss),
         mpsx.NNLossGradientNode(dy, x, labels, None, forward_loss.result_state, loss)),
    ]


@pytest.mark.parametrize("index", range(len(forward_cases())))
def test_a_forward_factory_makes_what_the_constructor_makes(index):
    same_node(*forward_cases()[index])


@pytest.mark.parametrize("index", range(len(gradient_cases())))
def test_a_gradient_factory_makes_what_the_constructor_makes(index):
    same_node(*gradient_cases()[index])


def test_the_dilated_pooling_gradient_factory_takes_the_dilation_in_mps_order():
    x, dy = mpsx.NNImageNode(), mpsx.NNImageNode()
    state = mpsx.CNNDilatedPoolingMaxNode(x, 3, 1, 2).result_state
    node = mpsx.CNNDilatedPoolingMaxGradientNode.node_with_source_gradient(dy, x, state, 3, 5, 1, 2, 4, 6)
    assert (node.kernel_width, node.kernel_height, node.stride_in_pixels_x, node.stride_in_pixels_y) == (3, 5, 1, 2)
    assert node.__mpsx_state__()["keywords"] == {"dilation_rate_x": 4, "dilation_rate_y": 6}


def test_factories_refuse_what_the_constructors_refuse():
    x = mpsx.NNImageNode()
    with pytest.raises(TypeError, match="source"):
        mpsx.CNNConvolutionNode.node_with_source(3, weights())
    with pytest.raises(ValueError):
        mpsx.CNNPoolingMaxNode.node_with_source(x, 0)
    with pytest.raises(TypeError):
        mpsx.NNAdditionNode.node_with_left_source(x, "right")


def test_a_graph_of_factory_made_nodes_computes_as_one_of_constructed_nodes(device):
    rng = np.random.default_rng(1)
    values = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    results = []
    for factory in (True, False):
        x = mpsx.NNImageNode()
        data = weights()
        conv = mpsx.CNNConvolutionNode.node_with_source(x, data) if factory else mpsx.CNNConvolutionNode(x, data)
        pool = mpsx.CNNPoolingMaxNode.node_with_source(conv.result_image, 2) if factory else \
            mpsx.CNNPoolingMaxNode(conv.result_image, 2, 2)
        add = mpsx.NNAdditionNode.node_with_left_source(pool.result_image, pool.result_image) if factory else \
            mpsx.NNAdditionNode(pool.result_image, pool.result_image)
        graph = mpsx.NNGraph(device, add.result_image)
        images = mpsx.ImageBatch.from_numpy(device, values)
        cb = device.command_queue.command_buffer()
        out = graph.encode_batch(cb, [images])
        out.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        results.append(out.to_numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_the_neuron_gradient_node_factory():
    x, dy = mpsx.NNImageNode(), mpsx.NNImageNode()
    descriptor = mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2.0, 1.0)
    state = mpsx.CNNNeuronNode(x, descriptor).result_state
    same_node(mpsx.CNNNeuronGradientNode.node_with_source_gradient(dy, x, state, descriptor),
              mpsx.CNNNeuronGradientNode(dy, x, state, descriptor))


def test_the_dilated_pooling_gradient_node_reports_its_dilation():
    x, dy = mpsx.NNImageNode(), mpsx.NNImageNode()
    state = mpsx.CNNDilatedPoolingMaxNode(x, 3, 1, 2).result_state
    node = mpsx.CNNDilatedPoolingMaxGradientNode(dy, x, state, 3, 3, 1, 1, dilation_rate_x=2, dilation_rate_y=3)
    assert (node.dilation_rate_x, node.dilation_rate_y) == (2, 3)


@pytest.mark.parametrize("form", ["image", "image needed", "images"])
def test_the_graph_factories_make_the_graph_the_constructor_makes(device, form):
    rng = np.random.default_rng(2)
    values = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    outputs = []
    for factory in (True, False):
        x = mpsx.NNImageNode()
        node = mpsx.CNNNeuronNode(x, mpsx.NNNeuronDescriptor(mpsx.NeuronType.LINEAR, 2.0, 1.0))
        arguments = {"image": ((device, node.result_image), {}),
                     "image needed": ((device, node.result_image, True), {}),
                     "images": ((device,), {"result_images": [node.result_image], "results_are_needed": [True]})}[form]
        make = mpsx.NNGraph.graph_with_device if factory else mpsx.NNGraph
        graph = make(*arguments[0], **arguments[1])
        assert type(graph) is mpsx.NNGraph
        cb = device.command_queue.command_buffer()
        out = graph.encode(cb, [mpsx.Image.from_numpy(device, values)])
        out = out[0] if isinstance(out, list) else out
        out.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        outputs.append(out.to_numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_allclose(outputs[0], 2.0 * values + 1.0, rtol=1e-2, atol=1e-2)  # float16 graph images

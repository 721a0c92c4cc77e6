"""The three weight-update styles of MPSCNNConvolutionGradientState (seed
000): a small conv + batch norm + ReLU + fully connected model trained a few
steps each way. The loss goes down and the weights equal PyTorch's plain SGD
from the same start."""

import numpy as np
import pytest
import torch

import mpsx
from mpsx.benchmarks.reference_cnn import HostSGD
from helpers import GammaAndBeta, one_hot_labels

N, C_IN, C, SIZE, CLASSES, LR, STEPS = 4, 2, 4, 6, 3, 0.1, 4
EPSILON = 1e-5


def start(seed=3):
    rng = np.random.default_rng(seed)
    return dict(
        conv_w=(rng.standard_normal((C, 3, 3, C_IN)) * 0.3).astype(np.float32),
        conv_b=(rng.standard_normal(C) * 0.1).astype(np.float32),
        gamma=(1 + rng.standard_normal(C) * 0.1).astype(np.float32),
        beta=(rng.standard_normal(C) * 0.1).astype(np.float32),
        fc_w=(rng.standard_normal((CLASSES, SIZE, SIZE, C)) * 0.1).astype(np.float32),
        fc_b=np.zeros(CLASSES, np.float32))


def batch(seed=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = one_hot_labels(rng, N, CLASSES)
    return x, labels


def torch_trajectory(p, x, labels, bn=None):
    """Parameters after every step of plain SGD in PyTorch (OHWI weights); bn, the normalization layer, is
    BatchNorm2d unless given."""
    conv = torch.nn.Conv2d(C_IN, C, 3, padding=1)
    conv.weight.data = torch.tensor(p["conv_w"]).permute(0, 3, 1, 2).contiguous()
    conv.bias.data = torch.tensor(p["conv_b"])
    if bn is None:
        bn = torch.nn.BatchNorm2d(C, eps=EPSILON)
    bn.weight.data, bn.bias.data = torch.tensor(p["gamma"]), torch.tensor(p["beta"])
    fc = torch.nn.Linear(SIZE * SIZE * C, CLASSES)
    fc.weight.data = torch.tensor(p["fc_w"]).reshape(CLASSES, -1)
    fc.bias.data = torch.tensor(p["fc_b"])
    parameters = [conv.weight, conv.bias, bn.weight, bn.bias, fc.weight, fc.bias]
    optimizer = torch.optim.SGD(parameters, lr=LR)
    target = torch.tensor(labels.reshape(N, -1).argmax(1))
    trajectory, losses = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        h = torch.relu(bn(conv(torch.tensor(x))))
        loss = torch.nn.functional.cross_entropy(fc(h.permute(0, 2, 3, 1).reshape(N, -1)), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        trajectory.append(dict(
            conv_w=conv.weight.detach().permute(0, 2, 3, 1).numpy().copy(), conv_b=conv.bias.detach().numpy().copy(),
            gamma=bn.weight.detach().numpy().copy(), beta=bn.bias.detach().numpy().copy(),
            fc_w=fc.weight.detach().reshape(CLASSES, SIZE, SIZE, C).numpy().copy(),
            fc_b=fc.bias.detach().numpy().copy()))
    return trajectory, losses


class NormalizationSource(GammaAndBeta, mpsx.CNNBatchNormalizationDataSource):
    epsilon = EPSILON

    def __init__(self, gamma, beta):
        self.g, self.b = gamma.copy(), beta.copy()

    def update_gamma_and_beta_with_batch_normalization_state(self, state):  # style 2
        self.g = state.gamma.to_numpy() - LR * state.gradient_for_gamma.to_numpy()
        self.b = state.beta.to_numpy() - LR * state.gradient_for_beta.to_numpy()
        return True


class Model:
    """The kernels of one model and one training step, hand-encoded."""

    def __init__(self, device, conv_source, bn_source, fc_source):
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        self.device = device
        self.conv = mpsx.CNNConvolution(device, conv_source)
        self.conv_gradient = mpsx.CNNConvolutionGradient(device, conv_source)
        self.conv_gradient.gradient_option = mpsx.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
        self.bn = mpsx.CNNBatchNormalization(device, bn_source)
        self.statistics = mpsx.CNNBatchNormalizationStatistics(device)
        self.statistics_gradient = mpsx.CNNBatchNormalizationStatisticsGradient(device)
        self.bn_gradient = mpsx.CNNBatchNormalizationGradient(device)
        self.relu = mpsx.CNNNeuron(device, relu)
        self.relu_gradient = mpsx.CNNNeuronGradient(device, relu)
        self.fc = mpsx.CNNFullyConnected(device, fc_source)
        self.fc_gradient = mpsx.CNNFullyConnectedGradient(device, fc_source)
        d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        d.reduce_across_batch = True
        self.loss = mpsx.CNNLoss(device, d)

    def encode(self, cb, x, labels):
        """Forward, loss and backward; returns the states that hold the gradients."""
        y, conv_states = self.conv.encode_batch(cb, x, destination_states=True)
        bn_state = self.bn.result_state(y)
        self.statistics.encode_batch(cb, y, bn_state)
        z = self.bn.encode_batch(cb, y, batch_normalization_state=bn_state)
        h, relu_states = self.relu.encode_batch(cb, z, destination_states=True)
        logits, fc_states = self.fc.encode_batch(cb, h, destination_states=True)
        g = self.loss.encode_batch(cb, logits, labels)
        g = self.fc_gradient.encode_batch(cb, g, h, fc_states)
        g = self.relu_gradient.encode_batch(cb, g, z, relu_states)
        self.statistics_gradient.encode_batch(cb, g, y, bn_state)
        g = self.bn_gradient.encode_batch(cb, g, y, bn_state)
        self.conv_gradient.encode_batch(cb, g, x, conv_states)
        return conv_states[0], bn_state, fc_states[0]


def descriptors():
    return mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C), mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES)


def check(trajectory, losses, expected_trajectory, expected_losses):
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-4)
    assert losses[-1] < losses[0]
    for got, expected in zip(trajectory, expected_trajectory):
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5, err_msg=name)


def python_sourced_model(device, p, source=NormalizationSource, model=Model):
    """The model (a Model unless given) over Python data sources holding the parameters p, its normalization
    data source a `source`."""
    conv_d, fc_d = descriptors()
    conv_src = HostSGD(conv_d, p["conv_w"], p["conv_b"], learning_rate=LR)
    fc_src = HostSGD(fc_d, p["fc_w"], p["fc_b"], learning_rate=LR)
    bn_src = source(p["gamma"], p["beta"])
    return conv_src, bn_src, fc_src, model(device, conv_src, bn_src, fc_src)


def train_with_host_updates(device, x, labels, conv_src, bn_src, fc_src, model):
    """STEPS steps that read the synchronized gradients after completion, update the data sources on the host,
    then reload the kernels from them; returns the parameters after each step, and the losses."""
    images = mpsx.ImageBatch.from_numpy(device, x)
    trajectory, losses = [], []
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        loss_labels = mpsx.CNNLossLabels(device, labels)
        states = model.encode(cb, images, loss_labels)
        for state in states + (loss_labels,):
            state.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        conv_state, bn_state, fc_state = states
        for src, state in ((conv_src, conv_state), (fc_src, fc_state)):
            src.w = src.w - LR * state.gradient_for_weights.to_numpy()
            src.b = src.b - LR * state.gradient_for_biases.to_numpy()
        bn_src.g = bn_src.g - LR * bn_state.gradient_for_gamma.to_numpy()
        bn_src.b = bn_src.b - LR * bn_state.gradient_for_beta.to_numpy()
        model.conv.reload_weights_and_biases_from_data_source()
        model.fc.reload_weights_and_biases_from_data_source()
        model.bn.reload_gamma_and_beta_from_data_source()
        losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
        trajectory.append(dict(conv_w=conv_src.w, conv_b=conv_src.b, gamma=bn_src.g, beta=bn_src.b, fc_w=fc_src.w,
                               fc_b=fc_src.b))
    return trajectory, losses


def test_style_1_host_update_then_reload_from_data_source(device):
    """Read the synchronized gradients after completion, update the data
    sources on the host, then reload the kernels from them."""
    p = start()
    x, labels = batch()
    trajectory, losses = train_with_host_updates(device, x, labels, *python_sourced_model(device, p))
    check(trajectory, losses, *torch_trajectory(p, x, labels))


def train_with_update_encodes(device, model, x, labels, parameters):
    """STEPS steps whose updates the kernels encode themselves
    (encode_weights_and_bias_update, encode_gamma_and_beta_update); returns
    parameters() after each step, and the losses."""
    images = mpsx.ImageBatch.from_numpy(device, x)
    trajectory, losses = [], []
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        loss_labels = mpsx.CNNLossLabels(device, labels)
        conv_state, bn_state, fc_state = model.encode(cb, images, loss_labels)
        model.conv.encode_weights_and_bias_update(cb, conv_state)
        model.fc.encode_weights_and_bias_update(cb, fc_state)
        model.bn.encode_gamma_and_beta_update(cb, bn_state)
        loss_labels.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
        trajectory.append(parameters())
    return trajectory, losses


def test_style_2_data_source_update(device):
    """The data sources' update methods, called by the runtime once each
    command buffer has completed (MPS's CPU training style)."""
    p = start()
    x, labels = batch()
    conv_src, bn_src, fc_src, model = python_sourced_model(device, p)
    trajectory, losses = train_with_update_encodes(device, model, x, labels, lambda: dict(
        conv_w=conv_src.w, conv_b=conv_src.b, gamma=bn_src.g, beta=bn_src.b, fc_w=fc_src.w, fc_b=fc_src.b))
    check(trajectory, losses, *torch_trajectory(p, x, labels))


def test_style_3_update_encoded_on_the_command_buffer(device):
    """An optimizer encoded on the command buffer writes the new weights into
    a state the kernels reload on the same command buffer: no host round trip."""
    p = start()
    x, labels = batch()
    conv_d, fc_d = descriptors()
    conv_src = mpsx.ConvolutionWeights(conv_d, p["conv_w"], p["conv_b"])
    fc_src = mpsx.ConvolutionWeights(fc_d, p["fc_w"], p["fc_b"])
    bn_src = mpsx.BatchNormalizationWeights(p["gamma"], p["beta"], np.zeros(C, np.float32), np.ones(C, np.float32),
                                            EPSILON)
    model = Model(device, conv_src, bn_src, fc_src)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    images = mpsx.ImageBatch.from_numpy(device, x)
    cb = device.command_queue.command_buffer()
    conv_weights = model.conv.export_weights_and_biases(cb)
    fc_weights = model.fc.export_weights_and_biases(cb)
    gamma_and_beta = mpsx.CNNNormalizationGammaAndBetaState(device, p["gamma"], p["beta"])
    cb.commit()
    cb.wait_until_completed()
    trajectory, losses = [], []
    for _ in range(STEPS):
        cb = device.command_queue.command_buffer()
        loss_labels = mpsx.CNNLossLabels(device, labels)
        conv_state, bn_state, fc_state = model.encode(cb, images, loss_labels)
        for kernel, state, weights in ((model.conv, conv_state, conv_weights), (model.fc, fc_state, fc_weights)):
            sgd.encode(cb, convolution_gradient_state=state, convolution_source_state=weights, result_state=weights)
            kernel.reload_weights_and_biases(cb, weights)
        sgd.encode(cb, batch_normalization_state=bn_state, result_state=gamma_and_beta)
        model.bn.reload_gamma_and_beta(cb, gamma_and_beta)
        for state in (conv_weights, fc_weights, gamma_and_beta, loss_labels):
            state.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        losses.append(float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0]))
        # copy=True: on the cpu device to_numpy() is a view, which the next step overwrites.
        trajectory.append(dict(
            conv_w=conv_weights.weights.to_numpy(copy=True).reshape(p["conv_w"].shape),
            conv_b=conv_weights.biases.to_numpy(copy=True), gamma=gamma_and_beta.gamma.to_numpy(copy=True),
            beta=gamma_and_beta.beta.to_numpy(copy=True),
            fc_w=fc_weights.weights.to_numpy(copy=True).reshape(p["fc_w"].shape),
            fc_b=fc_weights.biases.to_numpy(copy=True)))
    check(trajectory, losses, *torch_trajectory(p, x, labels))


def test_native_data_sources_with_optimizers(device):
    """ConvolutionWeights and BatchNormalizationWeights that carry an
    optimizer: the whole update stays native."""
    p = start()
    x, labels = batch()
    conv_d, fc_d = descriptors()
    sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=LR)
    conv_src = mpsx.ConvolutionWeights(conv_d, p["conv_w"], p["conv_b"], optimizer=sgd())
    fc_src = mpsx.ConvolutionWeights(fc_d, p["fc_w"], p["fc_b"], optimizer=sgd())
    bn_src = mpsx.BatchNormalizationWeights(p["gamma"], p["beta"], np.zeros(C, np.float32), np.ones(C, np.float32),
                                            EPSILON, optimizer=sgd())
    model = Model(device, conv_src, bn_src, fc_src)
    trajectory, losses = train_with_update_encodes(device, model, x, labels, lambda: dict(
        conv_w=conv_src.weights(), conv_b=conv_src.bias_terms(), gamma=bn_src.gamma(), beta=bn_src.beta(),
        fc_w=fc_src.weights(), fc_b=fc_src.bias_terms()))
    check(trajectory, losses, *torch_trajectory(p, x, labels))

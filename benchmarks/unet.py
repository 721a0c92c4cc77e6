"""A tiny U-Net built from NNGraph nodes and trained through an NNGraph made
by training_graph, and the same model in PyTorch. examples/train_unet_graph.py
trains it; tests/test_examples.py checks it against PyTorch.

Input N x 1 x S x S (S even), C channels inside:

    e = ReLU(BN(conv3x3 1->C))                  encoder (batch statistics)
    d = maxpool2x2(e)
    r = d + ReLU(conv3x3 C->C)(d)               bottleneck with a residual addition
    u = upsample x2 (bilinear or nearest)(r)
    h = ReLU(conv3x3 2C->C)(concat(e, u))       the skip joins the upsampled path
    logits = conv1x1 C->2 (h)                   per-pixel class scores
    loss = softmax cross entropy over the channels of each pixel, mean over
           every pixel of the batch

Every weight, bias, gamma and beta trains on the device with SGD momentum
(ConvolutionWeights / BatchNormalizationWeights with an optimizer, training
style GPU). The task (synthetic_batch) is per-pixel: is the pixel above the
mean of its 3x3 neighbourhood?
"""

import numpy as np

import mpsx


CLASSES = 2
EPSILON = 1e-5


def initial_parameters(channels=8, seed=0):
    """PyTorch's default initialization, drawn with numpy: weights (OHWI) and
    biases uniform in +-1/sqrt(fan_in), gamma 1, beta 0."""
    rng = np.random.default_rng(seed)
    p = {}
    for name, (k, cin, cout) in layers(channels).items():
        bound = 1 / np.sqrt(cin * k * k)
        p[f"{name}.weight"] = rng.uniform(-bound, bound, (cout, k, k, cin)).astype(np.float32)
        p[f"{name}.bias"] = rng.uniform(-bound, bound, cout).astype(np.float32)
    p["bn.gamma"] = np.ones(channels, np.float32)
    p["bn.beta"] = np.zeros(channels, np.float32)
    return p


def layers(channels):
    """The convolutions: name -> (kernel size, input channels, output channels)."""
    return {"enc": (3, 1, channels), "mid": (3, channels, channels), "dec": (3, 2 * channels, channels),
            "head": (1, channels, CLASSES)}


def synthetic_batch(batch_size, size=16, seed=1):
    """Random images (N, 1, S, S) and one-hot per-pixel labels (N, 2, S, S):
    class 1 where a pixel is above the mean of its 3x3 neighbourhood (zeros
    beyond the edge), class 0 elsewhere."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch_size, 1, size, size)).astype(np.float32)
    padded = np.pad(images[:, 0], ((0, 0), (1, 1), (1, 1)))
    mean = sum(padded[:, i:i + size, j:j + size] for i in range(3) for j in range(3)) / 9
    above = (images[:, 0] > mean).astype(np.float32)
    labels = np.stack([1 - above, above], axis=1)
    return images, labels


class GraphUNet:
    """The U-Net as an NNGraph made with training_graph; each train_step is
    one graph encode (forward, loss, backward, SGD updates) on one command
    buffer. `format` is the graph's image format (float32 here; MPS's default
    is float16)."""

    def __init__(self, device, batch_size, size=16, channels=8, learning_rate=0.05, momentum=0.9, seed=0,
                 upsampling="bilinear", format=mpsx.DataType.FLOAT32):
        if upsampling not in ("bilinear", "nearest"):
            raise ValueError(f"upsampling must be 'bilinear' or 'nearest', given {upsampling!r}")
        if size % 2:
            raise ValueError(f"size must be even (2x2 pooling, then x2 upsampling), given {size}")
        self.device, self.batch_size, self.size, self.channels = device, batch_size, size, channels
        self.upsampling = upsampling
        self.initial_parameters = p = initial_parameters(channels, seed)
        sgd = lambda: mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=learning_rate,
                                                                momentum_scale=momentum)
        self.weights = {}
        for name, (k, cin, cout) in layers(channels).items():
            self.weights[name] = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(k, k, cin, cout),
                                                         p[f"{name}.weight"], p[f"{name}.bias"], optimizer=sgd())
        self.bn_weights = mpsx.BatchNormalizationWeights(p["bn.gamma"], p["bn.beta"], np.zeros(channels, np.float32),
                                                         np.ones(channels, np.float32), EPSILON, optimizer=sgd())
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        images = mpsx.NNImageNode(mpsx.NNHandle("images"))
        enc = mpsx.CNNConvolutionNode(images, self.weights["enc"])
        bn = mpsx.CNNBatchNormalizationNode(enc.result_image, self.bn_weights)
        e = mpsx.CNNNeuronNode(bn.result_image, relu).result_image
        d = mpsx.CNNPoolingMaxNode(e, 2).result_image
        mid = mpsx.CNNConvolutionNode(d, self.weights["mid"])
        residual = mpsx.NNAdditionNode(d, mpsx.CNNNeuronNode(mid.result_image, relu).result_image)
        if upsampling == "bilinear":
            up = mpsx.CNNUpsamplingBilinearNode(residual.result_image, 2, 2)
        else:
            up = mpsx.CNNUpsamplingNearestNode(residual.result_image, 2, 2)
        skip = mpsx.NNConcatenationNode([e, up.result_image])
        dec = mpsx.CNNConvolutionNode(skip.result_image, self.weights["dec"])
        head = mpsx.CNNConvolutionNode(mpsx.CNNNeuronNode(dec.result_image, relu).result_image, self.weights["head"])
        descriptor = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        descriptor.reduce_across_batch = True  # the mean over every pixel of the batch
        loss = mpsx.CNNLossNode(head.result_image, descriptor)
        loss.input_labels.handle = mpsx.NNHandle("labels")
        self.nodes = dict(enc=enc, bn=bn, mid=mid, residual=residual, up=up, skip=skip, dec=dec, head=head, loss=loss)
        self.graph = mpsx.NNGraph(device, loss.training_graph()[0].result_image, False, format=format)
        self.inputs = mpsx.ImageBatch(device, mpsx.ImageDescriptor(width=size, height=size, feature_channels=1,
                                                                   number_of_images=batch_size))

    def train_step(self, images, labels):
        """One step on numpy images (N, 1, S, S) and one-hot labels (N, 2, S, S); waits and returns its loss."""
        self.inputs.write(images)
        loss_labels = mpsx.CNNLossLabels(self.device, labels)
        cb = self.device.command_queue.command_buffer()
        self.graph.encode_batch(cb, [self.inputs], [loss_labels])
        loss_labels.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        if cb.status != "completed":
            raise cb.error
        return float(loss_labels.loss_image().to_numpy()[0, 0, 0, 0])

    def parameters(self):
        """The current weights (OHWI), biases, gamma and beta, as initial_parameters names them."""
        p = {}
        for name, w in self.weights.items():
            p[f"{name}.weight"], p[f"{name}.bias"] = w.weights(), w.bias_terms()
        p["bn.gamma"], p["bn.beta"] = self.bn_weights.gamma(), self.bn_weights.beta()
        return p


class TorchUNet:
    """The same model and SGD in PyTorch (float64 on the CPU by default)."""

    def __init__(self, parameters, learning_rate=0.05, momentum=0.9, upsampling="bilinear", dtype=None):
        import torch
        self.torch = torch
        dtype = dtype or torch.float64
        self.params = {}
        for name, value in parameters.items():
            t = torch.tensor(value, dtype=dtype)
            if name.endswith(".weight"):
                t = t.permute(0, 3, 1, 2).contiguous()  # OHWI -> OIHW
            self.params[name] = t.requires_grad_()
        self.upsampling = upsampling
        self.dtype = dtype
        self.optimizer = torch.optim.SGD(list(self.params.values()), lr=learning_rate, momentum=momentum)

    def forward(self, images):
        """The per-pixel class scores (N, 2, S, S)."""
        F, p = self.torch.nn.functional, self.params
        conv = lambda x, name, padding: F.conv2d(x, p[f"{name}.weight"], p[f"{name}.bias"], padding=padding)
        x = self.torch.as_tensor(images, dtype=self.dtype)
        channels = p["bn.gamma"].shape[0]
        e = F.relu(F.batch_norm(conv(x, "enc", 1), self.torch.zeros(channels, dtype=self.dtype),
                                self.torch.ones(channels, dtype=self.dtype), p["bn.gamma"], p["bn.beta"],
                                training=True, eps=EPSILON))
        d = F.max_pool2d(e, 2)
        r = d + F.relu(conv(d, "mid", 1))
        if self.upsampling == "bilinear":
            u = F.interpolate(r, scale_factor=2, mode="bilinear", align_corners=False)
        else:
            u = F.interpolate(r, scale_factor=2, mode="nearest")
        h = F.relu(conv(self.torch.cat([e, u], dim=1), "dec", 1))
        return conv(h, "head", 0)

    def train_step(self, images, labels):
        """One SGD step; returns the loss before it."""
        self.optimizer.zero_grad(set_to_none=True)
        target = self.torch.as_tensor(labels.argmax(1))
        loss = self.torch.nn.functional.cross_entropy(self.forward(images), target)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def parameters(self):
        """The current values, named and laid out (OHWI) as GraphUNet.parameters."""
        out = {}
        for name, t in self.params.items():
            t = t.detach()
            out[name] = (t.permute(0, 2, 3, 1) if name.endswith(".weight") else t).numpy().copy()
        return out

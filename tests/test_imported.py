"""mpsx.from_torch: PyTorch modules as NNGraphs of MPS nodes, their forward passes against PyTorch's (eval mode,
float32, 1e-4 relative), their data sources and state_dicts in PyTorch's layouts, and the refusals, on every
device."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import mpsx  # noqa: E402

RTOL = 1e-4


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, with its module names (torchvision's wheels here need a CUDA torch)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision.models.resnet18(weights=None)'s layers and names, at a width of `width` (64 in torchvision)."""

    def __init__(self, width=64, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [width, width * 2, width * 4, width * 8]
        cin = width
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, stride), BasicBlock(w, w, 1)))
            cin = w
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def vgg_stack():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2, 2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                         nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
                         nn.Dropout(0.5), nn.Linear(64, 10))


class MobileNetBlock(nn.Module):
    """MobileNet V2's inverted residual: 1x1 expansion, 3x3 depthwise (groups = channels), 1x1 projection."""

    def __init__(self, channels=16, expansion=4, stride=1):
        super().__init__()
        hidden = channels * expansion
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.stride = stride

    def forward(self, x):
        out = self.project(self.depthwise(self.expand(x)))
        return x + out if self.stride == 1 else out


class MobileNetStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 2, 1, bias=False)  # its bias would have no gradient (the blocks normalize)
        self.block1 = MobileNetBlock(16, 4, 1)
        self.block2 = MobileNetBlock(16, 4, 2)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.head(x.mean((2, 3)))


class TinyUNet(nn.Module):
    """Two levels: convolutions, max pooling down, nearest and bilinear upsampling up, channel concatenations."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.bottom = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.up2 = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec2 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.ReLU())
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d2 = self.dec2(torch.cat([self.up2(self.bottom(e2)), e2], 1))
        return self.dec1(torch.cat([self.up1(d2), e1], dim=1))


def randomize_batch_normalization(module, seed=0):
    """Running statistics and affine parameters away from their initial values, so that a layout or a
    statistic mixed up shows."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.num_features, generator=g) - 0.5)
    return module


def forward(device, imported, x):
    graph = imported.inference_graph()
    cb = device.command_queue.command_buffer()
    result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    return result.to_numpy()


def assert_forward_matches(device, module, x):
    torch.manual_seed(0)
    module.eval()
    imported = mpsx.from_torch(module, torch.from_numpy(x), device)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    got = forward(device, imported, x).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())
    return imported


def batch(n, size, seed=1, channels=3):
    return np.random.default_rng(seed).standard_normal((n, channels, size, size)).astype(np.float32)


@pytest.mark.parametrize("model, size", [("resnet18", 32), ("vgg", 16), ("mobilenet", 16), ("unet", 16)])
def test_an_imported_model_computes_its_forward_pass_as_pytorch_does(device, model, size):
    torch.manual_seed(0)
    module = {"resnet18": lambda: ResNet18(width=16), "vgg": vgg_stack, "mobilenet": MobileNetStack,
              "unet": TinyUNet}[model]()
    assert_forward_matches(device, randomize_batch_normalization(module), batch(2, size))


def test_torchvision_resnet18_where_torchvision_runs(device):
    models = pytest.importorskip("torchvision.models", reason="torchvision's wheels need a CUDA build of torch")
    torch.manual_seed(0)
    module = randomize_batch_normalization(models.resnet18(weights=None))
    assert_forward_matches(device, module, batch(2, 32))


# Kernel, stride, padding, dilation, groups: PyTorch's symmetric padding maps to MPS's ValidOnly, Same and Full
# padding policies where they place the windows alike, and to an NNPadNode before the convolution elsewhere.
CONVOLUTIONS = [(3, 1, 1, 1, 1), (3, 2, 1, 1, 1), (7, 2, 3, 1, 1), (1, 2, 0, 1, 1), (3, 2, 0, 1, 1), (2, 2, 0, 1, 1),
                (3, 1, 2, 2, 1), (5, 2, 2, 1, 1), (3, 1, 2, 1, 1), (3, 3, 1, 1, 1), (4, 2, 1, 1, 1), (3, 2, 2, 1, 1),
                (3, 1, 1, 1, 4), (3, 2, 1, 1, 8), ((3, 1), (2, 1), (1, 0), 1, 1)]


@pytest.mark.parametrize("kernel, stride, padding, dilation, groups", CONVOLUTIONS)
@pytest.mark.parametrize("size", [11, 12])
def test_convolution_padding_strides_dilations_and_groups(device, kernel, stride, padding, dilation, groups, size):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(8, 8, kernel, stride, padding, dilation, groups))
    imported = assert_forward_matches(device, module, batch(2, size, channels=8))
    assert sorted(imported.data_sources) == ["0"]


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(2), nn.MaxPool2d(3, 1, 1), nn.MaxPool2d(3, 2),
                                  nn.AvgPool2d(2), nn.AvgPool2d(3, 1, 1), nn.AvgPool2d(3, 2, 1),
                                  nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                                  nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.AdaptiveAvgPool2d(1)],
                         ids=repr)
@pytest.mark.parametrize("size", [9, 10])
def test_pooling_as_pytorch_pools(device, pool, size):
    assert_forward_matches(device, nn.Sequential(pool), batch(2, size))


@pytest.mark.parametrize("activation", [nn.ReLU(), nn.LeakyReLU(0.2), nn.ReLU6(), nn.ELU(0.7), nn.Sigmoid(), nn.Tanh(),
                                        nn.Hardsigmoid(), nn.Softsign(), nn.Softplus(2.0, threshold=100), nn.GELU()],
                         ids=repr)
def test_activations_as_mps_neurons(device, activation):
    x = batch(2, 6) * 3
    assert_forward_matches(device, nn.Sequential(nn.Conv2d(3, 4, 1), activation), x)


class Functional(nn.Module):
    """Functions and tensor methods rather than modules: relu, sigmoid, subtraction, multiplication, softmax and
    log-softmax over the channels, a view to flatten."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        a, b = torch.relu(self.a(x)), self.b(x).sigmoid()
        y = torch.softmax((a - b) * b, dim=1)
        z = self.fc(y.view(y.size(0), -1))
        return torch.nn.functional.log_softmax(z, dim=1)


@pytest.mark.parametrize("normalization", [nn.GroupNorm(2, 8), nn.GroupNorm(4, 8, affine=False),
                                           nn.InstanceNorm2d(8), nn.InstanceNorm2d(8, affine=True),
                                           nn.LocalResponseNorm(3, alpha=0.2, beta=0.75, k=1.5),
                                           nn.LocalResponseNorm(4)], ids=repr)
def test_group_instance_and_local_response_normalization(device, normalization):
    torch.manual_seed(0)
    if getattr(normalization, "affine", False):
        with torch.no_grad():
            normalization.weight.uniform_(0.5, 1.5)
            normalization.bias.uniform_(-0.5, 0.5)
    module = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), normalization)
    imported = assert_forward_matches(device, module, batch(2, 6))
    expected = {k: v.numpy() for k, v in module.state_dict().items()}
    assert sorted(imported.state_dict()) == sorted(expected)
    for name, value in imported.state_dict().items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)


def test_functions_and_methods(device):
    assert_forward_matches(device, Functional(), batch(3, 6))


def test_data_sources_hold_the_parameters_in_mps_layouts_and_state_dict_gives_them_back(device):
    torch.manual_seed(0)
    module = randomize_batch_normalization(vgg_stack())
    imported = mpsx.from_torch(module, torch.zeros(1, 3, 16, 16), device)
    assert sorted(imported.data_sources) == ["0", "1", "11", "14", "3", "6", "7"]
    conv = imported.data_sources["0"]
    assert isinstance(conv, mpsx.ConvolutionWeights)
    # OHWI: output channel, kernel row, kernel column, input channel.
    np.testing.assert_array_equal(conv.weights(), module[0].weight.detach().numpy().transpose(0, 2, 3, 1))
    fc = imported.data_sources["11"]
    # PyTorch flattens (C, H, W); the fully connected kernel reads H x W x C.
    np.testing.assert_array_equal(
        fc.weights(), module[11].weight.detach().numpy().reshape(64, 32, 4, 4).transpose(0, 2, 3, 1))
    bn = imported.data_sources["1"]
    np.testing.assert_array_equal(bn.mean(), module[1].running_mean.numpy())
    assert bn.momentum == pytest.approx(0.1) and bn.epsilon == pytest.approx(1e-5)
    expected = {k: v.numpy() for k, v in module.state_dict().items()}
    got = imported.state_dict()
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert got[name].dtype == expected[name].dtype, name
    assert [h.label for h in imported.source_handles] == ["input"]


class Refused(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.what = what
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        if self.what == "transpose":
            return x.transpose(2, 3)
        if self.what == "scalar":
            return x + 1.0
        if self.what == "ceil":
            return nn.functional.max_pool2d(x, 2, ceil_mode=True)
        if self.what == "reflect":
            return nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
        return x


@pytest.mark.parametrize("what, message", [
    ("transpose", "transpose .*no NNGraph node for this method"),
    ("scalar", "add of a tensor and a number"),
    ("ceil", "max_pool2d.*pooling as a function"),
    ("reflect", "pad .*no NNGraph node for this function"),
])
def test_an_operation_mpsx_cannot_express_is_named_with_its_node(device, what, message):
    with pytest.raises(mpsx.UnsupportedOperationError, match=message):
        mpsx.from_torch(Refused(what), torch.zeros(1, 3, 8, 8), device)


@pytest.mark.parametrize("module, message", [
    (nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), "padding_mode 'reflect'"),
    (nn.MaxPool2d(2, ceil_mode=True), "ceil_mode"),
    (nn.MaxPool2d(3, 3, 1), r"max pooling with padding \(1, 1\)"),
    (nn.BatchNorm2d(3, momentum=None), "cumulative average"),
    (nn.InstanceNorm2d(3, track_running_stats=True), "instance normalization with running statistics"),
    (nn.Dropout2d(), "channel dropout"),
    (nn.GELU(approximate="tanh"), "tanh approximation"),
    (nn.AdaptiveAvgPool2d(2), "only to 1 x 1"),
    (nn.Upsample(scale_factor=1.5), "whole scale factors"),
])
def test_module_settings_mpsx_cannot_express_are_refused(device, module, message):
    with pytest.raises(mpsx.UnsupportedOperationError, match=message):
        mpsx.from_torch(nn.Sequential(module), torch.zeros(1, 3, 9, 9), device)


def small_classifier():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


class SourceBlock(nn.Module):
    """A residual block straight on the source image, which its two convolutions read: the training graph has two
    terminal gradient filters (nothing sums the source's gradients)."""

    def __init__(self):
        super().__init__()
        self.block = BasicBlock(3, 8, 2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.block(x), 1))


# ResNet-18 at 64 x 64: layer4's batch statistics over 2 x 2 pixels of 4 images (at 32 x 32, over 4 values, the
# batch normalization gradient is too ill-conditioned for 5 steps to agree).
def normalization_stack():
    """Group normalization, local response normalization, instance normalization with and without gamma and
    beta."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.ReLU(),
                         nn.LocalResponseNorm(3, alpha=0.2, beta=0.75, k=1.5),
                         nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.InstanceNorm2d(8, affine=True), nn.ReLU(),
                         nn.Conv2d(8, 4, 1), nn.InstanceNorm2d(4), nn.Flatten(), nn.Linear(4 * 8 * 8, 10))


def train_both(device, graph, module, optimizer, steps, size, rng):
    """`steps` steps of 4 random images of `size` and classes of 10 through the training graph (per-image one-hot
    labels) and through PyTorch's loop (cross entropy, mean over the batch) with `optimizer`."""
    module.train()
    for _ in range(steps):
        x = rng.standard_normal((4, 3, size, size)).astype(np.float32)
        y = rng.integers(0, 10, 4)
        labels = [mpsx.CNNLossLabels(device, np.eye(10, dtype=np.float32)[[c]].reshape(10, 1, 1)) for c in y]
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [labels])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        optimizer.zero_grad()
        nn.functional.cross_entropy(module(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        optimizer.step()


# MobileNet's ReLU6 saturates channels on some steps: Adam then turns their rounding into whole steps (SGD only).
@pytest.mark.parametrize("optimizer, model, size", [
    (optimizer, model, size) for model, size in (("small", 8), ("source_block", 8), ("normalizations", 8),
                                                 ("mobilenet", 16), ("resnet18", 64))
    for optimizer in ("sgd", "adam") if (optimizer, model) != ("adam", "mobilenet")])
def test_five_training_steps_leave_the_weights_pytorch_leaves(device, optimizer, model, size):
    """The same batches through the training graph and through PyTorch's training loop (cross entropy, mean over
    the batch): weights, biases, gamma, beta and running statistics after 5 steps. SGD with momentum agrees to
    float32 rounding; Adam divides each gradient by its root mean square, which turns the rounding of a gradient
    near zero into a larger step: they agree within 1% of the learning rate where the gradients are more than
    rounding. Then the inference graph computes what the trained module's eval() computes (SGD; the Adam runs'
    steps of rounding differ there)."""
    torch.manual_seed(0)
    module = {"small": small_classifier, "source_block": SourceBlock, "mobilenet": MobileNetStack,
              "normalizations": normalization_stack,
              "resnet18": lambda: ResNet18(width=8, classes=10)}[model]()
    imported = mpsx.from_torch(module, torch.zeros(4, 3, size, size), device)
    lr = 0.01
    if optimizer == "sgd":
        ours = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=lr, momentum_scale=0.9)
        theirs = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)
    else:  # MPS adds epsilon before the bias correction, PyTorch after: an epsilon that never counts
        ours = mpsx.NNOptimizerAdam(device, learning_rate=lr, epsilon=1e-30)
        theirs = torch.optim.Adam(module.parameters(), lr=lr, eps=1e-30)
    loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN,
                                  reduce_across_batch=True)
    graph = imported.training_graph(loss, ours)
    rng = np.random.default_rng(0)
    train_both(device, graph, module, theirs, 5, size, rng)
    trained = imported.state_dict()
    # Adam moves a weight whose gradient is zero but for rounding (a bias or beta whose shift a later
    # normalization removes) by whole steps of either sign: compared are the others.
    moved = {name: theirs.state[p]["exp_avg_sq"].sqrt().numpy() for name, p in module.named_parameters()
             if optimizer == "adam"}
    largest = max((m.max() for m in moved.values()), default=0)
    for name, value in module.state_dict().items():
        if not value.is_floating_point():
            continue
        value = value.numpy()
        if name in moved:
            kept = moved[name] > 1e-5 * largest
            if not kept.any():
                continue
            trained[name], value = trained[name][kept], value[kept]
        if optimizer == "sgd":
            # A gradient that is zero but for rounding (a bias whose shift a later normalization removes)
            # leaves values of rounding size.
            np.testing.assert_allclose(trained[name], value, rtol=1e-4, atol=max(1e-5 * np.abs(value).max(), 1e-8),
                                       err_msg=name)
        else:
            np.testing.assert_allclose(trained[name], value, rtol=1e-4, atol=1e-2 * lr, err_msg=name)
    if optimizer == "adam":
        return
    module.eval()
    x = batch(2, size, seed=9)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    got = forward(device, imported, x).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_bad_arguments_are_refused_before_anything_is_built(device):
    with pytest.raises(TypeError, match="expected a torch.nn.Module, given int"):
        mpsx.from_torch(3, torch.zeros(1, 3, 4, 4), device)
    with pytest.raises(TypeError, match="expected example_input a tensor or a tuple of tensors, given list"):
        mpsx.from_torch(nn.Conv2d(3, 3, 1), [torch.zeros(1, 3, 4, 4)], device)
    with pytest.raises(ValueError, match=r"does not run on example_input of shapes \[\(1, 2, 4, 4\)\]"):
        mpsx.from_torch(nn.Sequential(nn.Conv2d(3, 3, 1)), torch.zeros(1, 2, 4, 4), device)
    with pytest.raises(TypeError, match="expected a model description"):
        mpsx.ImportedModel({}, device)
    module = nn.Sequential(nn.Conv2d(3, 3, 1))
    with pytest.raises(TypeError, match="expected an NNOptimizer or None, given str"):
        mpsx.from_torch(module, torch.zeros(1, 3, 4, 4), device, "sgd")
    bare = mpsx.ImportedModel.__new__(mpsx.ImportedModel)
    for member in ("result_image", "source_handles", "data_sources", "device"):
        with pytest.raises(mpsx.StateError, match="made without __init__"):
            getattr(bare, member)
    with pytest.raises(mpsx.StateError, match="made without __init__"):
        bare.inference_graph()


def test_batch_normalization_without_affine_parameters(device):
    module = randomize_batch_normalization(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)))
    module[1] = nn.BatchNorm2d(4, affine=False)
    with torch.no_grad():
        module[1].running_mean.uniform_(-1, 1)
        module[1].running_var.uniform_(0.5, 2)
    imported = assert_forward_matches(device, module, batch(2, 5))
    assert sorted(imported.state_dict()) == ["0.bias", "0.weight", "1.num_batches_tracked", "1.running_mean",
                                             "1.running_var"]


def test_reading_a_module_in_training_mode_leaves_its_running_statistics(device):
    module = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)).train()
    before = module[1].running_mean.clone()
    mpsx.from_torch(module, torch.randn(2, 3, 5, 5), device)
    assert module.training and torch.equal(module[1].running_mean, before)


LOSSES = {
    "cross_entropy": lambda r: nn.CrossEntropyLoss(reduction=r),
    "cross_entropy_smoothed": lambda r: nn.CrossEntropyLoss(reduction=r, label_smoothing=0.2),
    "bce_with_logits": lambda r: nn.BCEWithLogitsLoss(reduction=r),
    "mse": lambda r: nn.MSELoss(reduction=r),
    "l1": lambda r: nn.L1Loss(reduction=r),
    "huber": lambda r: nn.HuberLoss(reduction=r, delta=0.3),
    "smooth_l1": lambda r: nn.SmoothL1Loss(reduction=r, beta=0.4),
}


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_pytorch_loss_module_trains_as_in_pytorch(device, name, reduction):
    """training_graph given a PyTorch loss module: over a 4 x 5 x 5 result (a per-pixel loss; the cross
    entropies' class indices as one-hot labels), one SGD step leaves the weights PyTorch's step leaves, so the
    loss's gradient and its reduction over the batch and the pixels are PyTorch's."""
    torch.manual_seed(3)
    module = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1))
    loss = LOSSES[name](reduction)
    imported = mpsx.from_torch(module, torch.zeros(2, 3, 5, 5), device)
    lr = 0.1
    graph = imported.training_graph(loss, mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=lr))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    if name.startswith("cross_entropy"):
        target = torch.from_numpy(rng.integers(0, 4, (2, 5, 5)))
        labels = np.eye(4, dtype=np.float32)[target.numpy()].transpose(0, 3, 1, 2)
    else:
        labels = rng.uniform(0, 1, (2, 4, 5, 5)).astype(np.float32)
        target = torch.from_numpy(labels)
    cb = device.command_queue.command_buffer()
    graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)],
                       [[mpsx.CNNLossLabels(device, np.ascontiguousarray(image)) for image in labels]])
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    theirs = torch.optim.SGD(module.parameters(), lr=lr)
    loss(module(torch.from_numpy(x)), target).backward()
    theirs.step()
    trained = imported.state_dict()
    for key, value in module.state_dict().items():
        np.testing.assert_allclose(trained[key], value.numpy(), rtol=1e-4, atol=1e-6, err_msg=key)


def test_pytorch_losses_map_to_loss_descriptors():
    mean = mpsx.loss_from_torch(nn.SmoothL1Loss(beta=0.5), 7)
    assert (mean.loss_type, mean.reduction_type, mean.reduce_across_batch) == (
        mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.MEAN, True)
    assert (mean.delta, mean.weight, mean.number_of_classes) == (0.5, 2.0, 7)
    none = mpsx.loss_from_torch(nn.CrossEntropyLoss(reduction="none", label_smoothing=0.25))
    assert (none.loss_type, none.reduction_type, none.reduce_across_batch, none.label_smoothing) == (
        mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.NONE, False, 0.25)


@pytest.mark.parametrize("loss, message", [
    (nn.NLLLoss(), "NLLLoss has no CNNLossType that computes it"),
    (nn.KLDivLoss(reduction="batchmean"), "KLDivLoss with reduction 'batchmean'"),
    (nn.CrossEntropyLoss(weight=torch.ones(3)), "CrossEntropyLoss with class weights"),
    (nn.BCEWithLogitsLoss(pos_weight=torch.ones(3)), "BCEWithLogitsLoss with class weights"),
    (nn.SmoothL1Loss(beta=0.0), r"SmoothL1Loss with beta 0.0: L1 loss \(nn.L1Loss\)"),
    (nn.Conv2d(1, 1, 1), "Conv2d with reduction None"),
])
def test_pytorch_losses_without_a_loss_type_are_refused(loss, message):
    with pytest.raises(mpsx.UnsupportedOperationError, match=message):
        mpsx.loss_from_torch(loss)


def test_training_graph_refuses_a_loss_of_another_type(device):
    imported = mpsx.from_torch(nn.Sequential(nn.Conv2d(3, 4, 1)), torch.zeros(1, 3, 2, 2), device)
    with pytest.raises(TypeError, match="expected a CNNLossDescriptor or a torch.nn loss module, given str"):
        imported.training_graph("cross_entropy")


def loadable_model():
    """Batch, group, local response and instance normalization (affine and not), convolutions with and without
    bias terms, a linear layer after a flatten."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.LocalResponseNorm(3),
                         nn.Conv2d(8, 4, 1), nn.InstanceNorm2d(4, affine=True), nn.BatchNorm2d(4, affine=False),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def test_load_state_dict_loads_another_modules_values_into_the_graphs_made_before(device):
    """A PyTorch state dict of the same model with other values, loaded after both graphs were made: the
    inference graph computes the other module's eval(), and two SGD steps of the training graph leave what
    PyTorch's two steps from those values leave."""
    torch.manual_seed(0)
    first = loadable_model()
    other = loadable_model()
    with torch.no_grad():  # every value away from first's, the running statistics too
        for name, value in other.state_dict().items():
            if value.is_floating_point():
                value.add_(torch.rand(value.shape) * (0.5 if "running" in name else 0.1))
    imported = mpsx.from_torch(first, torch.zeros(4, 3, 6, 6), device)
    lr = 0.05
    training = imported.training_graph(nn.CrossEntropyLoss(),
                                       mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=lr,
                                                                                 momentum_scale=0.9))
    inference = imported.inference_graph()  # over the data sources the training graph made
    assert "1.num_batches_tracked" in other.state_dict()
    imported.load_state_dict(other.state_dict())

    x = batch(4, 6, seed=3)
    other.eval()
    with torch.no_grad():
        expected = other(torch.from_numpy(x)).numpy()
    cb = device.command_queue.command_buffer()
    result = inference.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    got = result.to_numpy().reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())

    train_both(device, training, other, torch.optim.SGD(other.parameters(), lr=lr, momentum=0.9), 2, 6,
               np.random.default_rng(1))
    trained = imported.state_dict()
    for name, value in other.state_dict().items():
        if value.is_floating_point():
            np.testing.assert_allclose(trained[name], value.numpy(), rtol=1e-4,
                                       atol=max(1e-5 * np.abs(value.numpy()).max(), 1e-8), err_msg=name)
    # And back: PyTorch loads it strictly; the batch counts are carried as loaded, not counted.
    back = loadable_model()
    back.load_state_dict({name: torch.from_numpy(value) for name, value in trained.items()})
    assert int(back[1].num_batches_tracked) == 0 and int(other[1].num_batches_tracked) == 2


def test_load_state_dict_round_trips_and_refuses_a_dict_that_does_not_fit(device):
    imported = mpsx.from_torch(loadable_model(), torch.zeros(2, 3, 6, 6), device)
    before = imported.state_dict()
    rng = np.random.default_rng(2)
    changed = {name: (value + rng.uniform(0.1, 0.2, value.shape)).astype(value.dtype) if value.dtype == np.float32
               else value for name, value in before.items()}
    imported.load_state_dict(changed)
    after = imported.state_dict()
    assert sorted(after) == sorted(changed)
    for name in changed:
        np.testing.assert_array_equal(after[name], changed[name], err_msg=name)

    changed["1.num_batches_tracked"] = np.array(7, np.int64)
    imported.load_state_dict({name: value for name, value in changed.items() if name != "8.num_batches_tracked"})
    assert imported.state_dict()["1.num_batches_tracked"] == 7 and imported.state_dict()["8.num_batches_tracked"] == 0
    with pytest.raises(ValueError, match=r"expected 1.num_batches_tracked one integer, given float64 of shape \(2,\)"):
        imported.load_state_dict({**changed, "1.num_batches_tracked": np.zeros(2)})
    bad = dict(changed)
    del bad["0.weight"]
    with pytest.raises(KeyError, match=r"missing \['0.weight'\], unexpected \[\]"):
        imported.load_state_dict(bad)
    with pytest.raises(KeyError, match=r"missing \[\], unexpected \['extra'\]"):
        imported.load_state_dict({**changed, "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"expected 10.weight of shape \(10, 144\), given \(10, 143\)"):
        imported.load_state_dict({**before, "10.weight": np.zeros((10, 143), np.float32)})
    with pytest.raises(TypeError, match="expected a dict of arrays, given list"):
        imported.load_state_dict([])
    after_refusals = imported.state_dict()  # checked whole first: nothing was loaded
    for name in changed:
        np.testing.assert_array_equal(after_refusals[name], changed[name], err_msg=name)
    with pytest.raises(mpsx.StateError, match="made without __init__"):
        mpsx.ImportedModel.__new__(mpsx.ImportedModel).load_state_dict({})


TRANSPOSES = [  # in, out, kernel, stride, padding, output_padding, dilation, groups, bias
    (4, 6, 2, 2, 0, 0, 1, 1, True),  # U-Net's upsampling
    (4, 6, 3, 1, 1, 0, 1, 1, True),
    (4, 6, 3, 2, 1, 0, 1, 2, False),
    (3, 5, 3, 2, 0, 0, 1, 1, True),
    (4, 4, 5, 3, 2, 0, 1, 4, True),  # depthwise
    (2, 3, (3, 1), (1, 2), (1, 0), 0, 1, 1, True),
    (2, 3, 3, 2, 2, 0, 2, 1, True),  # dilated
    # Sized by a custom padding policy:
    (4, 6, 4, 2, 1, 0, 1, 1, True),  # DCGAN's and U-Net's doubling
    (4, 6, 3, 2, 1, 1, 1, 1, True),  # doubling with output padding
    (3, 4, (3, 4), (2, 1), (1, 2), (1, 0), 1, 1, True),
    (4, 4, 5, 3, 2, 2, 1, 4, False),  # depthwise
    (2, 3, 3, 2, 0, 1, 1, 1, True),  # output padding past the source's reach
    (2, 3, 3, 2, 1, 1, 2, 1, True),  # dilated
]


@pytest.mark.parametrize("case", TRANSPOSES, ids=[str(c) for c in TRANSPOSES])
def test_a_transposed_convolution_computes_what_pytorch_does(device, case):
    cin, cout, kernel, stride, padding, output_padding, dilation, groups, bias = case
    module = nn.Sequential(nn.ConvTranspose2d(cin, cout, kernel, stride, padding, output_padding, groups, bias,
                                              dilation))
    for size in (4, 5):
        imported = assert_forward_matches(device, module, batch(2, size, channels=cin))
    assert sorted(imported.state_dict()) == sorted(module.state_dict())
    for name, value in module.state_dict().items():
        np.testing.assert_array_equal(imported.state_dict()[name], value.numpy(), err_msg=name)


@pytest.mark.parametrize("transpose", [
    dict(kernel_size=2, stride=2),  # Full
    dict(kernel_size=4, stride=2, padding=1),  # a custom padding policy
    dict(kernel_size=3, stride=2, padding=1, output_padding=1)])
def test_an_autoencoder_with_a_transposed_convolution_trains_as_pytorch_does(device, transpose):
    """A strided convolution and a transposed one undoing its size, trained 5 SGD steps on MSE against the
    input (a PyTorch loss module). A graph whose transpose has a custom padding policy encodes every step."""
    torch.manual_seed(1)
    module = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.ConvTranspose2d(8, 3, **transpose))
    imported = mpsx.from_torch(module, torch.zeros(2, 3, 8, 8), device)
    lr = 0.1
    graph = imported.training_graph(nn.MSELoss(), mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=lr, momentum_scale=0.9))
    graph.capture_encodes = True  # whatever MPSX_CAPTURE_ENCODES says
    theirs = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9)
    rng = np.random.default_rng(5)
    for _ in range(5):
        x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
        cb = device.command_queue.command_buffer()
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)], [[mpsx.CNNLossLabels(device, x[0]),
                                                                           mpsx.CNNLossLabels(device, x[1])]])
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        theirs.zero_grad()
        nn.functional.mse_loss(module(torch.from_numpy(x)), torch.from_numpy(x)).backward()
        theirs.step()
    trained = imported.state_dict()
    for name, value in module.state_dict().items():
        np.testing.assert_allclose(trained[name], value.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
    custom = "padding" in transpose
    assert (graph.captured_encode_count == 0) == custom


def test_a_source_too_small_for_a_transposed_convolutions_padding_is_refused_before_anything_is_encoded(device):
    module = nn.Sequential(nn.ConvTranspose2d(2, 3, 3, 1, 2))  # 2 x 2 -> 0 x 0
    graph = mpsx.from_torch(module, torch.zeros(1, 2, 8, 8), device).inference_graph()
    cb = device.command_queue.command_buffer()
    with pytest.raises(ValueError, match=r"padding \(2, 2\), output_padding \(0, 0\): a 2x2 source leaves a 0x0 "
                                         r"result"):
        graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, batch(1, 2, channels=2))])
    assert cb.status == "not_enqueued"
    result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, batch(1, 3, channels=2))])  # the graph encodes on
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    with torch.no_grad():
        expected = module(torch.from_numpy(batch(1, 3, channels=2))).numpy()
    np.testing.assert_allclose(result.to_numpy(), expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_the_graphs_take_an_accumulator_precision(device):
    """HALF lets cuda run the convolutions and fully connected layers on TF32 tensor cores (10-bit mantissas);
    the cpu accumulates in float32 whatever it says."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    x = batch(2, 8)
    imported = mpsx.from_torch(module, torch.from_numpy(x), device)
    half = mpsx.NNConvolutionAccumulatorPrecisionOption.HALF
    loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
    for make in (imported.inference_graph, lambda **kw: imported.training_graph(loss, **kw)):
        with pytest.raises(TypeError, match="expected accumulator_precision an "
                                            "NNConvolutionAccumulatorPrecisionOption, given str"):
            make(accumulator_precision="half")
    graph = imported.inference_graph(accumulator_precision=half)
    cb = device.command_queue.command_buffer()
    result = graph.encode_batch(cb, [mpsx.ImageBatch.from_numpy(device, x)])
    result.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    tolerance = 5e-3 if device.backend == "cuda" else RTOL
    np.testing.assert_allclose(result.to_numpy().reshape(expected.shape), expected, rtol=tolerance,
                               atol=tolerance * np.abs(expected).max())

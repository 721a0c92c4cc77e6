"""mpsx.from_onnx: models exported by PyTorch's ONNX exporter, read into the same nodes as from_torch's; the forward
pass against onnxruntime running the same file, training against PyTorch's, and refusals."""

import io

import numpy as np
import pytest
import torch
import torch.nn as nn

import mpsx
from test_imported import (MobileNetStack, ResNet18, TinyUNet, batch, forward, randomize_batch_normalization,
                           small_classifier, train_both, vgg_stack)

onnx = pytest.importorskip("onnx", reason="the onnx package (pip install 'mpsx[onnx]') reads ONNX models")
onnxruntime = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference the imports are checked with")
RTOL = 1e-4


def decoder():
    """Transposed convolutions of padding and output padding no padding method sizes (custom policies)."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.ConvTranspose2d(8, 4, 4, 2, 1), nn.ReLU(),
                         nn.ConvTranspose2d(4, 3, 3, 2, 1, output_padding=1))


def export(module, x, training=False):
    """PyTorch's TorchScript exporter: eval() folds batch normalization into the convolutions; training keeps
    it (and dropout), with the running statistics as initializers."""
    f = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x),), f, dynamo=False, input_names=["input"], output_names=["out"],
                      training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
                      do_constant_folding=not training)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("model, size", [("resnet18", 32), ("vgg", 16), ("mobilenet", 16), ("unet", 16),
                                         ("decoder", 8)])
def test_an_onnx_model_computes_what_onnxruntime_computes(device, model, size):
    torch.manual_seed(0)
    module = {"resnet18": lambda: ResNet18(width=16), "vgg": vgg_stack, "mobilenet": MobileNetStack,
              "unet": TinyUNet, "decoder": decoder}[model]()
    module = randomize_batch_normalization(module).eval()
    x = batch(2, size)
    exported = export(module, x)
    expected = onnxruntime.InferenceSession(exported.SerializeToString()).run(None, {"input": x})[0]
    imported = mpsx.from_onnx(exported, device)
    assert [h.label for h in imported.source_handles] == ["input"]
    got = forward(device, imported, x).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_an_onnx_model_exported_for_training_trains_as_pytorch_does(device, tmp_path):
    """Batch normalization kept (its momentum in ONNX's convention, the other way round), read from a file:
    5 SGD steps with momentum leave the weights and running statistics PyTorch leaves, under the initializers'
    names."""
    torch.manual_seed(2)
    module = randomize_batch_normalization(small_classifier())
    path = tmp_path / "classifier.onnx"
    onnx.save(export(module.train(), batch(4, 8), training=True), path)
    imported = mpsx.from_onnx(str(path), device)
    assert imported.data_sources["1"].momentum == pytest.approx(0.1)
    lr = 0.01
    graph = imported.training_graph(nn.CrossEntropyLoss(), mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=lr, momentum_scale=0.9))
    train_both(device, graph, module, torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9), 5, 8,
               np.random.default_rng(0))
    trained = imported.state_dict()
    expected = {k: v.numpy() for k, v in module.state_dict().items() if v.is_floating_point()}
    assert sorted(trained) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(trained[name], value, rtol=1e-4, atol=max(1e-5 * np.abs(value).max(), 1e-8),
                                   err_msg=name)


class Transposed(nn.Module):
    def forward(self, x):
        return x.transpose(2, 3)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("module, message", [
    (Transposed(), r"\(Transpose\): no NNGraph node for this operation"),
    (nn.Sequential(nn.MaxPool2d(2, ceil_mode=True)), r"\(MaxPool\): ceil_mode, dilations or indices"),
    (nn.Sequential(nn.Softmax(dim=3)), r"along axis 3: only along the channels"),
])
def test_onnx_operations_mpsx_cannot_express_are_named_with_their_node(device, module, message):
    with pytest.raises(mpsx.UnsupportedOperationError, match=message):
        mpsx.from_onnx(export(module, batch(1, 5)), device)


def test_from_onnx_refuses_other_types(device):
    with pytest.raises(TypeError, match="expected an onnx.ModelProto or a path, given int"):
        mpsx.from_onnx(3, device)


def run_onnxruntime(model, x):
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_the_round_trip_through_onnx_after_training(device, tmp_path):
    """torch.onnx.export -> from_onnx -> 3 SGD steps -> to_onnx: onnxruntime on the written file computes what the
    trained model's inference graph computes, with the trained values under the initializers' names."""
    torch.manual_seed(4)
    module = randomize_batch_normalization(small_classifier())
    imported = mpsx.from_onnx(export(module.train(), batch(4, 8), training=True), device)
    graph = imported.training_graph(nn.CrossEntropyLoss(), mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.05, momentum_scale=0.9))
    train_both(device, graph, module, torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9), 3, 8,
               np.random.default_rng(1))
    path = tmp_path / "trained.onnx"
    written = mpsx.to_onnx(imported, str(path))
    assert onnx.load(str(path)) == written
    # IR 8 came with opset 17 (ONNX 1.12): every runtime that reads opset 17 reads it, whichever onnx wrote it.
    assert written.ir_version == 8
    x = batch(3, 8, seed=7)
    got = forward(device, imported, x)
    expected = run_onnxruntime(written, x)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())
    trained = imported.state_dict()
    for initializer in written.graph.initializer:
        if initializer.name in trained:
            np.testing.assert_array_equal(onnx.numpy_helper.to_array(initializer), trained[initializer.name])


@pytest.mark.parametrize("model, size", [("resnet18", 32), ("mobilenet", 16), ("unet", 16), ("decoder", 8)])
def test_a_pytorch_model_written_as_onnx_runs_in_onnxruntime_as_in_pytorch(device, model, size):
    torch.manual_seed(0)
    module = {"resnet18": lambda: ResNet18(width=16), "mobilenet": MobileNetStack, "unet": TinyUNet,
              "decoder": decoder}[model]()
    module = randomize_batch_normalization(module).eval()
    x = batch(2, size)
    written = mpsx.to_onnx(mpsx.from_torch(module, torch.from_numpy(x), device))
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    got = run_onnxruntime(written, x)
    np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


def test_to_onnx_refuses_what_onnx_cannot_say(device):
    imported = mpsx.from_torch(nn.Sequential(nn.Conv2d(3, 4, 1), nn.GroupNorm(2, 4)), torch.zeros(1, 3, 4, 4), device)
    with pytest.raises(mpsx.UnsupportedOperationError, match="group normalization"):
        mpsx.to_onnx(imported)
    with pytest.raises(TypeError, match="expected an ImportedModel, given dict"):
        mpsx.to_onnx({})

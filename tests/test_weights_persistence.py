"""Checkpoint and resume (issue 15): native data sources save their optimizer's
state (momentum, Adam's moments; Adam's time step is the optimizer's), and
Vectors and the weights states save their values, so that N steps, a save, a
load in a new process and M more steps give exactly the values of N + M steps
without the pause."""

import os
import pickle

import numpy as np
import pytest

import mpsx

from helpers import run_isolated
from mpsx.benchmarks.reference_cnn import GraphReferenceCNN, ReferenceCNN, random_batch

N_STEPS, M_STEPS = 2, 2


def isolated(device, code, timeout):
    """run_isolated with this module's names imported."""
    here = os.path.dirname(os.path.abspath(__file__))
    return run_isolated(device, f"import sys\nsys.path.insert(0, {here!r})\nfrom {__name__} import *\n" + code,
                        timeout=timeout)

# The model both processes build: conv -> normalization -> ReLU -> fully
# connected -> softmax cross-entropy, each data source trained by its own
# optimizer through the kernels' update encodes.
B, C_IN, C, SIZE, CLASSES, EPSILON = 3, 2, 4, 5, 3, 1e-5


def make_optimizer(device, kind):
    if kind == "sgd":
        return mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.05, momentum_scale=0.9)
    return mpsx.NNOptimizerAdam(device, learning_rate=0.01)


def new_sources(device, norm, optimizer):
    rng = np.random.default_rng(5)
    f = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    conv = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, C_IN, C), f(C, 3, 3, C_IN), f(C),
                                   make_optimizer(device, optimizer))
    fc = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(SIZE, SIZE, C, CLASSES), f(CLASSES, SIZE, SIZE, C),
                                 f(CLASSES), make_optimizer(device, optimizer))
    gamma, beta = 1 + f(C), f(C)
    if norm == "batch":
        source = mpsx.BatchNormalizationWeights(gamma, beta, f(C), 1 + np.abs(f(C)), EPSILON, 0.1,
                                                make_optimizer(device, optimizer))
    elif norm == "instance":
        source = mpsx.InstanceNormalizationWeights(gamma, beta, EPSILON, make_optimizer(device, optimizer))
    else:
        source = mpsx.GroupNormalizationWeights(gamma, beta, 2, EPSILON, make_optimizer(device, optimizer))
    return {"conv": conv, "norm": source, "fc": fc}


def batch(step):
    rng = np.random.default_rng(100 + step)
    x = rng.standard_normal((B, C_IN, SIZE, SIZE)).astype(np.float32)
    labels = np.zeros((B, CLASSES, 1, 1), np.float32)
    labels[np.arange(B), rng.integers(0, CLASSES, B)] = 1
    return x, labels


class Model:
    def __init__(self, device, norm, sources):
        relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
        self.device, self.norm_kind, self.sources = device, norm, sources
        self.conv = mpsx.CNNConvolution(device, sources["conv"])
        self.conv_gradient = mpsx.CNNConvolutionGradient(device, sources["conv"])
        self.conv_gradient.gradient_option = mpsx.CNNConvolutionGradientOption.GRADIENT_WITH_WEIGHTS_AND_BIAS
        if norm == "batch":
            self.norm = mpsx.CNNBatchNormalization(device, sources["norm"])
            self.statistics = mpsx.CNNBatchNormalizationStatistics(device)
            self.statistics_gradient = mpsx.CNNBatchNormalizationStatisticsGradient(device)
            self.norm_gradient = mpsx.CNNBatchNormalizationGradient(device)
        else:
            make = mpsx.CNNInstanceNormalization if norm == "instance" else mpsx.CNNGroupNormalization
            self.norm = make(device, sources["norm"])
            self.norm_gradient = self.norm.gradient_kernels()[0]
        self.relu = mpsx.CNNNeuron(device, relu)
        self.relu_gradient = mpsx.CNNNeuronGradient(device, relu)
        self.fc = mpsx.CNNFullyConnected(device, sources["fc"])
        self.fc_gradient = mpsx.CNNFullyConnectedGradient(device, sources["fc"])
        d = mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY, mpsx.CNNReductionType.MEAN)
        d.reduce_across_batch = True
        self.loss = mpsx.CNNLoss(device, d)

    def step(self, index):
        x_np, labels = batch(index)
        x = mpsx.ImageBatch.from_numpy(self.device, x_np)
        cb = self.device.command_queue.command_buffer()
        y, conv_states = self.conv.encode_batch(cb, x, destination_states=True)
        if self.norm_kind == "batch":
            norm_state = self.norm.result_state(y)
            self.statistics.encode_batch(cb, y, norm_state)
            z = self.norm.encode_batch(cb, y, batch_normalization_state=norm_state)
        else:
            z, norm_state = self.norm.encode_batch(cb, y, destination_states=True)
        h, relu_states = self.relu.encode_batch(cb, z, destination_states=True)
        logits, fc_states = self.fc.encode_batch(cb, h, destination_states=True)
        g = self.loss.encode_batch(cb, logits, mpsx.CNNLossLabels(self.device, labels))
        g = self.fc_gradient.encode_batch(cb, g, h, fc_states)
        g = self.relu_gradient.encode_batch(cb, g, z, relu_states)
        if self.norm_kind == "batch":
            self.statistics_gradient.encode_batch(cb, g, y, norm_state)
        g = self.norm_gradient.encode_batch(cb, g, y, norm_state)
        self.conv_gradient.encode_batch(cb, g, x, conv_states)
        self.conv.encode_weights_and_bias_update(cb, conv_states[0])
        self.fc.encode_weights_and_bias_update(cb, fc_states[0])
        self.norm.encode_gamma_and_beta_update(cb, norm_state)
        if self.norm_kind == "batch":
            self.norm.encode_mean_and_variance_update(cb, norm_state)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error


def values(sources):
    """Every value training changes, by name, as numpy."""
    out = {}
    for name, source in sources.items():
        if isinstance(source, mpsx.ConvolutionWeights):
            out[name + ".weights"], out[name + ".biases"] = source.weights(), source.bias_terms()
        else:
            out[name + ".gamma"], out[name + ".beta"] = source.gamma(), source.beta()
            if isinstance(source, mpsx.BatchNormalizationWeights):
                out[name + ".mean"], out[name + ".variance"] = source.mean(), source.variance()
        for kind, arrays in source.optimizer_state().items():
            for i, a in enumerate(arrays):
                out[f"{name}.{kind}{i}"] = a
        if isinstance(source.optimizer, mpsx.NNOptimizerAdam):
            out[name + ".time_step"] = np.array(source.optimizer.time_step)
    return out


def assert_resumed(resumed, expected, loaded, saved):
    """The new process loaded exactly what was saved, and its run equals the uninterrupted one, bit for bit."""
    if saved is not None:
        assert sorted(loaded) == sorted(saved)
        for name in saved:
            np.testing.assert_array_equal(loaded[name], saved[name], err_msg=name)
    assert sorted(resumed) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(resumed[name], expected[name], err_msg=name)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("norm", ["batch", "instance", "group"])
def test_data_sources_resume_exactly_in_a_new_process(repeatable, tmp_path, norm, optimizer):
    device = repeatable
    uninterrupted = new_sources(device, norm, optimizer)
    model = Model(device, norm, uninterrupted)
    for i in range(N_STEPS + M_STEPS):
        model.step(i)

    paused = new_sources(device, norm, optimizer)
    model = Model(device, norm, paused)
    for i in range(N_STEPS):
        model.step(i)
    state = paused["conv"].optimizer_state()
    kinds = ["momentum"] if optimizer == "sgd" else ["momentum", "velocity"]
    assert sorted(state) == kinds and all(len(state[k]) == 2 and np.any(state[k][0]) for k in kinds)
    mpsx.save(paused, tmp_path / "checkpoint.safetensors")
    saved = values(paused)

    isolated(device, f"""
device.deterministic = True
sources = mpsx.load({str(tmp_path / "checkpoint.safetensors")!r}, device)
np.savez({str(tmp_path / "loaded.npz")!r}, **values(sources))
model = Model(device, {norm!r}, sources)
for i in range({N_STEPS}, {N_STEPS + M_STEPS}):
    model.step(i)
np.savez({str(tmp_path / "resumed.npz")!r}, **values(sources))
""", timeout=120)
    resumed, loaded = (dict(np.load(tmp_path / f"{name}.npz")) for name in ("resumed", "loaded"))
    assert_resumed(resumed, values(uninterrupted), loaded, saved)
    if optimizer == "adam":
        assert resumed["conv.time_step"] == N_STEPS + M_STEPS


def test_a_restart_without_the_optimizer_state_differs(device):
    """What the checkpoint test guards against: the same values with the momenta from zero
    train elsewhere."""
    uninterrupted = new_sources(device, "batch", "sgd")
    model = Model(device, "batch", uninterrupted)
    for i in range(N_STEPS + M_STEPS):
        model.step(i)
    paused = new_sources(device, "batch", "sgd")
    model = Model(device, "batch", paused)
    for i in range(N_STEPS):
        model.step(i)
    restarted = mpsx.persistence.copy(paused)
    for source in restarted.values():
        source.set_optimizer_state({k: [np.zeros_like(a) for a in v] for k, v in source.optimizer_state().items()})
    model = Model(device, "batch", restarted)
    for i in range(N_STEPS, N_STEPS + M_STEPS):
        model.step(i)
    assert not np.array_equal(values(restarted)["conv.weights"], values(uninterrupted)["conv.weights"])


def test_optimizer_state_holds_the_vectors_of_the_updates(device):
    """After one SGD-momentum update from zero, momentum = learning_rate * gradient = old - new values;
    after one Adam update, momentum = (1 - beta1) g and velocity = (1 - beta2) g^2."""
    sources = new_sources(device, "group", "sgd")
    before = values(sources)
    assert np.all(sources["conv"].optimizer_state()["momentum"][0] == 0)
    Model(device, "group", sources).step(0)
    after = values(sources)
    for name, value in (("conv", "weights"), ("conv", "biases"), ("norm", "gamma"), ("norm", "beta")):
        index = 0 if value in ("weights", "gamma") else 1
        np.testing.assert_allclose(after[f"{name}.momentum{index}"], before[f"{name}.{value}"].reshape(-1) -
                                   after[f"{name}.{value}"].reshape(-1), rtol=1e-5, atol=1e-7,
                                   err_msg=f"{name}.{value}")

    sources = new_sources(device, "instance", "adam")
    Model(device, "instance", sources).step(0)
    state = sources["fc"].optimizer_state()
    g = state["momentum"][0] / (1 - 0.9)
    np.testing.assert_allclose(state["velocity"][0], (1 - 0.999) * g * g, rtol=1e-3, atol=1e-12)
    assert sources["fc"].optimizer.time_step == 1


def test_optimizer_state_kinds(device):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    w = np.ones((3, 1, 1, 2), np.float32)
    assert mpsx.ConvolutionWeights(d, w).optimizer_state() == {}
    rms = mpsx.ConvolutionWeights(d, w, None, mpsx.NNOptimizerRMSProp(device))
    state = rms.optimizer_state()
    assert list(state) == ["sum_of_squares"] and [a.shape for a in state["sum_of_squares"]] == [(6,)]
    plain = mpsx.BatchNormalizationWeights(np.ones(2), np.zeros(2), np.zeros(2), np.ones(2),
                                           optimizer=mpsx.NNOptimizerStochasticGradientDescent(device))
    assert plain.optimizer_state() == {}
    # A state saved before optimizer states existed restores with zeroed vectors.
    old = mpsx.GroupNormalizationWeights.__mpsx_restore__(
        {"arguments": (np.ones(4), np.zeros(4), 2, 1e-5, mpsx.NNOptimizerAdam(device), None)}, device)
    assert [np.all(a == 0) for a in old.optimizer_state()["velocity"]] == [True, True]


def test_copy_keeps_the_optimizer_state_and_is_independent(device):
    sources = new_sources(device, "batch", "adam")
    Model(device, "batch", sources).step(0)
    for name, source in sources.items():
        copy = source.copy(device)
        assert copy.optimizer is not source.optimizer and copy.optimizer.time_step == 1
        for kind, arrays in source.optimizer_state().items():
            for a, b in zip(arrays, copy.optimizer_state()[kind]):
                np.testing.assert_array_equal(a, b)
        pickled = pickle.loads(pickle.dumps(source))
        np.testing.assert_array_equal(pickled.optimizer_state()["velocity"][1],
                                      source.optimizer_state()["velocity"][1])
    copies = {name: source.copy() for name, source in sources.items()}
    Model(device, "batch", copies).step(1)
    assert not np.array_equal(copies["conv"].optimizer_state()["momentum"][0],
                              sources["conv"].optimizer_state()["momentum"][0])


def test_optimizer_state_waits_for_the_update(device):
    """Read once the update's command buffer has completed, written while none is in flight."""
    sources = new_sources(device, "instance", "sgd")
    model = Model(device, "instance", sources)
    rng = np.random.default_rng(3)
    xs, dys = (mpsx.ImageBatch.from_numpy(device, rng.standard_normal((3, 4, 5, 5)).astype(np.float32))
               for _ in range(2))
    cb = device.command_queue.command_buffer()
    _, states = model.norm.encode_batch(cb, xs, destination_states=True)
    model.norm_gradient.encode_batch(cb, dys, xs, states)
    model.norm.encode_gamma_and_beta_update(cb, states)
    with pytest.raises(mpsx.SynchronizationError, match="momentum vector 0 of the optimizer of a "
                                                        "InstanceNormalizationWeights.*not committed"):
        sources["norm"].optimizer_state()
    zeros = {"momentum": [np.zeros(4, np.float32)] * 2}
    with pytest.raises(mpsx.StateError, match="InstanceNormalizationWeights: an update of its optimizer's momentum "
                                              "vectors is in flight"):
        sources["norm"].set_optimizer_state(zeros)
    cb.commit()
    cb.wait_until_completed()
    sources["norm"].optimizer_state()
    sources["norm"].set_optimizer_state(zeros)
    assert not np.any(sources["norm"].optimizer_state()["momentum"][1])


def test_bad_optimizer_states(device):
    source = new_sources(device, "group", "sgd")["conv"]
    good = source.optimizer_state()
    with pytest.raises(TypeError, match="ConvolutionWeights: the optimizer state must be a dict of lists of arrays, "
                                        "given list"):
        source.set_optimizer_state([])
    with pytest.raises(ValueError, match=r"ConvolutionWeights: its optimizer keeps \['momentum'\] vectors, the "
                                         r"optimizer state given has \['velocity'\]"):
        source.set_optimizer_state({"velocity": good["momentum"]})
    with pytest.raises(ValueError, match="ConvolutionWeights: its optimizer keeps 2 momentum vector\\(s\\), given 1"):
        source.set_optimizer_state({"momentum": good["momentum"][:1]})
    with pytest.raises(mpsx.ShapeError, match="ConvolutionWeights: momentum vector 1 of its optimizer holds 4 "
                                              "values, given 5"):
        source.set_optimizer_state({"momentum": [np.ones(72, np.float32), np.ones(5, np.float32)]})
    # nothing was written
    assert not np.any(source.optimizer_state()["momentum"][0])
    with pytest.raises(ValueError, match=r"keeps no vectors, the optimizer state given has \['momentum'\]"):
        mpsx.InstanceNormalizationWeights(np.ones(2), np.ones(2)).set_optimizer_state(good)
    for cls in (mpsx.ConvolutionWeights, mpsx.BatchNormalizationWeights, mpsx.InstanceNormalizationWeights,
                mpsx.GroupNormalizationWeights):
        with pytest.raises(TypeError):
            cls.__new__(cls).optimizer_state()
        with pytest.raises(TypeError):
            cls.__new__(cls).set_optimizer_state({})


# ---------------------------------------------------------------- vectors and states

def test_vectors_and_value_states_round_trip(device, tmp_path):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    objects = {
        "vector": mpsx.Vector.from_numpy(device, a),
        "half": mpsx.Vector.from_numpy(device, a.astype(np.float16)),
        "weights": mpsx.CNNConvolutionWeightsAndBiasesState(device, a, b),
        "no_biases": mpsx.CNNConvolutionWeightsAndBiasesState(device, a),
        "gamma_and_beta": mpsx.CNNNormalizationGammaAndBetaState(device, b, -b),
        "mean_and_variance": mpsx.CNNNormalizationMeanAndVarianceState(device, -b, b * b),
    }
    mpsx.save(objects, tmp_path / "states.safetensors")
    for loaded in (mpsx.load(tmp_path / "states.safetensors", device),
                   pickle.loads(pickle.dumps(objects)), mpsx.persistence.copy(objects, device)):
        assert {k: type(v) for k, v in loaded.items()} == {k: type(v) for k, v in objects.items()}
        np.testing.assert_array_equal(loaded["vector"].to_numpy(), a)
        assert loaded["half"].data_type == mpsx.DataType.FLOAT16
        np.testing.assert_array_equal(loaded["half"].to_numpy(), a.astype(np.float16))
        np.testing.assert_array_equal(loaded["weights"].weights.to_numpy(), a)
        np.testing.assert_array_equal(loaded["weights"].biases.to_numpy(), b)
        assert loaded["no_biases"].biases is None
        np.testing.assert_array_equal(loaded["gamma_and_beta"].beta.to_numpy(), -b)
        np.testing.assert_array_equal(loaded["mean_and_variance"].variance.to_numpy(), b * b)
        assert loaded["vector"] is not objects["vector"] and loaded["vector"].device.name == device.name


def test_device_written_values_save_once_synchronized(device):
    v = mpsx.Vector(device, 4)
    g = mpsx.Vector.from_numpy(device, np.ones(4, np.float32))
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    cb = device.command_queue.command_buffer()
    sgd.encode(cb, g, v, result_values_vector=v)
    cb.commit()
    cb.wait_until_completed()
    with pytest.raises(mpsx.SynchronizationError, match="without synchronize"):
        mpsx.persistence.copy(v)
    cb = device.command_queue.command_buffer()
    v.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(mpsx.persistence.copy(v).to_numpy(), -0.5 * np.ones(4, np.float32))


def test_states_of_one_encode_are_not_saved(device):
    bn = mpsx.CNNBatchNormalization(device, mpsx.BatchNormalizationWeights(np.ones(2), np.zeros(2), np.zeros(2),
                                                                           np.ones(2)))
    x = mpsx.ImageBatch.from_numpy(device, np.ones((1, 2, 2, 2), np.float32))
    state = bn.result_state(x)
    with pytest.raises(mpsx.UnsavableError, match="mpsx cannot save a CNNBatchNormalizationState: it belongs to "
                                                  "the encode"):
        mpsx.persistence.copy(state)
    with pytest.raises(mpsx.UnsavableError, match="mpsx cannot save a CNNBatchNormalizationState"):
        pickle.dumps(state)
    for cls in (mpsx.Vector, mpsx.CNNConvolutionWeightsAndBiasesState, mpsx.CNNNormalizationGammaAndBetaState):
        with pytest.raises(TypeError):
            cls.__new__(cls).__mpsx_state__()


# ---------------------------------------------------------------- the reference CNN

def train(model, steps):
    for step in steps:
        model.train_step(*random_batch(2, seed=10 + step))
    model.wait()


def reference_values(model):
    """The values training changes, as numpy, by name."""
    out = {}
    if isinstance(model, ReferenceCNN):
        state = model.state_dict()
        for name, value in state.items():
            if isinstance(value, mpsx.CNNConvolutionWeightsAndBiasesState):
                out[name + ".w"], out[name + ".b"] = value.weights.to_numpy(), value.biases.to_numpy()
            elif isinstance(value, mpsx.CNNNormalizationGammaAndBetaState):
                out[name + ".g"], out[name + ".b"] = value.gamma.to_numpy(), value.beta.to_numpy()
            elif isinstance(value, mpsx.CNNNormalizationMeanAndVarianceState):
                out[name + ".m"], out[name + ".v"] = value.mean.to_numpy(), value.variance.to_numpy()
        for name, vectors in state["vectors"].items():
            for kind, items in vectors.items():
                for i, v in enumerate(items):
                    out[f"{name}.{kind}{i}"] = v.to_numpy()
        for name, optimizer in state["optimizers"].items():
            if isinstance(optimizer, mpsx.NNOptimizerAdam):
                out[name + ".time_step"] = np.array(optimizer.time_step)
        return out
    return values(model.state_dict())


def make(device, kind, optimizer, sources=None):
    if kind == "hand":
        return ReferenceCNN(device, 2, learning_rate=0.01, optimizer=optimizer)
    return GraphReferenceCNN(device, 2, learning_rate=0.01, optimizer=optimizer, sources=sources)


def resume(device, kind, optimizer, path):
    """The model of kind continued from the checkpoint at path."""
    if kind == "saved graph":
        return GraphReferenceCNN.from_checkpoint(device, 2, mpsx.load(path, device))
    model = make(device, kind, optimizer, None if kind == "hand" else mpsx.load(path, device))
    if kind == "hand":
        model.load_state_dict(mpsx.load(path, device))
    return model


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("kind", ["hand", "graph", "saved graph"])
def test_reference_cnn_resumes_exactly_in_a_new_process(repeatable, tmp_path, kind, optimizer):
    """kind "graph" builds the graph again over the saved data sources; "saved graph" loads the graph
    itself (nodes, handles, training styles, format) with them."""
    device = repeatable
    uninterrupted = make(device, kind, optimizer)
    train(uninterrupted, range(N_STEPS + M_STEPS))
    expected = reference_values(uninterrupted)

    paused = make(device, kind, optimizer)
    train(paused, range(N_STEPS))
    mpsx.save(paused.checkpoint() if kind == "saved graph" else paused.state_dict(),
              tmp_path / "checkpoint.safetensors")
    saved = reference_values(paused)
    isolated(device, f"""
device.deterministic = True
model = resume(device, {kind!r}, {optimizer!r}, {str(tmp_path / "checkpoint.safetensors")!r})
if {kind!r} != "hand":  # the hand model reloads its kernels on the first step's command buffer
    np.savez({str(tmp_path / "loaded.npz")!r}, **reference_values(model))
train(model, range({N_STEPS}, {N_STEPS + M_STEPS}))
np.savez({str(tmp_path / "resumed.npz")!r}, **reference_values(model))
""", timeout=300)
    resumed = dict(np.load(tmp_path / "resumed.npz"))
    if kind != "hand":
        assert_resumed(resumed, expected, dict(np.load(tmp_path / "loaded.npz")), saved)
    else:
        assert_resumed(resumed, expected, None, None)
    assert any(name.endswith("momentum0") and np.any(a) for name, a in resumed.items())

"""NNOptimizerStochasticGradientDescent, NNOptimizerAdam and NNOptimizerRMSProp
against the formulas of MPSNNOptimizers.h written in numpy and against
torch.optim where the two agree; on vectors, on convolution states and
through ConvolutionWeights(optimizer=...) in a small training loop."""

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import mpsx

R = mpsx.NNRegularizationType
FLT_MAX = float(np.finfo(np.float32).max)

# Keywords of the optimizer's own vectors, single and listed.
SINGLE = {"m": "input_momentum_vector", "v": "input_velocity_vector", "max": "maximum_velocity_vector",
          "s": "input_sum_of_squares_vector"}
LISTED = {k: name + "s" for k, name in SINGLE.items()}


# ---------------------------------------------------------------- the numpy reference

def prepared(g, value, o):
    """The gradient an update uses: clipped, then rescaled, then the regularization term."""
    if "clip" in o:
        g = np.clip(g, *o["clip"])
    g = g * o.get("rescale", 1.0)
    if "l1" in o:
        g = g + o["l1"] * np.sign(value)
    if "l2" in o:
        g = g + o["l2"] * value
    return g


def reference_step(kind, o, value, g, s, t=None):
    """One update of MPSNNOptimizers.h in float64. s holds the optimizer's vectors
    (updated in place); t is Adam's time step of this update."""
    g = prepared(g, value, o)
    lr = o["lr"]
    if kind == "sgd":
        if "m" not in s:
            return value - lr * g
        mu = o["momentum"]
        if o.get("nesterov"):
            s["m"] = mu * s["m"] + g
            return value - lr * (g + s["m"] * mu)
        s["m"] = mu * s["m"] + lr * g
        return value - s["m"]
    if kind == "adam":
        b1, b2 = o.get("beta1", 0.9), o.get("beta2", 0.999)
        rate = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        velocity = s["v"]
        if "max" in s:
            s["max"] = np.maximum(s["max"], s["v"])
            velocity = s["max"]
        return value - rate * s["m"] / (np.sqrt(velocity) + o.get("eps", 1e-8))
    decay = o.get("decay", 0.9)
    s["s"] = decay * s["s"] + (1 - decay) * g * g
    return value - lr * g / (np.sqrt(s["s"]) + o.get("eps", 1e-8))


def make_optimizer(device, kind, o):
    regularization = R.L1 if "l1" in o else R.L2 if "l2" in o else R.NONE
    clip = o.get("clip", (-FLT_MAX, FLT_MAX))
    d = mpsx.NNOptimizerDescriptor(learning_rate=o["lr"], gradient_rescale=o.get("rescale", 1.0),
                                   apply_gradient_clipping="clip" in o, gradient_clip_max=clip[1],
                                   gradient_clip_min=clip[0], regularization_type=regularization,
                                   regularization_scale=o.get("l1", o.get("l2", 0.0)))
    if kind == "sgd":
        return mpsx.NNOptimizerStochasticGradientDescent(device, momentum_scale=o.get("momentum", 0.0),
                                                         use_nesterov_momentum=o.get("nesterov", False),
                                                         optimizer_descriptor=d)
    if kind == "adam":
        return mpsx.NNOptimizerAdam(device, beta1=o.get("beta1", 0.9), beta2=o.get("beta2", 0.999),
                                    epsilon=o.get("eps", 1e-8), time_step=o.get("time_step", 0),
                                    optimizer_descriptor=d)
    return mpsx.NNOptimizerRMSProp(device, decay=o.get("decay", 0.9), epsilon=o.get("eps", 1e-8),
                                   optimizer_descriptor=d)


def vector_names(kind, o):
    """The optimizer's vectors a case passes."""
    if kind == "sgd":
        return ["m"] if o.get("with_momentum", True) else []
    if kind == "adam":
        return ["m", "v", "max"] if o.get("amsgrad") else ["m", "v"]
    return ["s"]


def initial(rng, name, n):
    """Starting vectors: any values the formulas accept (the squares non-negative)."""
    a = rng.standard_normal(n) * 0.1
    return np.abs(a) if name in ("v", "max", "s") else a


CASES = [
    ("sgd", dict(lr=0.1, with_momentum=False)),
    ("sgd", dict(lr=0.1, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.8, nesterov=True)),
    ("sgd", dict(lr=0.1, momentum=0.9, rescale=0.5, clip=(-0.3, 0.2))),
    ("sgd", dict(lr=0.1, momentum=0.5, l1=0.02)),
    ("sgd", dict(lr=0.1, with_momentum=False, l2=0.05, rescale=2.0)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-3, time_step=5, clip=(-0.5, 0.5), l2=0.01)),
    ("adam", dict(lr=0.02, amsgrad=True, l1=0.01, rescale=0.25)),
    ("rmsprop", dict(lr=0.01)),
    ("rmsprop", dict(lr=0.01, decay=0.7, eps=1e-4, clip=(-0.2, 0.4), l2=0.03, rescale=3.0)),
]
CASE_IDS = [f"{k}-{'-'.join(str(key) for key in o if key != 'lr')}" for k, o in CASES]


def synchronized_run(device, encode, *items):
    cb = device.command_queue.command_buffer()
    encode(cb)
    for item in items:
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


# ---------------------------------------------------------------- vectors

@pytest.mark.parametrize("kind, o", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
def test_vectors_match_formulas(device, rng, kind, o, in_place):
    n = 70001 if kind == "adam" and o.get("amsgrad") else 1003  # the large one runs on several threads
    optimizer = make_optimizer(device, kind, o)
    names = vector_names(kind, o)
    values = rng.standard_normal(n)
    state = {name: initial(rng, name, n) for name in names}
    vectors = {name: mpsx.Vector.from_numpy(device, state[name].astype(np.float32)) for name in names}
    state = {name: a.astype(np.float32).astype(np.float64) for name, a in state.items()}
    current = mpsx.Vector.from_numpy(device, values.astype(np.float32))
    spare = current if in_place else mpsx.Vector(device, n)
    values = values.astype(np.float32).astype(np.float64)
    t = o.get("time_step", 0)
    for step in range(3):
        g = (rng.standard_normal(n) * 0.5).astype(np.float32)
        gradient = mpsx.Vector.from_numpy(device, g)
        arguments = {SINGLE[name]: vectors[name] for name in names}
        synchronized_run(device, lambda cb: optimizer.encode(cb, input_gradient_vector=gradient,
                                                             input_values_vector=current,
                                                             result_values_vector=spare, **arguments),
                         current, spare, *vectors.values())
        before = values
        t += 1
        values = reference_step(kind, o, values, g.astype(np.float64), state, t)
        np.testing.assert_allclose(spare.to_numpy(), values, rtol=1e-5, atol=1e-6)
        for name in names:
            np.testing.assert_allclose(vectors[name].to_numpy(), state[name], rtol=1e-5, atol=1e-7)
        if not in_place:  # the source is read, never written
            np.testing.assert_allclose(current.to_numpy(), before, rtol=1e-6, atol=1e-7)
            current, spare = spare, current
    if kind == "adam":
        assert optimizer.time_step == o.get("time_step", 0) + 3


@pytest.mark.parametrize("kind, o", [CASES[i] for i in (1, 8, 9)], ids=[CASE_IDS[i] for i in (1, 8, 9)])
@pytest.mark.parametrize("offset", [0, 1, 4], ids=lambda b: f"offset{b}")
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_values_at_any_offset_match_formulas(device, rng, kind, o, offset, dtype):
    """An in-place update of values `offset` elements into their buffer matches the formulas and writes
    nothing before them. (On cuda, arrays that are all aligned to a vector of 4 values go a vector to a
    load, others one value; 4099 values leave a remainder of 3.)"""
    n = 4099
    data_type = mpsx.DataType.FLOAT32 if dtype == np.float32 else mpsx.DataType.FLOAT16
    optimizer = make_optimizer(device, kind, o)
    names = vector_names(kind, o)
    state = {name: initial(rng, name, n).astype(dtype) for name in names}
    vectors = {name: mpsx.Vector.from_numpy(device, a) for name, a in state.items()}
    values = rng.standard_normal(n).astype(dtype)
    backing = mpsx.Vector.from_numpy(device, np.concatenate([np.full(offset, 7, dtype), values]))
    current = mpsx.Vector(buffer=backing.buffer, offset=offset * np.dtype(dtype).itemsize,
                          descriptor=mpsx.VectorDescriptor(n, data_type))
    g = rng.standard_normal(n).astype(dtype)
    gradient = mpsx.Vector.from_numpy(device, g)
    arguments = {SINGLE[name]: vectors[name] for name in names}
    synchronized_run(device, lambda cb: optimizer.encode(cb, input_gradient_vector=gradient, input_values_vector=current,
                                                         result_values_vector=current, **arguments),
                     backing, *vectors.values())
    state = {name: a.astype(np.float64) for name, a in state.items()}
    expected = reference_step(kind, o, values.astype(np.float64), g.astype(np.float64), state, 1)
    # float16 results are the float32 ones rounded once.
    rtol, atol = (1e-5, 1e-6) if dtype == np.float32 else (1e-3, 1e-4)
    np.testing.assert_allclose(current.to_numpy(), expected, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(backing.to_numpy()[:offset], 7)
    for name in names:
        np.testing.assert_allclose(vectors[name].to_numpy(), state[name], rtol=rtol, atol=atol / 10)


def test_float16_vectors(device, rng):
    n = 600
    o = dict(lr=0.01, l2=0.01)
    optimizer = make_optimizer(device, "adam", o)
    values = rng.standard_normal(n).astype(np.float16)
    v = mpsx.Vector.from_numpy(device, values)
    m = mpsx.Vector(device, n, mpsx.DataType.FLOAT16)
    s = mpsx.Vector(device, n, mpsx.DataType.FLOAT16)
    state = {"m": np.zeros(n), "v": np.zeros(n)}
    expected = values.astype(np.float64)
    for t in (1, 2):
        g = rng.standard_normal(n).astype(np.float16)
        gradient = mpsx.Vector.from_numpy(device, g)
        synchronized_run(device, lambda cb: optimizer.encode(cb, gradient, v, m, s, v), v, m, s)
        expected = reference_step("adam", o, expected, g.astype(np.float64), state, t)
    assert v.to_numpy().dtype == np.float16
    np.testing.assert_allclose(v.to_numpy(), expected, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(m.to_numpy(), state["m"], rtol=2e-3, atol=1e-4)


# ---------------------------------------------------------------- torch.optim

TORCH_CASES = [
    ("sgd", dict(lr=0.1, with_momentum=False), lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("sgd", dict(lr=0.1, momentum=0.9, nesterov=True),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)),
    ("sgd", dict(lr=0.1, momentum=0.9, l2=0.01), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("adam", dict(lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    ("adam", dict(lr=0.01, beta1=0.8, beta2=0.95, amsgrad=True),
     lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95), amsgrad=True)),
    ("adam", dict(lr=0.01, l2=0.02), lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.02)),
    ("rmsprop", dict(lr=0.01), lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9)),
    ("rmsprop", dict(lr=0.01, decay=0.99, l2=0.01), lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.99,
                                                                                  weight_decay=0.01)),
]


@pytest.mark.parametrize("kind, o, make_torch", TORCH_CASES, ids=[c[0] + str(i) for i, c in enumerate(TORCH_CASES)])
def test_vectors_match_torch(device, rng, kind, o, make_torch):
    # MPS's vectors start at zero as torch's state does; with one optimizer
    # per parameter, Adam's time step advances as torch's.
    n = 257
    start = rng.standard_normal(n).astype(np.float32)
    parameter = torch.nn.Parameter(torch.from_numpy(start.copy()))
    reference = make_torch([parameter])
    optimizer = make_optimizer(device, kind, o)
    values = mpsx.Vector.from_numpy(device, start)
    vectors = {name: mpsx.Vector(device, n) for name in vector_names(kind, o)}
    for _ in range(4):
        g = rng.standard_normal(n).astype(np.float32)
        parameter.grad = torch.from_numpy(g.copy())
        reference.step()
        gradient = mpsx.Vector.from_numpy(device, g)
        synchronized_run(device, lambda cb: optimizer.encode(
            cb, input_gradient_vector=gradient, input_values_vector=values, result_values_vector=values,
            **{SINGLE[name]: v for name, v in vectors.items()}), values)
        np.testing.assert_allclose(values.to_numpy(), parameter.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_sgd_momentum_holds_the_learning_rate(device, rng):
    # MPS: m = mu m + lr g; torch: buf = mu buf + g, step lr buf. After the
    # learning rate changes, MPS's momentum still carries the old rate.
    n = 64
    start = rng.standard_normal(n).astype(np.float32)
    parameter = torch.nn.Parameter(torch.from_numpy(start.copy()))
    reference = torch.optim.SGD([parameter], lr=0.1, momentum=0.9)
    o = dict(lr=0.1, momentum=0.9)
    sgd = make_optimizer(device, "sgd", o)
    values, m = mpsx.Vector.from_numpy(device, start), mpsx.Vector(device, n)
    expected, state = start.astype(np.float64), {"m": np.zeros(n)}
    for lr in (0.1, 0.01):
        sgd.learning_rate = lr
        o["lr"] = lr
        for group in reference.param_groups:
            group["lr"] = lr
        g = rng.standard_normal(n).astype(np.float32)
        parameter.grad = torch.from_numpy(g.copy())
        reference.step()
        expected = reference_step("sgd", o, expected, g.astype(np.float64), state)
        synchronized_run(device, lambda cb: sgd.encode(cb, mpsx.Vector.from_numpy(device, g), values, m, values),
                         values)
    np.testing.assert_allclose(values.to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert np.abs(values.to_numpy() - parameter.detach().numpy()).max() > 1e-3


# ---------------------------------------------------------------- convolution states

def convolution_problem(device, rng, bias=True):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    w = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32) if bias else None
    source = mpsx.ConvolutionWeights(d, w, b)
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    x = mpsx.Image.from_numpy(device, rng.standard_normal((2, 2, 5, 5)).astype(np.float32))
    dy = mpsx.Image.from_numpy(device, rng.standard_normal((2, 4, 5, 5)).astype(np.float32))
    return d, conv, gradient, x, dy, w, b


_SHARED = {}


def shared_problem(device, command_buffer):
    """One convolution problem per device for the state tests (its primitives are
    built once), its kernel reloaded with the starting weights on command_buffer."""
    if device not in _SHARED:
        _SHARED[device] = convolution_problem(device, np.random.default_rng(7))
    d, conv, gradient, x, dy, w, b = _SHARED[device]
    conv.reload_weights_and_biases(command_buffer, mpsx.CNNConvolutionWeightsAndBiasesState(device, w, b))
    return _SHARED[device]


STATE_CASES = [CASES[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10)] + [("sgd", dict(lr=0.1, momentum=0.9,
                                                                                   weights_only=True))]


@pytest.mark.parametrize("kind, o", STATE_CASES, ids=[f"{k}{i}" for i, (k, _) in enumerate(STATE_CASES)])
@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
def test_convolution_states_match_formulas(device, rng, kind, o, in_place):
    cb = device.command_queue.command_buffer()
    d, conv, gradient, x, dy, w, b = shared_problem(device, cb)
    optimizer = make_optimizer(device, kind, o)
    names = vector_names(kind, o)
    arrays = 1 if o.get("weights_only") else 2
    sizes = [w.size, 4][:arrays]
    starts = {name: [initial(rng, name, size).astype(np.float32) for size in sizes] for name in names}
    lists = {name: [mpsx.Vector.from_numpy(device, a) for a in starts[name]] for name in names}
    states = [{name: starts[name][i].astype(np.float64) for name in names} for i in range(arrays)]
    weights, biases = w.reshape(-1).astype(np.float64), b.astype(np.float64)
    t = o.get("time_step", 0)
    for step in range(3):
        cb = cb or device.command_queue.command_buffer()
        _, state = conv.encode(cb, x, destination_state=True)
        gradient.encode(cb, dy, x, state)
        seen = conv.export_weights_and_biases(cb)  # what the kernel holds now
        source = conv.export_weights_and_biases(cb)
        result = source if in_place else mpsx.CNNConvolutionWeightsAndBiasesState(
            device, np.zeros(w.size, np.float32), np.full(4, 7.0, np.float32))
        optimizer.encode(cb, convolution_gradient_state=state, convolution_source_state=source, result_state=result,
                         **{LISTED[name]: vs for name, vs in lists.items()})
        conv.reload_weights_and_biases(cb, result)
        for item in [state, seen, result] + [v for vs in lists.values() for v in vs]:
            item.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error
        cb = None
        # The kernel was reloaded with the previous step's result.
        np.testing.assert_allclose(seen.weights.to_numpy(), weights, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(seen.biases.to_numpy(), biases, rtol=1e-5, atol=1e-6)
        t += 1
        gw = state.gradient_for_weights.to_numpy().reshape(-1).astype(np.float64)
        gb = state.gradient_for_biases.to_numpy().astype(np.float64)
        weights = reference_step(kind, o, weights, gw, states[0], t)
        if arrays == 2:
            biases = reference_step(kind, o, biases, gb, states[1], t)
        elif not in_place:
            biases = np.full(4, 7.0)  # lists of one vector leave the result's biases as they were
        np.testing.assert_allclose(result.weights.to_numpy(), weights, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.biases.to_numpy(), biases, rtol=1e-5, atol=1e-6)
        for name in names:
            for i in range(arrays):
                np.testing.assert_allclose(lists[name][i].to_numpy(), states[i][name], rtol=1e-5, atol=1e-7)
    if kind == "adam":  # one step per encode, weights and biases together
        assert optimizer.time_step == o.get("time_step", 0) + 3


def test_reload_reads_its_state_before_a_later_update_of_it(device, rng):
    # reload, then an update of the state reloaded from: the kernel keeps the
    # values of the reload, whatever order the device runs small copies in.
    d, conv, gradient, x, dy, w, b = convolution_problem(device, rng)
    w2 = (rng.standard_normal(d.weights_shape) * 0.3).astype(np.float32)
    b2 = rng.standard_normal(4).astype(np.float32)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    weights = mpsx.CNNConvolutionWeightsAndBiasesState(device, w2, b2)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, x, destination_state=True)
    gradient.encode(cb, dy, x, state)
    conv.reload_weights_and_biases(cb, weights)
    sgd.encode(cb, convolution_gradient_state=state, convolution_source_state=weights, result_state=weights)
    y = conv.encode(cb, x)
    for item in (y, state, weights):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error
    xt = torch.from_numpy(x.to_numpy().astype(np.float64))
    expected = F.conv2d(xt, torch.from_numpy(w2.astype(np.float64)).permute(0, 3, 1, 2),
                        torch.from_numpy(b2.astype(np.float64)), padding=1).numpy()
    np.testing.assert_allclose(y.to_numpy(), expected, rtol=1e-4, atol=1e-4)
    gw = state.gradient_for_weights.to_numpy().reshape(-1)
    np.testing.assert_allclose(weights.weights.to_numpy(), w2.reshape(-1) - 0.5 * gw, rtol=1e-5, atol=1e-6)


def test_convolution_state_adam_matches_torch(device):
    # One encode updates weights and biases with one time step: torch.optim.Adam
    # over the convolution's two parameters, stepped once per training step.
    cb = device.command_queue.command_buffer()
    d, conv, gradient, x, dy, w, b = shared_problem(device, cb)
    adam = mpsx.NNOptimizerAdam(device, learning_rate=0.01)
    parameters = [torch.nn.Parameter(torch.from_numpy(a.reshape(-1).copy())) for a in (w, b)]
    reference = torch.optim.Adam(parameters, lr=0.01)
    lists = {"input_momentum_vectors": [mpsx.Vector(device, w.size), mpsx.Vector(device, 4)],
             "input_velocity_vectors": [mpsx.Vector(device, w.size), mpsx.Vector(device, 4)]}
    weights = conv.export_weights_and_biases(cb)
    for _ in range(3):
        _, state = conv.encode(cb, x, destination_state=True)
        gradient.encode(cb, dy, x, state)
        adam.encode(cb, convolution_gradient_state=state, convolution_source_state=weights, result_state=weights,
                    **lists)
        conv.reload_weights_and_biases(cb, weights)
        state.synchronize(cb)
        weights.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        for p, g in zip(parameters, (state.gradient_for_weights, state.gradient_for_biases)):
            p.grad = torch.from_numpy(g.to_numpy().reshape(-1).copy())
        reference.step()
        np.testing.assert_allclose(weights.weights.to_numpy(), parameters[0].detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(weights.biases.to_numpy(), parameters[1].detach().numpy(), rtol=1e-5, atol=1e-6)
        cb = device.command_queue.command_buffer()
    assert adam.time_step == 3


# ---------------------------------------------------------------- ConvolutionWeights(optimizer=...)

def test_training_with_convolution_weights_matches_reference(device, rng):
    # conv 3x3 (ReLU) -> fully connected -> softmax cross entropy, every
    # update encoded by the data sources; the reference: torch autograd for
    # the gradients, the numpy formulas for the updates.
    n, classes = 4, 5
    x = rng.standard_normal((n, 2, 6, 6)).astype(np.float32)
    labels_of = rng.integers(0, classes, n)
    one_hot = np.eye(classes, dtype=np.float32)[labels_of].reshape(n, classes, 1, 1)
    cd = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4, fused_neuron_descriptor=mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU))
    fd = mpsx.CNNConvolutionDescriptor(6, 6, 4, classes)
    parameters = [(rng.standard_normal(cd.weights_shape) * 0.3).astype(np.float32),
                  (rng.standard_normal(4) * 0.1).astype(np.float32),
                  (rng.standard_normal(fd.weights_shape) * 0.1).astype(np.float32),
                  (rng.standard_normal(classes) * 0.1).astype(np.float32)]
    conv_o = dict(lr=0.05, momentum=0.9, l2=1e-3)
    fc_o = dict(lr=0.01, eps=1e-6)
    conv_source = mpsx.ConvolutionWeights(cd, parameters[0], parameters[1],
                                          optimizer=make_optimizer(device, "sgd", conv_o))
    fc_source = mpsx.ConvolutionWeights(fd, parameters[2], parameters[3],
                                        optimizer=make_optimizer(device, "adam", fc_o))
    conv, conv_gradient = mpsx.CNNConvolution(device, conv_source), mpsx.CNNConvolutionGradient(device, conv_source)
    fc, fc_gradient = mpsx.CNNFullyConnected(device, fc_source), mpsx.CNNFullyConnectedGradient(device, fc_source)
    loss = mpsx.CNNLoss(device, mpsx.CNNLossDescriptor(mpsx.CNNLossType.SOFTMAX_CROSS_ENTROPY,
                                                       mpsx.CNNReductionType.MEAN, reduce_across_batch=True))
    labels = mpsx.CNNLossLabels(device, one_hot)
    batch = mpsx.ImageBatch.from_numpy(device, x)

    expected = [p.astype(np.float64) for p in parameters]
    states = [{"m": np.zeros(p.size)} for p in parameters[:2]] + \
             [{"m": np.zeros(p.size), "v": np.zeros(p.size)} for p in parameters[2:]]
    for t in (1, 2, 3):
        cb = device.command_queue.command_buffer()
        h, h_states = conv.encode_batch(cb, batch, destination_states=True)
        y, y_states = fc.encode_batch(cb, h, destination_states=True)
        dy = loss.encode_batch(cb, y, labels)
        dh = fc_gradient.encode_batch(cb, dy, h, y_states)
        conv_gradient.encode_batch(cb, dh, batch, h_states)
        fc.encode_weights_and_bias_update(cb, y_states[0])
        conv.encode_weights_and_bias_update(cb, h_states[0])
        with pytest.raises(mpsx.SynchronizationError, match="not committed"):
            conv_source.weights()
        cb.commit()
        cb.wait_until_completed()
        assert cb.status == "completed", cb.error

        tensors = [torch.tensor(p, requires_grad=True) for p in expected]
        cw, cb_, fw, fb = tensors
        xt = torch.from_numpy(x.astype(np.float64))
        ht = torch.relu(F.conv2d(xt, cw.permute(0, 3, 1, 2), cb_, padding=1))
        yt = ht.permute(0, 2, 3, 1).reshape(n, -1) @ fw.reshape(classes, -1).T + fb
        torch.nn.CrossEntropyLoss()(yt, torch.from_numpy(labels_of)).backward()
        for i, (kind, o) in enumerate([("sgd", conv_o)] * 2 + [("adam", fc_o)] * 2):
            g = tensors[i].grad.numpy().reshape(-1)
            expected[i] = reference_step(kind, o, expected[i].reshape(-1), g, states[i], t).reshape(expected[i].shape)
        trained = [conv_source.weights(), conv_source.bias_terms(), fc_source.weights(), fc_source.bias_terms()]
        for got, want in zip(trained, expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert fc_source.optimizer.time_step == 3
    # A kernel made from the data source now loads the trained weights.
    fresh = mpsx.CNNConvolution(device, conv_source)
    cb = device.command_queue.command_buffer()
    exported = fresh.export_weights_and_biases(cb)
    exported.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(exported.weights.to_numpy(), expected[0].reshape(-1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_convolution_weights_without_bias_terms(device, rng, momentum):
    # Only the weights train; without momentum the update takes no vector lists.
    d, _, _, x, dy, w, _ = convolution_problem(device, rng, bias=False)
    source = mpsx.ConvolutionWeights(d, w, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.1, momentum_scale=momentum))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)
    expected, state = w.reshape(-1).astype(np.float64), {"m": np.zeros(w.size)} if momentum else {}
    for _ in range(2):
        cb = device.command_queue.command_buffer()
        _, s = conv.encode(cb, x, destination_state=True)
        gradient.encode(cb, dy, x, s)
        conv.encode_weights_and_bias_update(cb, s)
        s.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        expected = reference_step("sgd", dict(lr=0.1, momentum=momentum), expected,
                                  s.gradient_for_weights.to_numpy().reshape(-1).astype(np.float64), state)
    np.testing.assert_allclose(source.weights().reshape(-1), expected, rtol=1e-5, atol=1e-6)
    assert source.bias_terms() is None
    cb = device.command_queue.command_buffer()
    exported = conv.export_weights_and_biases(cb)
    exported.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_array_equal(exported.biases.to_numpy(), np.zeros(4, np.float32))


@pytest.mark.parametrize("bias", [True, False], ids=["biases", "no_biases"])
def test_convolution_weights_keep_their_weights_when_the_kernel_reloads_others(device, rng, bias):
    """A kernel's ConvolutionWeights updates the kernel's weights in place, which then hold the data source's
    (no reload): a reload of other weights into the kernel later leaves the data source's as its update left
    them, and the next update trains the reloaded ones. Forward and gradient on command buffers of their own."""
    d, _, _, x, dy, w, b = convolution_problem(device, rng, bias)
    source = mpsx.ConvolutionWeights(d, w, b, optimizer=mpsx.NNOptimizerStochasticGradientDescent(
        device, learning_rate=0.1))
    conv, gradient = mpsx.CNNConvolution(device, source), mpsx.CNNConvolutionGradient(device, source)

    def step(w, b):
        """One training step; the weights and biases SGD makes of w and b (the biases stay without bias terms)."""
        forward, backward = device.command_queue.command_buffer(), device.command_queue.command_buffer()
        _, s = conv.encode(forward, x, destination_state=True)
        forward.commit()
        gradient.encode(backward, dy, x, s)
        conv.encode_weights_and_bias_update(backward, s)
        s.synchronize(backward)
        backward.commit()
        backward.wait_until_completed()
        assert backward.status == "completed", backward.error
        trained = w.astype(np.float64) - 0.1 * s.gradient_for_weights.to_numpy().reshape(w.shape)
        return trained, b if not bias else b.astype(np.float64) - 0.1 * s.gradient_for_biases.to_numpy()

    def kernel_weights():
        cb = device.command_queue.command_buffer()
        exported = conv.export_weights_and_biases(cb)
        exported.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        return exported.weights.to_numpy().reshape(w.shape), exported.biases.to_numpy()

    zero = np.zeros(4, np.float32)
    trained_w, trained_b = step(w, b)
    np.testing.assert_allclose(kernel_weights()[0], trained_w, rtol=1e-5, atol=1e-6)  # the source not read yet
    other_w = rng.standard_normal(w.shape).astype(np.float32)
    other_b = rng.standard_normal(4).astype(np.float32) if bias else zero
    cb = device.command_queue.command_buffer()
    conv.reload_weights_and_biases(cb, mpsx.CNNConvolutionWeightsAndBiasesState(device, other_w.reshape(-1), other_b))
    cb.commit()
    cb.wait_until_completed()
    got_w, got_b = kernel_weights()
    np.testing.assert_array_equal(got_w, other_w)
    np.testing.assert_array_equal(got_b, other_b)
    np.testing.assert_allclose(source.weights(), trained_w, rtol=1e-5, atol=1e-6)
    if bias:
        np.testing.assert_allclose(source.bias_terms(), trained_b, rtol=1e-5, atol=1e-6)
    else:
        assert source.bias_terms() is None
    retrained_w, retrained_b = step(other_w, other_b)
    np.testing.assert_allclose(source.weights(), retrained_w, rtol=1e-5, atol=1e-6)
    got_w, got_b = kernel_weights()
    np.testing.assert_allclose(got_w, retrained_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, retrained_b if bias else other_b, rtol=1e-5, atol=1e-6)


def test_convolution_weights_copy_and_pickle(device, rng):
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    adam = mpsx.NNOptimizerAdam(device, learning_rate=0.5, time_step=4)
    source = mpsx.ConvolutionWeights(d, np.ones(d.weights_shape, np.float32), np.zeros(3, np.float32), adam,
                                     label="layer")
    assert source.optimizer is adam and source.label() == "layer"
    for copy in (source.copy(), pickle.loads(pickle.dumps(source))):
        assert isinstance(copy.optimizer, mpsx.NNOptimizerAdam) and copy.optimizer is not adam
        assert (copy.optimizer.learning_rate, copy.optimizer.time_step) == (0.5, 4)
        np.testing.assert_array_equal(copy.weights(), source.weights())
    with pytest.raises(TypeError, match="optimizer must be an mpsx.NNOptimizer"):
        mpsx.ConvolutionWeights(d, np.ones(d.weights_shape, np.float32), None, "sgd")


# ---------------------------------------------------------------- descriptor and properties

def test_descriptor_and_properties(device):
    d = mpsx.NNOptimizerDescriptor()
    assert (d.learning_rate, d.gradient_rescale, d.apply_gradient_clipping, d.regularization_type,
            d.regularization_scale) == (pytest.approx(0.001), 1.0, False, R.NONE, 0.0)
    assert (d.gradient_clip_min, d.gradient_clip_max) == (-FLT_MAX, FLT_MAX)
    d.learning_rate, d.regularization_type, d.regularization_scale = 0.5, R.L2, 0.25
    assert pickle.loads(pickle.dumps(d)) == d
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.25, momentum_scale=0.5,
                                                    use_nesterov_momentum=True, optimizer_descriptor=d)
    assert (sgd.learning_rate, sgd.momentum_scale, sgd.use_nesterov_momentum) == (0.25, 0.5, True)
    assert (sgd.regularization_type, sgd.regularization_scale, sgd.device) == (R.L2, 0.25, device)
    assert sgd.optimizer_descriptor.learning_rate == 0.25
    sgd.set_learning_rate(0.125)
    assert sgd.learning_rate == 0.125
    sgd.apply_gradient_clipping = True
    assert sgd.apply_gradient_clipping
    sgd.label = "conv1 update"
    assert sgd.label == "conv1 update"
    adam = mpsx.NNOptimizerAdam(device)
    assert (adam.learning_rate, adam.beta1, adam.beta2, adam.epsilon, adam.time_step) == \
        (pytest.approx(0.001), 0.9, 0.999, pytest.approx(1e-8), 0)
    adam.time_step = 7
    rms = mpsx.NNOptimizerRMSProp(device, 0.5)
    assert (rms.learning_rate, rms.decay, rms.epsilon) == (0.5, 0.9, pytest.approx(1e-8))
    for optimizer in (sgd, adam, rms):
        copy = pickle.loads(pickle.dumps(optimizer))
        assert type(copy) is type(optimizer) and copy.optimizer_descriptor == optimizer.optimizer_descriptor
    assert pickle.loads(pickle.dumps(adam)).time_step == 7
    assert pickle.loads(pickle.dumps(sgd)).use_nesterov_momentum


def test_learning_rate_and_clipping_apply_to_later_encodes(device):
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=1.0, optimizer_descriptor=
                                                    mpsx.NNOptimizerDescriptor(gradient_clip_max=0.5,
                                                                               gradient_clip_min=-0.5))
    g = mpsx.Vector.from_numpy(device, np.array([2.0, -0.25], np.float32))
    v = mpsx.Vector(device, 2)
    cb = device.command_queue.command_buffer()
    sgd.encode(cb, g, v, None, v)  # lr 1, no clipping
    sgd.learning_rate = 2.0
    sgd.apply_gradient_clipping = True
    sgd.encode(cb, g, v, None, v)  # lr 2, clipped to [-0.5, 0.5]
    v.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(v.to_numpy(), [-2.0 - 1.0, 0.25 + 0.5])


def test_adam_time_step(device, rng):
    adam = mpsx.NNOptimizerAdam(device, learning_rate=0.1, time_step=10)
    n = 5
    g, v, m, s = (mpsx.Vector.from_numpy(device, rng.standard_normal(n).astype(np.float32)) for _ in range(4))
    s = mpsx.Vector.from_numpy(device, np.abs(s.to_numpy()))
    cb = device.command_queue.command_buffer()
    count = cb.command_count
    with pytest.raises(TypeError):
        adam.encode(cb, g, v, m, None, v)
    assert adam.time_step == 10 and cb.command_count == count  # a refused encode changes nothing
    adam.encode(cb, g, v, m, s, v)
    assert adam.time_step == 11 and cb.command_count == count + 1
    adam.time_step = 0
    adam.encode(cb, g, v, m, s, v)
    assert adam.time_step == 1
    cb.commit()
    cb.wait_until_completed()
    for written in (v, m, s):  # every vector the update writes is marked written by the command buffer
        with pytest.raises(mpsx.SynchronizationError, match="without synchronize"):
            written.to_numpy()
    g.to_numpy()


# ---------------------------------------------------------------- bad input

def test_vector_errors(device, rng):
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1, momentum_scale=0.9)
    adam, rms = mpsx.NNOptimizerAdam(device), mpsx.NNOptimizerRMSProp(device)
    v8, g8, m8 = mpsx.Vector(device, 8), mpsx.Vector(device, 8), mpsx.Vector(device, 8)
    v7 = mpsx.Vector(device, 7)
    h8 = mpsx.Vector(device, 8, mpsx.DataType.FLOAT16)
    cb = device.command_queue.command_buffer()
    name = "MPSNNOptimizerStochasticGradientDescent"
    with pytest.raises(mpsx.ShapeError, match=f"{name}: input_gradient_vector has 7 values; expected 8, as "
                                              "input_values_vector"):
        sgd.encode(cb, v7, v8, m8, v8)
    with pytest.raises(mpsx.ShapeError, match="input_momentum_vector has 7 values; expected 8"):
        sgd.encode(cb, g8, v8, v7, v8)
    with pytest.raises(mpsx.ShapeError, match="result_values_vector has 7 values; expected 8"):
        sgd.encode(cb, g8, v8, m8, v7)
    with pytest.raises(TypeError, match="input_momentum_vector is float16; expected float32, as input_values_vector"):
        sgd.encode(cb, g8, v8, h8, v8)
    with pytest.raises(TypeError, match="input_values_vector is uint8; optimizers update float32 or float16"):
        u8 = mpsx.Vector(device, 8, mpsx.DataType.UINT8)
        sgd.encode(cb, u8, u8, None, u8)
    with pytest.raises(TypeError, match="MPSNNOptimizerAdam: expected input_momentum_vector, given None"):
        adam.encode(cb, g8, v8, None, m8, v8)
    with pytest.raises(TypeError, match="MPSNNOptimizerAdam: expected input_velocity_vector, given None"):
        adam.encode(cb, input_gradient_vector=g8, input_values_vector=v8, input_momentum_vector=m8,
                    result_values_vector=v8)
    with pytest.raises(TypeError, match="MPSNNOptimizerRMSProp: expected input_sum_of_squares_vector, given None"):
        rms.encode(cb, g8, v8, None, v8)
    with pytest.raises(TypeError, match="expected input_gradient_vector, given None"):
        sgd.encode(cb)
    with pytest.raises(TypeError, match="result_values_vector, given None"):
        sgd.encode(cb, g8, v8)
    with pytest.raises(TypeError, match="input_momentum_vector must be an mpsx.Vector, given ndarray"):
        sgd.encode(cb, g8, v8, np.zeros(8, np.float32), v8)
    with pytest.raises(ValueError, match="input_momentum_vector and input_velocity_vector share memory"):
        adam.encode(cb, g8, v8, m8, m8, v8)
    with pytest.raises(ValueError, match="input_values_vector and input_momentum_vector share memory"):
        sgd.encode(cb, g8, v8, v8, v8)
    plain = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1)
    for optimizer, vectors in [(plain, {}), (sgd, dict(input_momentum_vector=m8)),
                               (adam, dict(input_momentum_vector=m8, input_velocity_vector=mpsx.Vector(device, 8))),
                               (rms, dict(input_sum_of_squares_vector=m8))]:
        # Only the values may be the result (in place); not the gradient the update reads.
        with pytest.raises(ValueError, match="input_gradient_vector and result_values_vector share memory; only the "
                                             "result may be the values themselves"):
            optimizer.encode(cb, input_gradient_vector=g8, input_values_vector=v8, result_values_vector=g8, **vectors)
        # Both read: the gradient may be the values.
        optimizer.encode(device.command_queue.command_buffer(), input_gradient_vector=g8, input_values_vector=g8,
                         result_values_vector=mpsx.Vector(device, 8), **vectors)
    with pytest.raises(TypeError, match="either vectors .* or states"):
        sgd.encode(cb, g8, v8, m8, v8, result_state=mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(3)))
    assert cb.command_count == 0
    cb.commit()
    with pytest.raises(mpsx.StateError, match="encode onto a new command buffer"):
        sgd.encode(cb, g8, v8, m8, v8)


def test_vectors_beyond_the_size_limit_never_reach_an_update(device):
    # Their byte counts once wrapped to 0 and an update wrote far past them.
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1)
    cb = device.command_queue.command_buffer()
    for data_type, size in ((mpsx.DataType.FLOAT32, 4), (mpsx.DataType.FLOAT16, 2)):
        with pytest.raises(mpsx.ShapeError, match=f"the byte count of a vector of 4611686018427387904 "
                                                  f"{data_type.name.lower()} values overflows: 4611686018427387904 "
                                                  f"\\* {size} is above 9223372036854775807"):
            sgd.encode(cb, mpsx.Vector(device, 2**62, data_type), mpsx.Vector(device, 2**62, data_type), None,
                       mpsx.Vector(device, 2**62, data_type))
    assert cb.command_count == 0


def test_state_errors(device, rng):
    d, conv, gradient, x, dy, w, b = convolution_problem(device, rng)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1, momentum_scale=0.9)
    adam = mpsx.NNOptimizerAdam(device)
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, x, destination_state=True)
    gradient.encode(cb, dy, x, state)
    weights = conv.export_weights_and_biases(cb)
    mw, mb = mpsx.Vector(device, w.size), mpsx.Vector(device, 4)
    name = "MPSNNOptimizerStochasticGradientDescent"

    def encode(optimizer=sgd, **kw):
        arguments = dict(convolution_gradient_state=state, convolution_source_state=weights, result_state=weights)
        arguments.update(kw)
        optimizer.encode(cb, **arguments)

    with pytest.raises(TypeError, match=f"{name}: expected an MPSCNNConvolutionGradientState as "
                                        "convolution_gradient_state, given an MPSCNNConvolutionWeightsAndBiasesState"):
        encode(convolution_gradient_state=weights, input_momentum_vectors=[mw, mb])
    with pytest.raises(TypeError, match="expected an MPSCNNConvolutionWeightsAndBiasesState as "
                                        "convolution_source_state, given an MPSCNNConvolutionGradientState"):
        encode(convolution_source_state=state)
    with pytest.raises(TypeError, match="as result_state, given None"):
        encode(result_state=None)
    with pytest.raises(TypeError, match="convolution_source_state must be an mpsx state, given ndarray"):
        encode(convolution_source_state=w)
    with pytest.raises(mpsx.ShapeError, match=f"{name}: input_momentum_vectors\\[1\\] has 3 values; expected 4, as "
                                              "the biases"):
        encode(input_momentum_vectors=[mw, mpsx.Vector(device, 3)])
    with pytest.raises(mpsx.ShapeError, match="input_momentum_vectors\\[0\\] has 4 values; expected 72, as the "
                                              "weights"):
        encode(input_momentum_vectors=[mb, mb])
    with pytest.raises(ValueError, match="input_momentum_vectors has 3 vectors; expected 1 \\(for the weights\\) or "
                                         "2 \\(for the weights and the biases\\)"):
        encode(input_momentum_vectors=[mw, mb, mb])
    with pytest.raises(ValueError, match="input_velocity_vectors has 1 vector\\(s\\), input_momentum_vectors 2; "
                                         "give each as many"):
        encode(adam, input_momentum_vectors=[mw, mb], input_velocity_vectors=[mpsx.Vector(device, w.size)])
    with pytest.raises(TypeError, match="MPSNNOptimizerAdam: expected input_momentum_vectors, given None"):
        encode(adam, input_velocity_vectors=[mw, mb])
    with pytest.raises(TypeError, match="input_momentum_vectors\\[1\\] must be an mpsx.Vector, given NoneType"):
        encode(input_momentum_vectors=[mw, None])
    with pytest.raises(TypeError, match="must be a list of mpsx.Vector"):
        encode(input_momentum_vectors=mw)
    with pytest.raises(mpsx.ShapeError, match="the weights buffer holds 12 bytes"):
        encode(result_state=mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(3, np.float32)))
    no_biases = mpsx.CNNConvolutionWeightsAndBiasesState(device, np.zeros(w.size, np.float32))
    with pytest.raises(mpsx.ShapeError, match="result_state has no biases buffer, but the biases are to be updated"):
        encode(input_momentum_vectors=[mw, mb], result_state=no_biases)
    with pytest.raises(ValueError, match="convolution_source_state and input_momentum_vectors share memory"):
        encode(input_momentum_vectors=[mw, mb],
               convolution_source_state=mpsx.CNNConvolutionWeightsAndBiasesState(device, mw.buffer, mb.buffer))
    unencoded = conv.result_state(x)
    with pytest.raises(mpsx.StateError, match="was not produced by a forward encode"):
        encode(convolution_gradient_state=unencoded, input_momentum_vectors=[mw, mb])
    count = cb.command_count
    encode(input_momentum_vectors=[mw], result_state=no_biases)  # lists of one: the weights alone
    assert cb.command_count == count + 1
    cb.commit()
    cb.wait_until_completed()
    assert cb.status == "completed", cb.error


def test_settings_errors(device):
    with pytest.raises(ValueError, match="gradient_clip_min \\(1\\) is above gradient_clip_max \\(-1\\)"):
        mpsx.NNOptimizerDescriptor(apply_gradient_clipping=True, gradient_clip_max=-1.0, gradient_clip_min=1.0)
    with pytest.raises(ValueError, match="is not a valid NNRegularizationType"):
        mpsx.NNOptimizerDescriptor(regularization_type=3)
    with pytest.raises(ValueError, match="beta1 must lie in \\[0, 1\\), given 1$"):
        mpsx.NNOptimizerAdam(device, beta1=1.0)
    with pytest.raises(ValueError, match="decay must lie in \\[0, 1\\]; given 1.5"):
        mpsx.NNOptimizerRMSProp(device, decay=1.5)
    with pytest.raises(TypeError, match="optimizer_descriptor must be an mpsx.NNOptimizerDescriptor, given dict"):
        mpsx.NNOptimizerAdam(device, optimizer_descriptor={})
    with pytest.raises(TypeError, match="use NNOptimizerStochasticGradientDescent"):
        mpsx.NNOptimizer(device)


def test_time_step_is_a_count(device):
    with pytest.raises(TypeError, match="time_step must be an int, given float 1.5"):
        mpsx.NNOptimizerAdam(device, time_step=1.5)
    with pytest.raises(ValueError, match="time_step counts updates; it must be non-negative, given -1"):
        mpsx.NNOptimizerAdam(device, time_step=-1)
    adam = mpsx.NNOptimizerAdam(device, time_step=3)
    with pytest.raises(ValueError, match="non-negative, given -2"):
        adam.time_step = -2
    assert adam.time_step == 3


def test_other_device_raises(device):
    others = [d for d in mpsx.devices() if d != device]
    if not others:
        pytest.skip("needs a second device")
    other = others[0]
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, 0.1)
    v = mpsx.Vector(device, 4)
    with pytest.raises(mpsx.DeviceMismatchError, match="input_gradient_vector is on device"):
        sgd.encode(device.command_queue.command_buffer(), mpsx.Vector(other, 4), v, None, v)
    with pytest.raises(mpsx.DeviceMismatchError, match="the command buffer is on device"):
        sgd.encode(other.command_queue.command_buffer(), v, v, None, v)
    _, conv, gradient, x, dy, w, b = convolution_problem(device, np.random.default_rng(0))
    cb = device.command_queue.command_buffer()
    _, state = conv.encode(cb, x, destination_state=True)
    elsewhere = mpsx.CNNConvolutionWeightsAndBiasesState(other, w, b)
    with pytest.raises(mpsx.DeviceMismatchError, match="convolution_source_state is on device"):
        sgd.encode(cb, convolution_gradient_state=state, convolution_source_state=elsewhere, result_state=elsewhere)


# ---------------------------------------------------------------- batch normalization states

def batch_normalization_problem(device, rng):
    """A batch normalization trained by statistics and gradients of one batch."""
    channels = 5
    x = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((3, channels, 4, 4)).astype(np.float32))
    dy = mpsx.ImageBatch.from_numpy(device, rng.standard_normal((3, channels, 4, 4)).astype(np.float32))
    gamma = (1 + rng.standard_normal(channels) * 0.1).astype(np.float32)
    beta = (rng.standard_normal(channels) * 0.1).astype(np.float32)
    source = mpsx.BatchNormalizationWeights(gamma, beta, np.zeros(channels, np.float32),
                                            np.ones(channels, np.float32))
    bn = mpsx.CNNBatchNormalization(device, source)
    kernels = (mpsx.CNNBatchNormalizationStatistics(device), mpsx.CNNBatchNormalizationStatisticsGradient(device))

    def encode_gradients(cb):
        state = bn.result_state(x)
        kernels[0].encode_batch(cb, x, state)
        bn.encode_batch(cb, x, batch_normalization_state=state)
        kernels[1].encode_batch(cb, dy, x, state)
        return state

    return bn, gamma, beta, encode_gradients


@pytest.mark.parametrize("kind, o", [CASES[1], CASES[2], CASES[6], CASES[9]],
                         ids=["sgd-momentum", "sgd-nesterov", "adam", "rmsprop"])
def test_batch_normalization_states_match_formulas(device, rng, kind, o):
    bn, gamma, beta, encode_gradients = batch_normalization_problem(device, rng)
    optimizer = make_optimizer(device, kind, o)
    names = vector_names(kind, o)
    lists = {name: [mpsx.Vector(device, 5), mpsx.Vector(device, 5)] for name in names}
    states = [{name: np.zeros(5) for name in names} for _ in range(2)]
    result = mpsx.CNNNormalizationGammaAndBetaState(device, gamma, beta)
    values = [gamma.astype(np.float64), beta.astype(np.float64)]
    for t in range(1, 4):
        cb = device.command_queue.command_buffer()
        state = encode_gradients(cb)
        used = state.gamma  # what the forward normalized with
        optimizer.encode(cb, batch_normalization_state=state, result_state=result,
                         **{LISTED[name]: vs for name, vs in lists.items()})
        bn.reload_gamma_and_beta(cb, result)
        for item in (state, result):
            item.synchronize(cb)
        cb.commit()
        cb.wait_until_completed()
        np.testing.assert_allclose(used.to_numpy(), values[0], rtol=1e-5, atol=1e-6)
        gradients = [state.gradient_for_gamma.to_numpy(), state.gradient_for_beta.to_numpy()]
        values = [reference_step(kind, o, v, g.astype(np.float64), s, t) for v, g, s in zip(values, gradients, states)]
        np.testing.assert_allclose(result.gamma.to_numpy(), values[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.beta.to_numpy(), values[1], rtol=1e-5, atol=1e-6)


def test_batch_normalization_gradient_and_source_states(device, rng):
    bn, gamma, beta, encode_gradients = batch_normalization_problem(device, rng)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    cb = device.command_queue.command_buffer()
    gradient_state = encode_gradients(cb)
    source_state = encode_gradients(cb)
    result = mpsx.CNNNormalizationGammaAndBetaState(device, np.zeros(5, np.float32), np.zeros(5, np.float32))
    sgd.encode(cb, batch_normalization_gradient_state=gradient_state, batch_normalization_source_state=source_state,
               input_momentum_vectors=[mpsx.Vector(device, 5)], result_state=result)  # gamma alone
    for item in (gradient_state, result):
        item.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    np.testing.assert_allclose(result.gamma.to_numpy(), gamma - 0.5 * gradient_state.gradient_for_gamma.to_numpy(),
                               rtol=1e-6)
    np.testing.assert_array_equal(result.beta.to_numpy(), 0)  # a list of one vector leaves beta


def test_batch_normalization_state_errors(device, rng):
    bn, gamma, beta, encode_gradients = batch_normalization_problem(device, rng)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.5)
    cb = device.command_queue.command_buffer()
    state = bn.result_state(mpsx.ImageBatch.from_numpy(device, np.zeros((3, 5, 4, 4), np.float32)))
    result = mpsx.CNNNormalizationGammaAndBetaState(device, gamma, beta)
    with pytest.raises(mpsx.StateError, match="has no gradients"):
        sgd.encode(cb, batch_normalization_state=state, result_state=result)
    state = encode_gradients(cb)
    count = cb.command_count
    with pytest.raises(TypeError, match="batch_normalization_state alone"):
        sgd.encode(cb, batch_normalization_state=state, batch_normalization_source_state=state, result_state=result)
    with pytest.raises(TypeError, match="not both"):
        sgd.encode(cb, convolution_gradient_state=state, batch_normalization_state=state, result_state=result)
    with pytest.raises(TypeError, match="expected an MPSCNNNormalizationGammaAndBetaState as result_state"):
        sgd.encode(cb, batch_normalization_state=state,
                   result_state=mpsx.CNNNormalizationMeanAndVarianceState(device, gamma, beta))
    with pytest.raises(mpsx.ShapeError, match="5"):
        sgd.encode(cb, batch_normalization_state=state,
                   result_state=mpsx.CNNNormalizationGammaAndBetaState(device, gamma[:3], beta[:3]))
    with pytest.raises(mpsx.ShapeError):
        sgd.encode(cb, batch_normalization_state=state, input_momentum_vectors=[mpsx.Vector(device, 4)],
                   result_state=result)
    # gamma and beta are updated together: one momentum for both would race.
    momentum = mpsx.Vector(device, 5)
    with pytest.raises(ValueError, match="input_momentum_vectors for gamma and input_momentum_vectors for beta share "
                                         "memory; the arrays one encode updates need memory of their own"):
        sgd.encode(cb, batch_normalization_state=state, input_momentum_vectors=[momentum, momentum],
                   result_state=result)
    assert cb.command_count == count

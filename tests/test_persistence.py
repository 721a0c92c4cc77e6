"""mpsx.save / mpsx.load, pickle, deepcopy and copies through one description
(mpsx/persistence.py): round trips of descriptors, data sources, optimizers
and losses; Python data source subclasses; and files made to hurt: each gives
an MPSXError, runs nothing, and allocates no more than the file holds."""

import copy
import json
import os
import pickle
import re
import struct
import sys
import types

import numpy as np
import pytest

import mpsx
from mpsx import persistence
from helpers import round_trips, run_isolated, same


def descriptors():
    prelu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.PRELU, data=np.array([0.1, 0.2, 0.3], np.float32))
    conv = mpsx.CNNConvolutionDescriptor(3, 5, 6, 4, 2, 1, 1, 2, 2, mpsx.NNNeuronDescriptor(mpsx.NeuronType.TANH,
                                                                                            a=1.5, b=0.5))
    loss = mpsx.CNNLossDescriptor(mpsx.CNNLossType.HUBER, mpsx.CNNReductionType.SUM)
    loss.delta, loss.weight, loss.reduce_across_batch = 0.25, 2.0, True
    return [mpsx.ImageDescriptor(mpsx.DataType.FLOAT16, 7, 3, 5, 2), prelu, conv, loss,
            mpsx.NNOptimizerDescriptor(0.01, 0.5, True, 2.0, -3.0, mpsx.NNRegularizationType.L2, 1e-4)]


def data_sources(device):
    rng = np.random.default_rng(0)
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    w, b = rng.standard_normal((4, 3, 3, 2)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    g, beta = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    adam = mpsx.NNOptimizerAdam(device, learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6)
    sgd = mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1, momentum_scale=0.9,
                                                    use_nesterov_momentum=True)
    return [mpsx.ConvolutionWeights(d, w, b, optimizer=adam, label="conv"),
            mpsx.ConvolutionWeights(d, w, None),
            mpsx.BatchNormalizationWeights(g, beta, np.abs(g), np.abs(beta) + 1, 1e-3, 0.5, sgd, "bn"),
            mpsx.InstanceNormalizationWeights(g, beta, 1e-4, sgd, "in"),
            mpsx.GroupNormalizationWeights(g, beta, 2, 1e-4, None, "gn")]


def optimizers(device):
    return [mpsx.NNOptimizerStochasticGradientDescent(device, learning_rate=0.1, momentum_scale=0.9),
            mpsx.NNOptimizerAdam(device, learning_rate=0.01, beta1=0.8, time_step=7),
            mpsx.NNOptimizerRMSProp(device, learning_rate=0.01, decay=0.8, epsilon=1e-5)]


def losses(device):
    d = descriptors()[3]
    return [mpsx.CNNLoss(device, d), mpsx.NNForwardLoss(device, d), mpsx.NNLossGradient(device, d)]


def test_descriptors_round_trip(device, tmp_path):
    for obj in descriptors():
        for how, back in round_trips(obj, device, tmp_path / "d.mpsx").items():
            assert type(back) is type(obj), how
            assert same(back, obj), (how, obj)
    # The values themselves, not only the description.
    back = mpsx.load(tmp_path / "d.mpsx")
    assert (back.learning_rate, back.regularization_type, back.gradient_clip_min) == \
        (pytest.approx(0.01), mpsx.NNRegularizationType.L2, -3.0)


def test_data_sources_optimizers_and_losses_round_trip(device, tmp_path):
    for obj in data_sources(device) + optimizers(device) + losses(device):
        for how, back in round_trips(obj, device, tmp_path / "o.mpsx").items():
            assert type(back) is type(obj) and back is not obj, how
            assert same(back, obj), (how, obj)
    w = mpsx.load(tmp_path / "o.mpsx")  # the last: an NNLossGradient
    assert w.device == device and w.loss_descriptor.loss_type == mpsx.CNNLossType.HUBER
    mpsx.save(data_sources(device)[0], tmp_path / "w.mpsx")
    w = mpsx.load(tmp_path / "w.mpsx", device)
    np.testing.assert_array_equal(w.weights(), data_sources(device)[0].weights())
    assert (w.label(), w.optimizer.beta1, w.optimizer.device) == ("conv", pytest.approx(0.8), device)


def test_a_file_restores_onto_the_device_given(device, tmp_path):
    mpsx.save(mpsx.NNOptimizerAdam(mpsx.Device("cpu"), learning_rate=0.5), tmp_path / "a.mpsx")
    assert mpsx.load(tmp_path / "a.mpsx", device).device == device
    assert mpsx.load(tmp_path / "a.mpsx").device == mpsx.Device("cpu")  # the saved one, present here


class Scaled(mpsx.CNNConvolutionDataSource):
    """A Python data source: saved through its attributes."""

    def __init__(self, descriptor, weights, scale):
        self._descriptor, self.w, self.scale = descriptor, weights, scale

    def descriptor(self):
        return self._descriptor

    def weights(self):
        return self.w * self.scale


def test_a_python_data_source_is_saved_through_its_attributes(device, tmp_path):
    source = Scaled(mpsx.CNNConvolutionDescriptor(1, 1, 2, 3), np.arange(6, dtype=np.float32).reshape(3, 1, 1, 2),
                    {"factor": 2.0, "tags": ("a", None)})
    source.scale = 2.0
    mpsx.save(source, tmp_path / "s.mpsx")
    back = mpsx.load(tmp_path / "s.mpsx")
    assert type(back) is Scaled and back.scale == 2.0 and back.descriptor() == source.descriptor()
    np.testing.assert_array_equal(back.weights(), source.weights())
    # Its module must be imported: loading imports nothing.
    module = sys.modules.pop(Scaled.__module__)
    try:
        with pytest.raises(mpsx.MPSXError, match=r"of module test_persistence, which is not imported; import it first"):
            mpsx.load(tmp_path / "s.mpsx")
    finally:
        sys.modules[Scaled.__module__] = module
    # What cannot be described is refused when saving, naming where it is.
    source.scale = lambda: 2
    with pytest.raises(mpsx.UnsavableError, match=r"mpsx.save: the object \(Scaled\)\['scale'\] is a "
                                                  r"builtins:function, which mpsx cannot save"):
        mpsx.save(source, tmp_path / "bad.mpsx")
    with pytest.raises(mpsx.UnsavableError, match=r"mpsx.save: the object is a mpsx.CommandQueue, which mpsx cannot "
                                                  r"save"):
        mpsx.save(device.command_queue, tmp_path / "q.mpsx")


def test_a_checkpoint_of_several_objects_shares_what_they_share(device, tmp_path):
    weights = data_sources(device)[0]
    conv, gradient = mpsx.CNNConvolution(device, weights), mpsx.CNNConvolutionGradient(device, weights)
    mpsx.save({"forward": conv, "gradient": gradient, "step": 3}, tmp_path / "checkpoint.mpsx")
    back = mpsx.load(tmp_path / "checkpoint.mpsx")
    assert back["step"] == 3 and back["forward"].data_source is back["gradient"].data_source
    assert back["forward"].data_source.optimizer.beta1 == pytest.approx(0.8)


def test_an_object_met_twice_is_one_object_after_loading(device, tmp_path):
    weights = data_sources(device)[1]
    holder = Scaled(weights.descriptor(), weights.weights(), 1.0)
    holder.pair = [weights, {"again": weights}]
    mpsx.save(holder, tmp_path / "h.mpsx")
    back = mpsx.load(tmp_path / "h.mpsx")
    assert back.pair[0] is back.pair[1]["again"] and isinstance(back.pair[0], mpsx.ConvolutionWeights)
    assert pickle.loads(pickle.dumps(holder)).pair[0] is not weights


def test_a_plain_safetensors_file_loads_as_arrays(tmp_path):
    import safetensors.numpy
    weights = {"conv.weight": np.ones((4, 2, 3, 3), np.float32), "conv.bias": np.arange(4, dtype=np.float32)}
    safetensors.numpy.save_file(weights, str(tmp_path / "torch.safetensors"))
    loaded = mpsx.load(tmp_path / "torch.safetensors")
    assert loaded.keys() == weights.keys()
    for name in weights:
        np.testing.assert_array_equal(loaded[name], weights[name])


# ---------------------------------------------------------------- files made to hurt

def safetensors_bytes(header, data=b""):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def valid_header(description, tensors=None, version="1"):
    header = {"__metadata__": {"mpsx": json.dumps({"$object": description}), "mpsx.format": version}}
    header.update(tensors or {})
    return header


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


DESCRIPTOR = {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [0, 4, 4, 2, 1]}}}


def test_a_handmade_valid_file_loads(tmp_path):
    """The crafted files below differ from this one in one point each."""
    path = tmp_path / "ok.mpsx"
    path.write_bytes(safetensors_bytes(valid_header(DESCRIPTOR)))
    d = mpsx.load(path)
    assert (d.width, d.feature_channels) == (4, 2)


HOSTILE = {
    "empty file": b"",
    "truncated header length": b"\x10\x00\x00",
    "header length past the end": struct.pack("<Q", 1 << 40) + b"{}",
    "header not JSON": struct.pack("<Q", 4) + b"{{{{",
    "a pickle renamed": pickle.dumps({"a": np.ones(3)}),
    "tensor bytes disagree with its shape": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}), b"\0" * 12),
    "a huge declared shape": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": [1 << 40, 1 << 20], "data_offsets": [0, 8]}}),
        b"\0" * 8),
    "offsets past the data": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1 << 30]}}), b"\0" * 8),
    "description not JSON": safetensors_bytes({"__metadata__": {"mpsx": "{'class':", "mpsx.format": "1"}}),
    "a newer format": safetensors_bytes(valid_header(DESCRIPTOR, version="2")),
    "no format version": safetensors_bytes({"__metadata__": {"mpsx": json.dumps({"$object": DESCRIPTOR})}}),
    "a description that is not a value": safetensors_bytes(
        {"__metadata__": {"mpsx": json.dumps(DESCRIPTOR), "mpsx.format": "1"}}),
    "an unknown class": safetensors_bytes(valid_header({"class": "mpsx.Nonesuch", "state": {"$dict": {}}})),
    "a class outside mpsx that is not a class": safetensors_bytes(
        valid_header({"class": "os:system", "state": {"$dict": {}}})),
    "a class of an imported module that is not mpsx's": safetensors_bytes(
        valid_header({"class": "subprocess:Popen", "state": {"$dict": {"args": "true"}}})),
    "a module not imported": safetensors_bytes(
        valid_header({"class": "evil_module_xyz:Payload", "state": {"$dict": {}}})),
    "a class name of another type": safetensors_bytes(valid_header({"class": 7, "state": {"$dict": {}}})),
    "state of the wrong type": safetensors_bytes(valid_header({"class": "mpsx.ImageDescriptor", "state": [1, 2]})),
    "arguments of the wrong types": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": ["x", {"$dict": {}}, 4, 2, 1]}}})),
    "a missing argument": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {}}})),
    "a tensor the file does not hold": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": {"$tensor": "9"}}}})),
    "an unknown marker": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$eval": "__import__('os')"}})),
    "a reference to an object not made": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [{"$ref": 5}]}}})),
    "a reference to the object being made": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [{"$ref": 0}]}}})),
    "a bad float": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [{"$float": "1e999999"}]}}})),
    "nesting too deep": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": nested(100)}}})),
    "JSON nested past the parser's stack": safetensors_bytes(
        {"__metadata__": {"mpsx": "[" * 100000 + "]" * 100000, "mpsx.format": "1"}}),
    "huge sizes in a descriptor": safetensors_bytes(valid_header(
        {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [0, 1 << 62, 1 << 62, 1 << 62, 1]}}})),
    "a shape larger than the file, offsets to match": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": [1 << 28], "data_offsets": [0, 1 << 30]}}),
        b"\0" * 8),
    "an empty tensor of shape (0, 2**62)": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": [0, 1 << 62], "data_offsets": [0, 0]}})),
    "a bfloat16 tensor": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}), b"\0" * 4),
    "a float8 tensor": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}), b"\0" * 2),
    "a dtype safetensors does not know": safetensors_bytes(
        valid_header(DESCRIPTOR, {"0": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}), b"\0" * 2),
    "a format version of unicode digits": safetensors_bytes(valid_header(DESCRIPTOR, version="\u0662")),
    "huge sizes in data source weights": safetensors_bytes(valid_header(
        {"class": "mpsx.ConvolutionWeights", "state": {"$dict": {"arguments": [
            {"$object": {"class": "mpsx.CNNConvolutionDescriptor", "state": {"$dict": {"arguments": [
                1 << 30, 1 << 30, 1 << 30, 1 << 30, 1, 1, 1, 1, 1, None]}}}},
            {"$tensor": "0"}, None, None, None]}}},
        {"0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}), b"\0" * 8),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_crafted_file_is_refused_clearly(tmp_path, case):
    path = tmp_path / "hostile.mpsx"
    path.write_bytes(HOSTILE[case])
    with pytest.raises(mpsx.PersistenceError, match=r"^mpsx.load: ") as raised:
        mpsx.load(path)
    assert len(str(raised.value).replace(str(path), "")) < 500  # clear, not a dump
    assert "evil_module_xyz" not in sys.modules


@pytest.mark.parametrize("dtype, shape, message", [
    ("BF16", [2, 1], "holds BF16 values, which numpy has no type for; mpsx reads BOOL, U8, I8, U16, I16, U32, I32, "
                     "U64, I64, F16, F32, F64"),
    ("F8_E5M2", [4, 1], "holds F8_E5M2 values, which numpy has no type for")])
def test_a_tensor_numpy_cannot_hold_is_refused_naming_its_dtype(tmp_path, dtype, shape, message):
    """A PyTorch bfloat16 state_dict or an mpsx file: refused before any tensor is read."""
    path = tmp_path / "half.safetensors"
    path.write_bytes(safetensors_bytes({"ok": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                        "w": {"dtype": dtype, "shape": shape, "data_offsets": [4, 8]}}, b"\0" * 8))
    with pytest.raises(mpsx.PersistenceError, match=f"^mpsx.load: {re.escape(str(path))}: tensor str 'w' "
                                                    f"{re.escape(message)}"):
        mpsx.load(path)


def test_a_shape_claiming_more_than_the_file_is_refused(tmp_path):
    """An empty tensor holds no bytes, so the safetensors package lets any shape with a zero pass; mpsx refuses one
    whose other dimensions claim more than the file holds (numpy could not make it)."""
    for shape in ([0, 1 << 62], [1 << 62, 0, 4], [2, 0, 1 << 40]):
        path = tmp_path / "empty.mpsx"
        path.write_bytes(safetensors_bytes(valid_header(DESCRIPTOR, {"0": {"dtype": "F32", "shape": shape,
                                                                           "data_offsets": [0, 0]}})))
        size = path.stat().st_size
        with pytest.raises(mpsx.PersistenceError,
                           match=re.escape(f"tensor str '0' claims shape {shape} of float32, more than the "
                                           f"{size}-byte file holds")):
            mpsx.load(path)
    # An empty tensor that fits loads, as numpy has it.
    path.write_bytes(safetensors_bytes({"e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}}))
    assert mpsx.load(path)["e"].shape == (0, 3)


def many_references(count, data, cls="__main__:Holder"):
    """A file whose description names one tensor `count` times, in the attributes of a Python object of class
    `cls`."""
    references = [{"$tensor": "0"}] * count
    header = valid_header({"class": cls, "state": {"$dict": {"refs": references}}},
                          {"0": {"dtype": "U8", "shape": [len(data)], "data_offsets": [0, len(data)]}})
    return safetensors_bytes(header, data)


@pytest.mark.parametrize("count", [1000, 100000])
def test_a_tensor_named_many_times_is_read_once(tmp_path, count):
    """A file of 1 MiB of tensor naming it `count` times: loading shares one array between the references and
    grows the peak memory by little more than the tensor (not `count` MiB), whether the description then loads or is
    refused; measured in a process of its own."""
    mib = 1 << 20
    (tmp_path / "loads.mpsx").write_bytes(many_references(count, bytes(range(256)) * (mib // 256)))
    refused = {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": [{"$tensor": "0"}] * count}}}
    (tmp_path / "refused.mpsx").write_bytes(safetensors_bytes(
        valid_header(refused, {"0": {"dtype": "U8", "shape": [mib], "data_offsets": [0, mib]}}), b"\0" * mib))
    printed = run_isolated(mpsx.Device("cpu"), f"""
        import resource, sys
        import numpy as np

        class Holder(mpsx.CNNConvolutionDataSource):
            pass

        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)

        before = peak()
        try:
            mpsx.load({str(tmp_path / "refused.mpsx")!r})
        except mpsx.PersistenceError as e:
            assert "the state of ImageDescriptor does not make one" in str(e), e
        holder = mpsx.load({str(tmp_path / "loads.mpsx")!r})
        grown = peak() - before
        refs = holder.refs
        assert len(refs) == {count} and all(r is refs[0] for r in refs)
        assert np.array_equal(refs[0], np.tile(np.arange(256, dtype=np.uint8), {mib // 256}))
        print(grown)
    """)
    # What stays: the tensor and the JSON's list of references (a few MiB at 100,000), far below count MiB.
    assert int(printed) < 64 * mib


def test_every_reference_to_a_tensor_is_the_one_array(tmp_path):
    """In this process too, where the references are the attributes of a Python data source."""
    path = tmp_path / "shared.mpsx"
    path.write_bytes(many_references(3, b"\1\2\3", "test_persistence:Scaled"))
    refs = mpsx.load(path).refs
    assert refs[0] is refs[1] is refs[2] and list(refs[0]) == [1, 2, 3]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="limits the address space as Linux does")
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's allocator ends the process where the address-space limit is reached")
def test_a_panic_of_the_safetensors_binding_is_an_mpsx_error(tmp_path):
    """Reading a 400 MiB tensor (a sparse file) with too little address space left: the safetensors binding fails
    with a MemoryError or, past its mmap, a pyo3 PanicException (a BaseException); both are MPSXErrors."""
    n = 400 << 20
    path = tmp_path / "large.safetensors"
    header = json.dumps({"0": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + n)
    printed = run_isolated(mpsx.Device("cpu"), f"""
        import resource
        vm = int([line for line in open("/proc/self/status") if line.startswith("VmSize")][0].split()[1]) * 1024
        for spare in (300, 600):  # the mmap fails; the mmap fits, the copy does not
            resource.setrlimit(resource.RLIMIT_AS, (vm + (spare << 20), resource.RLIM_INFINITY))
            try:
                mpsx.load({str(path)!r})
            except mpsx.MPSXError as e:
                print(type(e).__name__, str(e).startswith("mpsx.load: "))
    """)
    assert printed.split("\n")[:2] == ["OutOfMemoryError True", "PersistenceError True"], printed


LONG = "~" * 1_000_000


def long_names():
    """Files that quote something 1,000,000 characters long in their refusal."""
    def state(arguments):
        return {"class": "mpsx.ImageDescriptor", "state": {"$dict": {"arguments": arguments}}}
    neuron = {"class": "mpsx.NNNeuronDescriptor", "state": {"$dict": {"arguments": [LONG]}}}
    relu = mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)
    kernel = json.loads(persistence.reduce(mpsx.CNNNeuron(mpsx.Device("cpu"), relu))[1][0])
    kernel["$object"]["state"]["$dict"]["properties"]["$dict"][LONG] = 1
    return {
        "an mpsx class": valid_header({"class": "mpsx." + LONG, "state": {"$dict": {}}}),
        "a module": valid_header({"class": LONG + ":Payload", "state": {"$dict": {}}}),
        "a qualified name": valid_header({"class": "sys:" + LONG, "state": {"$dict": {}}}),
        "a tensor": valid_header(state({"$tensor": LONG})),
        "a float": valid_header(state([{"$float": LONG}])),
        "a marker": valid_header(state([{"$" + LONG: 1}])),
        "a reference": valid_header(state([{"$ref": LONG}])),
        "a value a constructor quotes": valid_header(neuron),
        "a property": valid_header(kernel["$object"]),
        "a format version": {"__metadata__": {"mpsx": "{}", "mpsx.format": "9" * 1_000_000}},
        "a dtype": {"t": {"dtype": LONG, "shape": [2], "data_offsets": [0, 2]}},
        "a tensor name": {LONG: {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}},
    }


@pytest.mark.parametrize("what", sorted(long_names()))
def test_a_refusal_quotes_at_most_200_characters_of_the_file(tmp_path, what):
    header = long_names()[what]
    path = tmp_path / "long.mpsx"
    holds_tensors = set(header) != {"__metadata__"}
    path.write_bytes(safetensors_bytes(header, b"\0" * 2 if holds_tensors else b""))
    with pytest.raises(mpsx.PersistenceError, match="^mpsx.load: ") as raised:
        mpsx.load(path)
    message = str(raised.value).replace(str(path), "")
    quoted = message.count(LONG[0]) or max(len(run) for run in re.findall("9+", message))
    assert 100 <= quoted <= 200 and len(message) <= 400, message


def test_a_description_too_large_for_a_file_is_a_save_error(device, tmp_path):
    """safetensors' header holds at most 100,000,000 bytes: a graph whose description is larger (a Python data
    source holding a long string) is refused, with no file left behind."""
    d = mpsx.CNNConvolutionDescriptor(1, 1, 2, 3)
    source = Scaled(d, np.ones((3, 1, 1, 2), np.float32), 1.0)
    graph = mpsx.NNGraph(device, result_image=mpsx.CNNConvolutionNode(mpsx.NNImageNode(), source).result_image)
    source.note = "x" * 100_000_001
    with pytest.raises(mpsx.PersistenceError, match=r"^mpsx.save: safetensors cannot write .*header too large.*; its "
                                                    r"header would hold a description of 1000\d{5} characters") as e:
        mpsx.save(graph, tmp_path / "large.mpsx")
    assert len(str(e.value)) < 500 and not (tmp_path / "large.mpsx").exists()
    del source.note
    mpsx.save(graph, tmp_path / "small.mpsx")
    with pytest.raises(mpsx.PersistenceError, match=r"^mpsx.save: .*missing"):
        mpsx.save(graph, tmp_path / "missing" / "graph.mpsx")


# ---------------------------------------------------------------- pickles made to hurt

class Tampered:
    """Pickles as a call of `function` with `arguments`: what a pickle of an mpsx object altered holds."""

    def __init__(self, function, *arguments):
        self.function, self.arguments = function, arguments

    def __reduce__(self):
        return self.function, self.arguments


def tampered_pickles(device):
    """Pickles of mpsx objects (a data source with its optimizer, a graph, a device) with their payloads altered."""
    weights = data_sources(device)[0]
    graph = mpsx.NNGraph(device, result_image=mpsx.CNNConvolutionNode(mpsx.NNImageNode(), weights).result_image)
    function, (text, tensors) = weights.__reduce__()
    _, (graph_text, graph_tensors) = graph.__reduce__()
    description = json.loads(text)

    def altered(change):
        d = json.loads(text)
        change(d["$object"]["state"]["$dict"])
        return json.dumps(d)

    return {
        "JSON cut short": (function, text[:len(text) // 2], tensors),
        "JSON nested past the parser's stack": (function, "[" * 100000 + "]" * 100000, tensors),
        "JSON nested past the description's depth": (function, json.dumps(nested(200)), tensors),
        "a description that is not a value": (function, json.dumps(description["$object"]), tensors),
        "keys renamed": (function, text.replace('"class"', '"klass"'), tensors),
        "a tensor renamed": (function, text, {k + "x": v for k, v in tensors.items()}),
        "a tensor missing": (function, text, {}),
        "a tensor of the wrong shape": (function, text, {k: v[:1] for k, v in tensors.items()}),
        "a tensor of objects": (function, text, {k: v.astype(object) for k, v in tensors.items()}),
        "a tensor that is a list": (function, text, {k: v.tolist() for k, v in tensors.items()}),
        "tensors that are a list": (function, text, list(tensors.values())),
        "a tensor name of another type": (function, text, {1: v for v in tensors.values()}),
        "the description as bytes": (function, text.encode(), tensors),
        "the description as None": (function, None, tensors),
        "an argument missing": (function, text),
        "an argument more": (function, text, tensors, tensors),
        "an argument of the wrong type": (function, altered(lambda s: s["arguments"]["$tuple"].__setitem__(2, "b")),
                                          tensors),
        "an unknown class": (function, text.replace("mpsx.NNOptimizerAdam", "mpsx.Nonesuch"), tensors),
        "a reference forward": (function, altered(lambda s: s["arguments"]["$tuple"].__setitem__(3, {"$ref": 7})),
                                tensors),
        "a graph's node removed": (function, graph_text.replace("mpsx.CNNConvolutionNode", "mpsx.NNImageNode"),
                                   graph_tensors),
        "a device that is not here": (mpsx.Device("cpu").__reduce__()[0], "cpx"),
        "a device name of another type": (mpsx.Device("cpu").__reduce__()[0], 3),
    }


def test_tampered_pickles_are_refused_clearly(device):
    """Every pickle of an mpsx object goes through mpsx.persistence (but a Device's, which names it), and each
    payload altered is an MPSXError starting "unpickling: ", never a KeyError, TypeError, JSONDecodeError or
    RecursionError."""
    cases = tampered_pickles(device)
    assert {f.__name__ for f, *_ in cases.values()} == {"_unpickle", "_unpickle_device"}
    for what, (function, *arguments) in cases.items():
        data = pickle.dumps(Tampered(function, *arguments))
        with pytest.raises(mpsx.PersistenceError, match="^unpickling: ") as raised:
            pickle.loads(data)
        assert len(str(raised.value)) < 500, what
    # Untouched, they load.
    weights = pickle.loads(pickle.dumps(data_sources(device)[0]))
    assert weights.optimizer.beta1 == pytest.approx(0.8)
    assert pickle.loads(pickle.dumps(device)) == device


# ---------------------------------------------------------------- empty biases

def test_empty_biases_in_a_file_are_refused(device, tmp_path):
    """MPS's biasTerms are nil or one float per output feature channel: a ConvolutionWeights whose file gives an
    empty array loads as no error-free object, and one with none loads without biases."""
    weights = data_sources(device)[0]
    text, tensors = weights.__reduce__()[1]
    biases = json.loads(text)["$object"]["state"]["$dict"]["arguments"]["$tuple"][2]["$tensor"]
    import safetensors.numpy
    for empty in (np.zeros((0,), np.float32), np.zeros((4, 0), np.float32)):
        safetensors.numpy.save_file({**tensors, biases: empty}, str(tmp_path / "empty.mpsx"),
                                    metadata={"mpsx": text, "mpsx.format": "1"})
        with pytest.raises(mpsx.PersistenceError, match=r"^mpsx.load: the state of ConvolutionWeights does not make "
                                                        r"one: ShapeError: ConvolutionWeights: expected 4 biases or "
                                                        r"None, given 0"):
            mpsx.load(tmp_path / "empty.mpsx", device)
    mpsx.save(data_sources(device)[1], tmp_path / "none.mpsx")
    assert mpsx.load(tmp_path / "none.mpsx", device).bias_terms() is None


def test_mutated_files_load_or_are_refused(device):
    """A valid file of several objects, mutated byte by byte many times: every load gives an object
    or an MPSXError, in a process of its own (a crash would fail the test)."""
    printed = run_isolated(device, """
        import os, random, tempfile
        import numpy as np
        rng = np.random.default_rng(0)
        d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
        obj = {"weights": mpsx.ConvolutionWeights(d, rng.standard_normal((4, 3, 3, 2)).astype(np.float32),
                                                  np.zeros(4, np.float32),
                                                  optimizer=mpsx.NNOptimizerAdam(device, learning_rate=0.1)),
               "loss": mpsx.CNNLoss(device, mpsx.CNNLossDescriptor(mpsx.CNNLossType.HUBER,
                                                                    mpsx.CNNReductionType.SUM)),
               "neuron": mpsx.NNNeuronDescriptor(mpsx.NeuronType.PRELU, data=np.ones(4, np.float32))}
        relu = mpsx.CNNNeuronNode(mpsx.NNImageNode(mpsx.NNHandle("x")), obj["neuron"])
        gradient = relu.gradient_filter_with_source(mpsx.NNImageNode(mpsx.NNHandle("dy")))
        obj["graph"] = mpsx.NNGraph(device, result_images=[relu.result_image, gradient.result_image])
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "valid.mpsx")

        class Holder(mpsx.CNNConvolutionDataSource):  # a Python object holding the others, of module __main__
            pass
        holder = Holder()
        holder.__dict__.update(obj)
        mpsx.save(holder, path)
        data = open(path, "rb").read()
        random.seed(1)
        outcomes = {"loaded": 0, "refused": 0}
        for i in range(400):
            mutated = bytearray(data)
            for _ in range(random.choice([1, 1, 2, 8])):
                position = random.randrange(len(mutated))
                mutated[position] = random.choice([0, 255, random.randrange(256), ord('"'), ord("9"), ord("{")])
            if random.random() < 0.1:
                mutated = mutated[:random.randrange(len(mutated))]
            with open(path, "wb") as f:
                f.write(mutated)
            try:
                mpsx.load(path, device)
                outcomes["loaded"] += 1
            except mpsx.MPSXError:
                outcomes["refused"] += 1
        print(outcomes["loaded"], outcomes["refused"])
    """, timeout=300)
    loaded, refused = map(int, printed.split())
    assert loaded + refused == 400 and refused > 100


# ---------------------------------------------------------------- PyTorch weights

def test_pytorch_weights_load_into_data_sources_and_back(device, tmp_path):
    """A PyTorch state_dict saved with safetensors runs in mpsx kernels as in PyTorch, and mpsx's weights
    written as a state_dict load into the PyTorch model."""
    import safetensors.numpy
    import safetensors.torch
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 5 * 5, 3))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
        model[1].weight.uniform_(0.5, 1.5)
    model.eval()
    safetensors.torch.save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    state_dict = mpsx.load(tmp_path / "model.safetensors")
    conv_d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    fc_d = mpsx.CNNConvolutionDescriptor(5, 5, 4, 3)
    sources = {"0": persistence.convolution_weights_from_torch(conv_d, state_dict, "0"),
               "1": persistence.batch_normalization_weights_from_torch(state_dict, "1"),
               "3": ("linear", persistence.convolution_weights_from_torch(fc_d, state_dict, "3"))}
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 5)).astype(np.float32)
    cb = device.command_queue.command_buffer()
    y = mpsx.CNNConvolution(device, sources["0"]).encode(cb, mpsx.Image.from_numpy(device, x))
    y = mpsx.CNNBatchNormalization(device, sources["1"]).encode(cb, y)
    logits = mpsx.CNNFullyConnected(device, sources["3"][1]).encode(cb, y)
    logits.synchronize(cb)
    cb.commit()
    cb.wait_until_completed()
    with torch.no_grad():
        expected = model(torch.tensor(x)).numpy()
    np.testing.assert_allclose(logits.to_numpy().reshape(2, 3), expected, rtol=1e-4, atol=1e-5)
    # And back: the same arrays under PyTorch's names, which the model loads.
    arrays = persistence.torch_state_dict(sources)
    safetensors.numpy.save_file(arrays, str(tmp_path / "back.safetensors"))
    other = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 5 * 5, 3))
    missing = other.load_state_dict(safetensors.torch.load_file(str(tmp_path / "back.safetensors")), strict=False)
    assert missing.missing_keys == [] and missing.unexpected_keys == []
    for key, value in model.state_dict().items():
        if key != "1.num_batches_tracked":
            np.testing.assert_array_equal(other.state_dict()[key].numpy(), value.numpy(), err_msg=key)


def test_pytorch_weights_of_the_wrong_shape_or_name(device):
    d = mpsx.CNNConvolutionDescriptor(3, 3, 2, 4)
    with pytest.raises(ValueError, match=r"expected OIHW weights of shape \(4, 2, 3, 3\) for .*, given \(4, 3, 3, 3\)"):
        persistence.weights_from_torch(d, np.zeros((4, 3, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected linear weights of shape \(4, 18\)"):
        persistence.weights_from_torch(d, np.zeros((4, 17), np.float32))
    with pytest.raises(KeyError, match=r"the state_dict has no 'conv.weight'; it has \['fc.weight'\]"):
        persistence.convolution_weights_from_torch(d, {"fc.weight": np.zeros(1)}, "conv")
    with pytest.raises(TypeError, match=r"torch_state_dict: q is a CommandQueue"):
        persistence.torch_state_dict({"q": device.command_queue})

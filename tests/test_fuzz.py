"""The fuzz test: crash-isolated fuzzing of every public mpsx class by the harness in tests/fuzz/, whose
docstring says what it does, what a finding is and its knobs (MPSX_FUZZ_CASES, MPSX_FUZZ_SEED,
MPSX_FUZZ_TIMEOUT). Standalone, the same code path: python tests/test_fuzz.py --help."""

import os
import sys
import time

import numpy as np

import mpsx
from fuzz.catalog import Catalog
from fuzz.child import PACKAGE
from fuzz.config import CASES, SEED
from fuzz.driver import fuzz, main
from fuzz.report import Report
from fuzz.runner import run_cases
from fuzz.snippets import TAMPERINGS, prelude


def test_every_public_class_has_a_factory():
    problems = Catalog().coverage_problems()
    assert not problems, "\n".join(problems)


def test_harness_reports_each_kind_of_finding(tmp_path):
    """The child runner and the parent loop on cases whose outcome is known."""
    # mpsx_raise stands for mpsx raising: its code is named as a file of the package.
    source = os.path.join(PACKAGE, "harness.py")
    setup = prelude("cpu", "fuzz_raise tampered(") + \
        f'exec(compile("def mpsx_raise(error):\\n    raise error\\n", {source!r}, "exec"))\n'
    encode = ("mpsx.CNNNeuron(dev, mpsx.NNNeuronDescriptor(mpsx.NeuronType.RELU)).encode("
              "cb, mpsx.Image.from_numpy(dev, np.ones((1, 1, 2, 2), np.float32)))")
    failing_update = """
class Source(mpsx.CNNConvolutionDataSource):
    def descriptor(self):
        return mpsx.CNNConvolutionDescriptor(1, 1, 1, 1)

    def weights(self):
        return np.ones((1, 1, 1, 1), np.float32)

    def update_with_gradient_state(self, gradient_state, source_state):
        mpsx_raise(KeyError(1))

kernel = mpsx.CNNConvolution(dev, Source())
x = mpsx.Image.from_numpy(dev, np.ones((1, 1, 2, 2), np.float32))
y, state = kernel.encode(cb, x, destination_state=True)
mpsx.CNNConvolutionGradient(dev, kernel.data_source).encode(cb, y, x, state)
kernel.encode_weights_and_bias_update(cb, state)"""
    actions = {
        "fine": ("x = 1", None), "allowed": ("raise ValueError('expected 1, given 2')", None),
        "unexpected": ("mpsx_raise(KeyError(2))", None), "no message": ("mpsx_raise(ValueError())", None),
        "the case's own": ("raise KeyError(2)", None),
        # SIGKILL: a sanitizer build reports a SIGSEGV, which fails tools/sanitize.sh.
        "crash": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", None),
        "crash again": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", None),
        "after the crash": ("x = 1", None), "exit": ("import os\nos._exit(3)", None),
        "hang": ("import time\ntime.sleep(60)", None), "accepted": ("x = 1", "1.5 was accepted"),
        "enqueued": (f"{encode}; raise ValueError('after encoding')", None),
        "callback": ("cb.add_completed_handler(lambda command_buffer: mpsx_raise(KeyError(1)))", None),
        "command buffer error": (failing_update, None),
        "own error": ("fuzz_raise()", None),
        # the rule of loading, which checkpoint cases apply through judged()
        "load raises": ("judged(lambda: mpsx_raise(KeyError(1)), '')", None),
        "load quotes": ("judged(lambda: mpsx_raise(mpsx.MPSXError('x' * 300)), 'file: ' + 'x' * 300)", None),
        "load refuses": ("judged(lambda: mpsx_raise(mpsx.MPSXError('expected 1, given 2')), 'x' * 300)", None),
    }
    cases = [dict(id=name, kind="test", key="crash" if name.startswith("crash") else name, device="cpu", setup=setup,
                  action=action, cbs=["cb"], must_raise=reason) for name, (action, reason) in actions.items()]
    outcomes = run_cases(cases, tmp_path, timeout=3, jobs=2)
    found = {name: sorted(f["kind"] for f in outcome["findings"]) if outcome else "skipped"
             for name, outcome in outcomes.items()}
    assert found == {
        "fine": [], "allowed": [], "unexpected": ["exception"], "no message": ["message"], "the case's own": [],
        "crash": ["crash"], "crash again": "skipped", "after the crash": [],
        "exit": ["crash"], "hang": ["hang"], "accepted": ["accepted"],
        "enqueued": ["enqueued"], "callback": ["exception"], "command buffer error": ["exception"],
        "own error": [], "load raises": ["exception"], "load quotes": ["quote"], "load refuses": []}
    assert outcomes["crash"]["findings"][0]["what"] == "signal SIGKILL"
    assert outcomes["exit"]["findings"][0]["what"] == "exit status 3"
    assert "<case hang action>" in outcomes["hang"]["findings"][0]["detail"]  # faulthandler's stacks of the hang


def test_checkpoint_tampering_changes_only_what_it_is_asked_to(device):
    """tampered() with no change loads what was saved, from the rewritten file and from
    the pickle's arguments; a tampering reaches the load."""
    import pytest

    namespace = {"dev": device}
    exec(prelude(device.name, "tampered(") + TAMPERINGS["tamper_header"], namespace)
    weights = np.arange(72, dtype=np.float32).reshape(4, 3, 3, 2)
    obj = mpsx.ConvolutionWeights(mpsx.CNNConvolutionDescriptor(3, 3, 2, 4), weights, np.ones(4, np.float32))
    for pickled in (False, True):
        loaded = namespace["tampered"](obj, lambda saved: None, pickled=pickled)
        assert np.array_equal(loaded.weights(), weights) and np.array_equal(loaded.bias_terms(), np.ones(4))
    with pytest.raises(mpsx.MPSXError, match="expected 72 weights"):
        namespace["tampered"](obj, namespace["tamper_header"], 0, "shape", [], True)  # tensor "0": the weights


def test_restart_budget_stops_a_run_that_keeps_crashing(tmp_path):
    crash = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    cases = [dict(id=str(i), kind="test", key=str(i), device="cpu", setup=prelude("cpu", ""), action=crash, cbs=["cb"],
                  must_raise=None) for i in range(3)]
    outcomes = run_cases(cases, tmp_path, jobs=1, budget=0)
    assert list(outcomes) == ["0"] and outcomes["0"]["findings"][0]["kind"] == "crash"


def test_a_time_limit_leaves_cases_out_and_counts_them(tmp_path):
    cases = [dict(id=str(i), kind="test", key=str(i), device="cpu", setup=prelude("cpu", ""), action="pass",
                  cbs=["cb"], must_raise=None) for i in range(3)]
    outcomes = run_cases(cases, tmp_path, jobs=1, deadline=time.monotonic())
    assert outcomes == {}
    report = Report("cpu", 1, cases, outcomes, out_of_time=True)
    assert report.unrun == 3 and not report.findings and "3 not run within the time limit" in report.summary()
    # Left out otherwise, they are a finding: the run stopped early.
    assert [f["kind"] for f in Report("cpu", 1, cases, outcomes).findings] == ["budget"]


def test_fuzz_finds_nothing_in_plain_python_classes(tmp_path):
    """No false findings: the namedtuples and the data source base classes are plain
    Python that takes what it is given (the other hostile values still come from
    every class)."""
    only = ["Offset", "Region", "StateBatch", "CNNConvolutionDataSource", "CNNBatchNormalizationDataSource",
            "NNHandle", "NNLossCallback"]
    report, _ = fuzz("cpu", 200, SEED, tmp_path, only=only)
    assert report.tried == 200 and not report.findings, report.render()


def test_fuzz(device, tmp_path, capsys):
    import pytest

    report, _ = fuzz(device.name, CASES, SEED, tmp_path)
    path = tmp_path / "fuzz-findings.txt"
    report.write(path)
    with capsys.disabled():
        print("\n" + report.summary())
    if report.findings:
        pytest.fail(report.render(path), pytrace=False)


if __name__ == "__main__":
    sys.exit(main())

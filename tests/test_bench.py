"""python -m mpsx.bench at its smallest settings: every kernel has its encode
and executed times, the JSON's figures have the units it names, and the plot
is a PNG. Nothing here asserts a speed."""

import json
import math
import sys

import pytest

from mpsx import bench

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COUNTS = {"kernels_per_command_buffer", "command_buffers", "batch", "steps"}


def check_units(record):
    """Every number is a count, a time in seconds, a size in bytes or a ratio, as its name says."""
    for key, value in record.items():
        if key in COUNTS or key.endswith("_kernels"):
            assert isinstance(value, int) and value >= 1, (key, value)
        elif key.endswith("_s"):
            assert isinstance(value, float) and 0 < value < 60 and math.isfinite(value), (key, value)
        elif key.endswith("_bytes"):
            assert isinstance(value, int) and value >= 0, (key, value)
        elif "_over_" in key:
            numerator, denominator = key.split("_over_")
            assert value == pytest.approx(record[numerator + "_s"] / record[denominator + "_s"]), key
        else:
            assert not isinstance(value, (int, float)), f"{key}: a number without a unit in its name"


def test_the_bench_reports_encode_and_executed_times(device, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    figures, plot = tmp_path / "bench.json", tmp_path / "steps.png"
    bench.main(["--device", device.name, "--quick", "--batch-sizes", "2", "--json", str(figures),
                "--plot", str(plot)])
    out = capsys.readouterr().out
    for column in ("encode us", "executed us", "torch us", "torch/mpsx executed", "encoded/replay",
                   "graph encoded/replay", "graph encode host time"):
        assert column in out
    result = json.loads(figures.read_text())
    assert result["units"]["time"] == "s" and result["units"]["memory"] == "bytes"
    assert result["machine"]["device"] == device.name and result["machine"]["torch"] == torch.__version__
    kernels = {(r["kernel"], tuple(r["shape"])): r for r in result["kernels"]}
    assert set(kernels) == {(k, s) for k in bench.KERNELS for s in [(1, 4, 4, 4), (2, 32, 32, 32)]}
    for record in kernels.values():
        check_units(record)
        assert {"mpsx_encode_s", "mpsx_executed_s", "torch_executed_s"} <= record.keys()
        # Each command buffer's executed time runs from the same start past its encodes.
        assert record["mpsx_executed_s"] >= record["mpsx_encode_s"]
    maths = ["float32", "tf32", "float16"] if device.backend == "cuda" else ["float32", "float16"]
    assert [(r["math"], r["batch"]) for r in result["steps"]] == [(m, 2) for m in maths]
    jax = result["machine"]["jax"] is not None
    for record in result["steps"]:
        breakdown = record.pop("device_time_per_step", None)
        check_units(record)
        assert {"mpsx_s", "mpsx_replay_s", "nngraph_s", "nngraph_replay_s", "torch_s"} <= record.keys()
        assert record["mpsx_over_mpsx_replay"] == pytest.approx(record["mpsx_s"] / record["mpsx_replay_s"])
        assert record["nngraph_over_nngraph_replay"] == pytest.approx(record["nngraph_s"] / record["nngraph_replay_s"])
        assert (record["math"] == "float32") == ("nngraph_encode_s" in record) == \
            ("nngraph_encode_uncaptured_s" in record)
        assert ("torch_graph_s" in record) == (device.backend == "cuda")
        assert ("jax_s" in record) == (jax and device.backend != "metal")
        # On cuda, CUPTI saw the replayed steps' kernels, ours and the peers'. The device was busy for at
        # most their sum (less where some ran side by side); the kinds add up to that sum.
        assert (breakdown is not None) == (device.backend == "cuda")
        if breakdown is not None:
            for name in ["mpsx replay", "nngraph replay", "torch graph"] + ["jax"] * jax:
                kernels = breakdown[name]["kernels"]
                busy = record[name.replace(" ", "_") + "_kernel_s"]
                assert record[name.replace(" ", "_") + "_kernels"] >= 5
                summed = sum(k["s"] for k in kernels)
                assert 0 < busy <= summed * (1 + 1e-9)
                assert sum(breakdown[name]["kinds_s"].values()) == pytest.approx(summed)
    assert result["graph_call_s"] > 0
    if device.backend == "cpu":  # the kernels oneDNN runs, named as ONEDNN_MAX_CPU_ISA names them
        isa = result["machine"]["onednn_isa"]
        assert isa in {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
                       "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16", "DEFAULT"}
        assert f"oneDNN runs {isa} kernels" in out
    data = plot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_busy_time_counts_overlapping_operations_once():
    assert bench.busy_time([]) == 0
    # Two streams side by side, one operation inside another, a gap, one after.
    assert bench.busy_time([(5, 9), (0, 4), (2, 6), (12, 13), (3, 4)]) == 10
    assert bench.busy_time([(0, 2), (2, 3)]) == 3


@pytest.mark.parametrize("arguments, message", [
    (["--skip-steps", "--plot", "x.png"], "--plot draws the training steps, which --skip-steps leaves out"),
    (["--batch-sizes", "0"], "--batch-sizes must be at least 1, given [0]"),
])
def test_the_bench_refuses_bad_arguments(arguments, message, capsys):
    with pytest.raises(SystemExit) as raised:
        bench.main(arguments)
    assert raised.value.code == 2
    assert message in capsys.readouterr().err


def test_the_bench_names_the_package_a_plot_needs(monkeypatch, tmp_path, capsys):
    """Without matplotlib, --plot says what to install before measuring anything."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(SystemExit) as raised:
        bench.main(["--quick", "--plot", str(tmp_path / "x.png")])
    assert raised.value.code == 2
    out, err = capsys.readouterr()
    assert "--plot needs matplotlib: pip install matplotlib" in err
    assert out == "" and not (tmp_path / "x.png").exists()


def test_the_bench_trains_an_imported_model_beside_pytorch(device, tmp_path, capsys, monkeypatch):
    """The imported model's section, on a small module where torchvision (ResNet-18) is not what is timed."""
    torch = pytest.importorskip("torch")
    from mpsx.benchmarks import imported_model
    nn = torch.nn
    monkeypatch.setattr(imported_model, "resnet18", lambda: nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(8, 10)))
    figures = tmp_path / "bench.json"
    bench.main(["--device", device.name, "--quick", "--skip-kernels", "--skip-steps", "--json", str(figures)])
    assert "imported model training step" in capsys.readouterr().out
    result = json.loads(figures.read_text())
    assert result["kernels"] == [] and "steps" not in result
    maths = ["float32", "tf32", "float16"] if device.backend == "cuda" else ["float32", "float16"]
    assert [(r["math"], r["batch"]) for r in result["imported"]] == [(m, bench.IMPORTED_BATCH_SIZE) for m in maths]
    peers = {"torch_s"} | ({"torch_graph_s", "torch_compile_max_autotune_no_cudagraphs_s",
                            "torch_compile_reduce_overhead_s"} if device.backend == "cuda" else set())
    for record in result["imported"]:
        best = record.pop("best_peer")
        check_units(record)
        assert {key for key in record if key.endswith("_s")} == {"nngraph_s", "nngraph_replay_s"} | peers
        assert record[best.replace(" ", "_").replace("-", "_") + "_s"] == min(record[p] for p in peers)


def test_the_bench_says_what_the_imported_model_needs(device, tmp_path, capsys, monkeypatch):
    from mpsx.benchmarks import imported_model
    monkeypatch.setattr(imported_model, "resnet18", lambda: None)
    figures = tmp_path / "bench.json"
    bench.main(["--device", device.name, "--quick", "--skip-kernels", "--skip-steps", "--json", str(figures)])
    assert "left out, it needs torch and torchvision" in capsys.readouterr().out
    assert "imported" not in json.loads(figures.read_text())

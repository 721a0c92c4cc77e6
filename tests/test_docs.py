"""The documentation (docs/) and what it stands on: every public name of mpsx
is documented on some page, the getting-started code runs and trains on every
device, the version has one source and a changelog entry, and nothing in the
package points to files it does not ship."""

import importlib.metadata
import re
from pathlib import Path

import numpy as np
import pytest

import mpsx
import mpsx.distributed
from fuzz.catalog import public_names

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# An autodoc directive, reStructuredText (.. autoclass:: mpsx.X) or MyST ({autoclass} mpsx.X).
DOCUMENTED = re.compile(r"(?:\.\. |\{)auto(?:class|exception|function|data)(?:::|\})\s+(mpsx(?:\.\w+)+)")


def documented_names():
    return {m.group(1) for page in DOCS.rglob("*") if page.suffix in (".rst", ".md")
            for m in DOCUMENTED.finditer(page.read_text())}


def test_every_public_name_is_on_a_page():
    """A public class or function that no page of docs/ documents fails here
    (and the docs build, which checks the built pages the same way)."""
    expected = {f"mpsx.{n}" for n in public_names()}
    expected |= {f"mpsx.distributed.{n}" for n in mpsx.distributed.__all__
                 if getattr(mpsx.distributed, n) is not getattr(mpsx, n, None)}
    documented = documented_names()
    assert not sorted(expected - documented), "add these to the page of their family in docs/"
    assert not sorted(documented - expected - {"mpsx.persistence." + n for n in dir(mpsx.persistence)}), \
        "docs/ documents names mpsx does not have"


def python_blocks(page):
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(), re.MULTILINE | re.DOTALL)


def test_getting_started_runs_and_trains(device, monkeypatch, capsys):
    """Each Python block of getting-started.md runs as written, on each device
    (MPSX_DEVICE picks it), and its training loop lowers the loss."""
    monkeypatch.setenv("MPSX_DEVICE", device.name)
    blocks = python_blocks("getting-started.md")
    assert len(blocks) == 3
    trained = 0
    for block in blocks:
        namespace = {}
        exec(compile(block, "getting-started.md", "exec"), namespace)
        assert namespace.get("device", device) == device
        if "losses" in namespace:
            losses = namespace["losses"]
            assert len(losses) == 5 and np.all(np.isfinite(losses))
            assert losses[-1] < 0.8 * losses[0], losses
            trained += 1
    assert trained == 2
    assert mpsx.__version__ in capsys.readouterr().out


def test_version_is_the_installed_distributions():
    """mpsx.__version__ (mpsx/_version.py) is what the build wrote into the
    installed package's metadata (pyproject.toml reads the same file)."""
    try:
        distribution = importlib.metadata.distribution("mpsx")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("mpsx runs from a stage (PYTHONPATH), which has no package metadata")
    installed = Path(distribution.locate_file("mpsx/__init__.py")).resolve()
    if installed != Path(mpsx.__file__).resolve():
        pytest.skip(f"mpsx is imported from {mpsx.__file__}, not from the installed distribution ({installed})")
    assert mpsx.__version__ == distribution.version


def test_version_has_one_source_and_a_changelog_entry():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.MULTILINE)
    assert re.search(r'^metadata\.version\.input = "mpsx/_version\.py"', pyproject, re.MULTILINE)
    assert not re.search(r'^version = ', pyproject, re.MULTILINE)
    assert f"## [{mpsx.__version__}]" in (ROOT / "CHANGELOG.md").read_text()


def test_package_refers_only_to_files_it_ships():
    """The package, its benchmarks and examples name no file outside them
    (the design notes and MPS documents the project started from)."""
    unshipped = re.compile(r"\b(?:API|DESIGN|MPS-REFERENCE)\.md\b|\bseeds? 00\d\b|\bseeds/", re.IGNORECASE)
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in ("mpsx", "benchmarks", "examples") for path in sorted((ROOT / folder).rglob("*"))
             if path.suffix in (".py", ".pyx", ".pxi", ".pxd", ".h")
             for number, line in enumerate(path.read_text().splitlines(), 1) if unshipped.search(line)]
    assert not found

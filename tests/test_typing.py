"""The typed API: every public class, function, method and property of mpsx
has a docstring that ends with its MPS counterpart, every public callable and
constructor has a signature inspect can read, the signatures the extension
classes declare in their docstrings are those of their constructors, and the
type stubs and py.typed are installed beside the modules (mypy's stubtest,
run by .ci/run, checks the stubs against the modules), and the committed stubs
are those tools/generate_stubs.py writes."""

import enum
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mpsx
import mpsx.distributed
import mpsx.persistence

MPS_LINE = re.compile(r"^MPS: \S")
# How Cython's argument parsing refuses a call that does not fit the constructor.
SIGNATURE_ERROR = re.compile(r"__init__\(\) (takes|needs|got|missing)")


def public_objects():
    """(name, object) of every public class and function: mpsx's names (as tests/test_fuzz.py counts
    them), mpsx.distributed's __all__ and mpsx.persistence's functions."""
    found = {f"mpsx.{n}": v for n, v in vars(mpsx).items() if not n.startswith("_") and not inspect.ismodule(v)}
    found.update({f"mpsx.distributed.{n}": getattr(mpsx.distributed, n) for n in mpsx.distributed.__all__
                  if getattr(mpsx.distributed, n) is not getattr(mpsx, n, None)})
    found.update({f"mpsx.persistence.{n}": v for n, v in vars(mpsx.persistence).items()
                  if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == "mpsx.persistence"
                  and v is not getattr(mpsx, n, None)})
    return sorted(found.items())


def public_members():
    """(name, attribute) of every public method and property mpsx defines on a public class, each once
    under the class that defines it (a private base's members under the first public class that has them)."""
    found = {}
    for name, cls in public_objects():
        if not isinstance(cls, type) or issubclass(cls, (enum.Enum, BaseException)):
            continue
        for member in dir(cls):
            if member.startswith("_"):
                continue
            owner = next(k for k in cls.__mro__ if member in vars(k))
            if not owner.__module__.startswith("mpsx"):
                continue
            attribute = vars(owner)[member]
            if isinstance(attribute, (classmethod, staticmethod)):
                attribute = attribute.__func__
            if inspect.isroutine(attribute) or inspect.isdatadescriptor(attribute):
                found.setdefault((owner, member), (f"{name}.{member}", attribute))
    return sorted(found.values(), key=lambda item: item[0])


def extension_classes():
    """The public classes Cython defines (static types, whose signature their docstring declares)."""
    return [(n, c) for n, c in public_objects() if isinstance(c, type) and not c.__flags__ & (1 << 9)]


def test_the_public_api_is_found():
    # A check of the walk itself: the counts grow with the API, never shrink to nothing.
    assert len(public_objects()) > 180
    assert len(public_members()) > 500


def test_every_public_object_has_a_docstring_ending_with_its_mps_counterpart():
    missing = []
    for name, obj in public_objects() + public_members():
        lines = [line for line in (inspect.getdoc(obj) or "").splitlines() if line.strip()]
        if len(lines) < 2 or not MPS_LINE.match(lines[-1]):
            missing.append(name)
    assert not missing, (f"{len(missing)} public names lack a docstring that describes them and ends with an "
                         f"'MPS: ...' line (``MPS: none (mpsx)`` where MPS has no counterpart): {missing}")


def test_every_public_callable_has_a_signature():
    unreadable = []
    for name, obj in public_objects() + public_members():
        if not callable(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue  # BaseException's constructor (*args) has no signature CPython can report
        try:
            inspect.signature(obj)
        except (TypeError, ValueError) as e:
            unreadable.append(f"{name} ({e})")
    assert not unreadable, f"inspect.signature fails for: {unreadable}"


@pytest.mark.parametrize("name, cls", extension_classes(), ids=[n for n, _ in extension_classes()])
def test_the_declared_constructor_signature_is_the_constructors(name, cls):
    # A Cython class declares its constructor's signature as its docstring's first line,
    # "Name(parameters)\n--\n\n" (CPython's __text_signature__). Calls by those parameter names, all of
    # them and then the required ones alone, must pass the constructor's argument parsing; what the
    # constructor then makes of the placeholder values is its own business.
    if "__init__" in vars(cls):
        assert cls.__text_signature__ is not None, f"{name} defines __init__ but declares no signature"
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return
    everything = {p.name: object() for p in parameters}
    required = {p.name: object() for p in parameters if p.default is p.empty}
    for arguments in (everything, required):
        try:
            cls(**arguments)
        except Exception as e:  # noqa: BLE001 (only a refusal by the argument parsing fails the test)
            assert not SIGNATURE_ERROR.search(str(e)), f"{name}{inspect.signature(cls)} is not its constructor's: {e}"


def test_stubs_and_py_typed_are_installed_beside_the_modules():
    package = Path(mpsx.__file__).parent
    assert (package / "py.typed").is_file()
    for module in ("__init__", "_runtime", "_kernels", "distributed", "persistence"):
        assert (package / f"{module}.pyi").is_file(), f"{module}.pyi is missing from {package}"


TOOL = Path(__file__).resolve().parent.parent / "tools" / "generate_stubs.py"


def test_the_committed_stubs_are_the_generated_ones():
    # tools/generate_stubs.py --check writes the stubs of the mpsx this test imports and diffs them against
    # the committed ones; without --check it rewrites them.
    where = str(Path(mpsx.__file__).absolute().parent.parent)  # not resolved: a staged file may be a link
    result = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": where})
    assert result.returncode == 0, f"{result.stderr}\n{result.stdout[-6000:]}"


def test_the_stub_generator_stops_at_a_name_it_has_no_type_for(monkeypatch):
    # A new argument name needs its type in the tool's tables; the tool says which, rather than writing Any.
    spec = importlib.util.spec_from_file_location("generate_stubs", TOOL)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    monkeypatch.delitem(generator.TYPES, "kernel_width")
    with pytest.raises(SystemExit, match=r"no type for [\w.]+\.kernel_width: add it to TYPES or OVERRIDES"):
        generator.generate()

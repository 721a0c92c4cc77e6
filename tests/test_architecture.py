"""Every kernel family is in each place docs/architecture.md lists: its files
in every layer, a primitive registration in every backend, the stubs, its
docs page, the fuzz factories and its tests. The families are the headers
of native/include/mpsx/kernels/; nothing here imports mpsx, it reads files."""

import ast
import re
from pathlib import Path

import pytest

from fuzz import factories as fuzz_factories

ROOT = Path(__file__).resolve().parent.parent
KERNEL_HEADERS = ROOT / "native" / "include" / "mpsx" / "kernels"
BACKENDS = {"cpu": "cpp", "cuda": "cpp", "metal": "mm"}

# Headers of kernels/ that are no family, and why.
NOT_FAMILIES = {
    "normalization": "the states, epsilon and per-channel array rules that batch, instance and group normalization "
                     "share",
}
# Families without a primitive of their own: family -> (the family whose primitive, core and backend files they
# use, why).
BORROWED = {
    "instance_normalization": ("group_normalization",
                               "instance normalization is group normalization with one channel per group "
                               "(GroupNormalizationKind::Instance)"),
}
# Families without graph nodes, and why.
NO_GRAPH_NODES = {
    "optimizer": "a graph's weights update through its data sources (training_style), which call the optimizers; "
                 "MPS has no optimizer node",
}
# Families whose kernels have no Python class (so no mpsx/kernels/<family>.pxi and no tests/test_<family>.py: their
# graph nodes are tested in tests/test_graph_<family>.py), and why.
NO_PYTHON_KERNELS = {
    "reduction": "the MPSNNReduce* kernel classes are outside issue 32's scope; MPS's reduction nodes use them, "
                 "natively here",
    "scale": "MPSImageBilinearScale and MPSImageLanczosScale are MPSImage framework classes, outside issue 32's "
             "scope; MPS's scale nodes use them, natively here",
}
# Families whose graph nodes are tested in tests/test_graph.py, the graph's first test file, rather than in a
# tests/test_graph_<family>.py.
GRAPH_TESTED_IN_TEST_GRAPH = {"convolution", "neuron", "pooling"}


def families():
    return sorted(p.stem for p in KERNEL_HEADERS.glob("*.h") if p.stem not in NOT_FAMILIES)


FAMILIES = families()


def read(path):
    return (ROOT / path).read_text()


def primitive_class(family):
    """The primitive interface the family's header declares (`static constexpr const char* family`), or None."""
    found = re.search(r"class (\w+) : public \w+<\w+> \{\s*public:\s*static constexpr const char\* family = \"[^\"]+\";",
                      read(KERNEL_HEADERS / f"{family}.h"))
    return found and found.group(1)


def public_names(family):
    """The names the family's .pxi files add to mpsx._kernels.__all__ (and so to mpsx)."""
    names = []
    for layer in ("kernels", "graph"):
        path = ROOT / "mpsx" / layer / f"{family}.pxi"
        if path.exists():
            for listed in re.findall(r"^__all__ \+= (\[.*?\])", path.read_text(), re.MULTILINE | re.DOTALL):
                names += ast.literal_eval(listed)
    return names


def enums(family):
    """The family's enum classes, which the fuzzer makes from their values, without a factory."""
    return {name for layer in ("kernels", "graph") if (ROOT / "mpsx" / layer / f"{family}.pxi").exists()
            for name in re.findall(r"^class (\w+)\(enum\.", read(f"mpsx/{layer}/{family}.pxi"), re.MULTILINE)}


def missing(paths):
    return [str(p) for p in paths if not (ROOT / p).exists()]


def test_the_families_and_their_exceptions_are_what_the_headers_say():
    assert FAMILIES, f"no headers in {KERNEL_HEADERS}"
    for header, why in NOT_FAMILIES.items():
        text = read(KERNEL_HEADERS / f"{header}.h")
        assert not re.search(r"public (Unary|Binary|Gradient)?Kernel\b", text) and "family =" not in text, \
            f"kernels/{header}.h declares a kernel: {why}?"
    for family, (lender, why) in BORROWED.items():
        assert primitive_class(family) is None, f"kernels/{family}.h has a primitive now; drop it from BORROWED"
        assert f'#include "mpsx/kernels/{lender}.h"' in read(KERNEL_HEADERS / f"{family}.h"), why
    without = [f for f in FAMILIES if primitive_class(f) is None and f not in BORROWED]
    assert not without, f"no `static constexpr const char* family` primitive in kernels/<family>.h: {without}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_has_the_family_files(family):
    """The files named after the family, as docs/architecture.md ("Anatomy of a family") lists them."""
    owner = BORROWED.get(family, (family,))[0]
    paths = [f"native/include/mpsx/kernels/{family}.h", f"native/core/{owner}.cpp",
             f"native/cuda/{owner}.cu", f"native/cuda/{owner}.cuh",
             f"mpsx/includes/kernels/{family}.pxd"]
    if family not in NO_PYTHON_KERNELS:
        paths.append(f"mpsx/kernels/{family}.pxi")
    paths += [f"native/{backend}/{owner}.{ext}" for backend, ext in BACKENDS.items()]
    if family not in NO_GRAPH_NODES:
        paths += [f"native/include/mpsx/graph/{family}.h", f"native/core/graph/{owner}.cpp",
                  f"mpsx/includes/graph/{family}.pxd", f"mpsx/graph/{family}.pxi"]
    absent = missing(paths)
    assert not absent, f"{family}: no {absent}"
    for layer in ("kernels", "graph"):
        if (ROOT / "mpsx" / layer / f"{family}.pxi").exists():
            assert f'include "{layer}/{family}.pxi"' in read("mpsx/_kernels.pyx"), \
                f"{family}: mpsx/_kernels.pyx does not include {layer}/{family}.pxi"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in BORROWED])
def test_every_backend_registers_the_family(family, backend):
    """native/<backend>/<family>.<ext> registers the family's primitive for the backend, so no backend
    makes a kernel of it fail with "the <backend> backend ... has no <family> kernels"."""
    path = f"native/{backend}/{family}.{BACKENDS[backend]}"
    primitive = primitive_class(family)
    assert not missing([path]), f"{family}: no {path}"
    assert re.search(rf"(RegisterPrimitive<{primitive}>|Registered<{primitive}, \w+>) \w+\(\"{backend}\"",
                     read(path)), f"{family}: {path} registers no {primitive} for \"{backend}\""


@pytest.mark.parametrize("family", FAMILIES)
def test_every_public_name_has_a_stub(family):
    stubs = read("mpsx/_kernels.pyi")
    names = public_names(family)
    assert names, f"{family}: mpsx/kernels/{family}.pxi adds nothing to __all__"
    absent = [n for n in names if not re.search(rf"^class {n}\b", stubs, re.MULTILINE)
              or not re.search(rf"^    \"{n}\",$", stubs, re.MULTILINE)]
    assert not absent, f"{family}: no class and __all__ entry in mpsx/_kernels.pyi for {absent}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_public_name_is_on_the_family_page(family):
    page = f"docs/kernels/{family}.rst"
    assert not missing([page]), f"{family}: no {page}"
    toctree = read("docs/kernels/index.rst").split(".. toctree::")[1].split("\n\n\n")[0]
    assert re.search(rf"^   {family}$", toctree, re.MULTILINE), f"{family}: not in docs/kernels/index.rst's toctree"
    text = read(page)
    absent = [n for n in public_names(family) if not re.search(rf"^\.\. auto\w+:: mpsx\.{n}$", text, re.MULTILINE)]
    assert not absent, f"{family}: {page} documents none of {absent}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_public_class_has_a_fuzz_factory(family):
    absent = [n for n in public_names(family) if n not in fuzz_factories.FACTORIES and n not in enums(family)]
    assert not absent, f"{family}: no factory in tests/fuzz/factories.py FACTORIES for {absent}"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_its_tests(family):
    if family not in NO_PYTHON_KERNELS:
        assert not missing([f"tests/test_{family}.py"]), f"{family}: no tests/test_{family}.py"
    if family in NO_GRAPH_NODES:
        return
    nodes = [n for n in public_names(family) if n.endswith("Node")]
    if family in GRAPH_TESTED_IN_TEST_GRAPH:
        assert any(n in read("tests/test_graph.py") for n in nodes), \
            f"{family}: tests/test_graph.py uses none of {nodes}"
    else:
        assert not missing([f"tests/test_graph_{family}.py"]), f"{family}: no tests/test_graph_{family}.py"

"""Every name of MPS's CNN-training API, as docs/mps-manifest.txt lists them (tools/mps_manifest.py writes it
from the SDK headers), is mapped to mpsx by the rule of docs/names.md and confirmed by the MPS: line of the mpsx
object's docstring, or left out in docs/names.md with a reason, or on the missing list
tests/data/mps_names_missing.txt, a ratchet: a name on it that mpsx has now fails until it is taken off."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import mps_names  # noqa: E402  (the reader the docs extension uses)


@pytest.fixture(scope="module")
def classified():
    return {line: (name, status, detail) for rows in mps_names.classify().values() for line, name, status, detail
            in rows}


def test_every_name_is_mapped_left_out_or_missing(classified):
    unlisted = sorted(name for name, status, _ in classified.values() if status == "unlisted")
    assert not unlisted, ("these MPS names are neither mapped to mpsx (docs/names.md's rule, confirmed by an MPS: "
                          "line), nor left out in docs/names.md, nor in tests/data/mps_names_missing.txt")


@pytest.fixture(scope="module")
def mapped():
    """{MPS name: mpsx name} of the names mpsx has, whatever the lists say."""
    return {name: detail for rows in mps_names.classify(left={}, absent=[]).values()
            for _, name, status, detail in rows if status == "mapped"}


def test_missing_names_are_not_mapped(mapped):
    """The ratchet: a name mpsx has now comes off the missing list."""
    done = sorted(f"{name} ({mapped[name]})" for name in mps_names.missing() if name in mapped)
    assert not done, "mpsx has these now: take them off tests/data/mps_names_missing.txt"


def test_mapped_members_are_named_by_the_rule(mapped):
    """A member mapped by its MPS: line has the name docs/names.md's rule gives it, or names.md lists it as named
    otherwise (`- `MPSImage.featureChannelFormat` is `mpsx.Image.data_type`: why`)."""
    otherwise = mps_names.renamed()
    lines = {mps_names.key(line): line for lines in mps_names.read_manifest().values() for line in lines}
    wrong = sorted(f"{name} is {found}, not {' or '.join(sorted(mps_names.rule_names(lines[name])))}"
                   for name, found in mapped.items()
                   if not mps_names.ENTRY.match(lines[name])["type"] and not found.endswith("()")
                   and found not in ("mpsx.load", "mpsx.save")
                   and found.rsplit(".", 1)[1] not in mps_names.rule_names(lines[name])
                   and otherwise.get(name) != found[len("mpsx."):])
    assert not wrong, "rename these, or list them in docs/names.md as named otherwise with the reason"


def test_no_name_is_both_mapped_and_left_out(mapped):
    both = sorted(f"{name} ({mapped[name]})" for name in mps_names.left_out() if name in mapped)
    assert not both, "mapped names listed as left out in docs/names.md"


def test_no_name_is_both_left_out_and_missing():
    assert not sorted(set(mps_names.left_out()) & set(mps_names.missing()))


def test_listed_names_are_in_the_manifest(classified):
    names = {name for name, _, _ in classified.values()}
    unknown = sorted(set(mps_names.missing()) - names) + sorted(set(mps_names.left_out()) - names)
    assert not unknown, "not names of docs/mps-manifest.txt"


def test_left_out_reasons_say_why():
    left = mps_names.left_out()
    assert left, "docs/names.md has no Left out section"
    vague = re.compile(r"\b(todo|tbd|fixme|not (yet )?(done|implemented|supported)|later|someday)\b|^\W*$", re.I)
    bad = sorted(name for name, reason in left.items() if len(reason.split()) < 4 or vague.search(reason))
    assert not bad, "a reason says why the name has no place in mpsx, in a sentence"


def test_mapping_reads_mps_lines():
    """The classification is the MPS: lines' word: a member whose line names a manifest entry maps it, one that
    names nothing does not (a check of the reader on mpsx's own objects, both ways)."""
    index, types = mps_names.mpsx_index()
    assert ("MPSCNNNeuronNode", "nodeWithSource:descriptor:") in index
    assert ("CNNNeuronNode", "node_with_source") in index[("MPSCNNNeuronNode", "nodeWithSource:descriptor:")]
    assert types["MPSCNNConvolution"] == {"CNNConvolution"}
    headers = {"MPSX/Test.h": ["class MPSCNNConvolution : MPSCNNKernel", "-[MPSCNNConvolution noSuchSelector:]",
                               "MPSCNNConvolution.noSuchProperty readonly", "class MPSNoSuchClass : NSObject",
                               "-[MPSCNNConvolution initWithDevice:weights:]",
                               "-[MPSCNNConvolution initWithDevice:noSuchArgument:]"]}
    rows = {name: status for _, name, status, _ in mps_names.classify(headers, left={}, absent=[])["MPSX/Test.h"]}
    assert rows == {"MPSCNNConvolution": "mapped", "-[MPSCNNConvolution noSuchSelector:]": "unlisted",
                    "MPSCNNConvolution.noSuchProperty": "unlisted", "MPSNoSuchClass": "unlisted",
                    "-[MPSCNNConvolution initWithDevice:weights:]": "mapped",
                    "-[MPSCNNConvolution initWithDevice:noSuchArgument:]": "unlisted"}
    headers["MPSX/Test.h"] += ["-[MPSNoSuchClass run]"]
    rows = {name: (status, detail) for _, name, status, detail in mps_names.classify(
        headers, left={"-[MPSCNNConvolution noSuchSelector:]": "a reason"},
        absent=["MPSNoSuchClass", "MPSCNNConvolution.noSuchProperty"])["MPSX/Test.h"]}
    assert rows["-[MPSCNNConvolution noSuchSelector:]"] == ("left out", "a reason")
    assert rows["MPSCNNConvolution.noSuchProperty"][0] == rows["-[MPSNoSuchClass run]"][0] == "missing"


def test_inherited_selector_maps_to_the_mpsx_base(classified):
    """A selector MPS declares on a base is where mpsx declares it on the corresponding base."""
    assert classified["-[MPSCNNKernel encodeToCommandBuffer:sourceImage:destinationImage:]"][1] == "mapped"
    assert classified["MPSKernel.label readwrite"][1:] == ("mapped", "mpsx.CNNKernel.label")


@pytest.mark.skipif(not os.environ.get("MPSX_MACOS_SDK"), reason="MPSX_MACOS_SDK names no macOS SDK to read")
def test_manifest_is_what_the_tool_writes():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "mps_manifest.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_tool_parses_header_forms(tmp_path):
    """The header forms the tool meets, on a made-up header (no Apple text)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import mps_manifest
    text = """
    // @interface Commented : NSObject
    @protocol Forward;
    @protocol P1, P2;
    /*! @property fake */
    #if defined(X)
    #endif
    MPS_CLASS_AVAILABLE_STARTING(macos(10.13))
    @interface MPSA : NSObject <NSCopying, P1>
    {
        int ivar;
    }
    @property (readonly, nonatomic) NSUInteger count;
    @property (nonatomic, retain, nullable) id <Thing> thing MPS_AVAILABLE_STARTING(macos(10.14));
    @property (class, readonly) BOOL flag;
    -(nonnull instancetype) initWithDevice: (nonnull id <MTLDevice>) device
                                     count: (NSUInteger) count NS_DESIGNATED_INITIALIZER;
    -(nonnull instancetype) init NS_UNAVAILABLE;
    +(nonnull instancetype) aWithB: (void (^ __nonnull)(int x)) b;
    -(void) run MPS_AVAILABLE_STARTING_BUT_DEPRECATED("use walk", macos(10.13, 10.15));
    @end
    @interface MPSA (Extra)
    -(void) extra;
    @end
    @protocol MPSP <NSObject>
    @required
    -(NSUInteger) needed;
    @optional
    @property (readwrite) float rate;
    @end
    """
    assert mps_manifest.parse(text) == {
        "class MPSA : NSObject <NSCopying, P1>", "MPSA.count readonly", "MPSA.thing readwrite",
        "MPSA.flag class readonly", "-[MPSA initWithDevice:count:]", "+[MPSA aWithB:]", "-[MPSA run]",
        "-[MPSA extra]", "protocol MPSP <NSObject>", "-[MPSP needed]", "MPSP.rate readwrite"}

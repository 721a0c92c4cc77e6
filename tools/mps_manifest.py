#!/usr/bin/env python3
"""Writes the names-only manifest of MPS's CNN-training API, docs/mps-manifest.txt.

Reads the Objective-C headers of the MPSCore and MPSNeuralNetwork frameworks
of a macOS SDK (MPSX_MACOS_SDK, or --sdk DIR) and writes one line per name,
sorted, and nothing of the headers' text beyond the names:

    class MPSCNNConvolution : MPSCNNKernel       an @interface, its base and protocols
    protocol MPSCNNConvolutionDataSource <NSCopying, NSObject>   an @protocol with a body
    -[MPSCNNConvolution initWithDevice:weights:] an instance method
    +[MPSCNNNeuronNode nodeWithSource:descriptor:]  a class method
    MPSCNNConvolution.inputFeatureChannels readonly   a property
    MPSImageAllocator.supportsSecureCoding class readonly   a class property

A category's members belong to the class it extends. A method or property
marked NS_UNAVAILABLE (or __attribute__((unavailable))) is left out of the
manifest: no program can call it, so it has no counterpart to find (the
`-init` and `+new` that most MPS classes mark so). Deprecated names stay.

The scope is CNN training: OUT_OF_SCOPE_HEADERS and OUT_OF_SCOPE_NAMES leave
out RNN, YOLO, MPSMatrix* (not MPSVector*, which the optimizers' vector
encodes take), MPSNDArray*, binary convolution, the reduction kernels (not
the spatial mean and feature channels sum nodes, which have gradients),
crop/resize, grid sample and slice. The comparison kernel and node stay:
mpsx has NNComparisonNode.

    tools/mps_manifest.py [--sdk DIR] [--output FILE | --check FILE]
"""

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "docs" / "mps-manifest.txt"
FRAMEWORKS = ("MPSCore", "MPSNeuralNetwork")
HEADERS = "System/Library/Frameworks/MetalPerformanceShaders.framework/Frameworks/{}.framework/Headers"

OUT_OF_SCOPE_HEADERS = {
    "MPSRNNLayer.h",                        # RNN
    "MPSMatrixBatchNormalization.h", "MPSMatrixFullyConnected.h",
    "MPSMatrixLayer.h", "MPSMatrixNeuron.h", "MPSMatrixSum.h",  # MPSMatrix*
    "MPSNDArray.h",                         # MPSNDArray*
    "MPSNNReduce.h",                        # reduction kernels
    "MPSNNResize.h",                        # crop/resize
    "MPSNNGridSample.h",                    # grid sample
    "MPSNNSlice.h",                         # slice
}
# Out of scope by name, in headers that are otherwise in scope.
OUT_OF_SCOPE_NAMES = re.compile(
    r"^MPS(?:"
    r"CNNYOLOLoss\w*"                                 # YOLO
    r"|CNNBinary(?:Convolution|FullyConnected)\w*"    # binary convolution
    r"|NDArray\w*|Matrix\w*|TemporaryMatrix|RNN\w*"  # MPSMatrix.h's MPSVector* stay: the optimizers encode them
    r"|NNReduction(?!SpatialMean(?:Gradient)?Node$|FeatureChannelsSumNode$)\w*"  # reductions, less those with a gradient
    r"|NNCropAndResize\w*|NNResize\w*"                # crop/resize
    r"|NNGridSample\w*|NNSlice\w*"
    r")$")

UNAVAILABLE = re.compile(r"\bNS_UNAVAILABLE\b|__attribute__\s*\(\(\s*unavailable")


def strip_comments(text):
    """The text without comments and preprocessor lines (continuations included)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def skip_group(text, i, open_, close):
    """The index after the group opening at text[i] (balanced open_/close)."""
    depth = 0
    while i < len(text):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {open_}{close}")


TOKEN = re.compile(r"\s*(\(|\w+|[^\w\s])")


def tokens(decl):
    """The declaration's tokens, a parenthesized group as one token."""
    out, i = [], 0
    while True:
        m = TOKEN.match(decl, i)
        if not m:
            return out
        if m.group(1) == "(":
            end = skip_group(decl, m.start(1), "(", ")")
            out.append(decl[m.start(1):end])
            i = end
        else:
            out.append(m.group(1))
            i = m.end()


def selector(decl):
    """The selector of a method declaration (after its - or +)."""
    toks = tokens(decl)
    # label ':' (type) name, repeated, after the return type; or one unary label.
    parts, i = [], 1 if toks and toks[0].startswith("(") else 0
    while i + 1 < len(toks) and re.fullmatch(r"\w+", toks[i]) and toks[i + 1] == ":":
        parts.append(toks[i] + ":")
        i += 2
        if i < len(toks) and toks[i].startswith("("):
            i += 1
        i += 1
    if parts:
        return "".join(parts)
    if i < len(toks) and re.fullmatch(r"\w+", toks[i]):
        return toks[i]
    raise ValueError(f"no selector in {decl!r}")


MACRO = re.compile(r"^(?:[A-Z][A-Z0-9_]*|__\w+)$")


def property_entry(decl):
    """(name, attributes) of an @property declaration (after @property)."""
    toks = tokens(decl)
    attrs = []
    if toks and toks[0].startswith("("):
        attrs = [a.strip().split("=")[0] for a in toks[0][1:-1].split(",")]
        toks = toks[1:]
    # The name is the last identifier before trailing macros (and their arguments).
    names = [t for t in toks if re.fullmatch(r"\w+", t)]
    while names and MACRO.match(names[-1]) and len(names) > 2:
        names.pop()
    # A block type `void (^name)(...)` names itself inside a group.
    for t in toks:
        m = re.fullmatch(r"\(\s*\^\s*(?:\w+\s+)*(\w+)\s*\)", t)
        if m:
            return m.group(1), attrs
    return names[-1], attrs


HEAD = re.compile(r"@(interface|protocol)\s+(\w+)\s*(\(\s*\w*\s*\))?\s*(?::\s*(\w+))?\s*(?:<([^>]*)>)?\s*(;)?")


def parse(text):
    """The set of manifest lines of one header's text."""
    text = strip_comments(text)
    entries = set()
    pos = 0
    while True:
        m = re.compile(r"@(?:interface|protocol)\b").search(text, pos)
        if not m:
            return entries
        head = HEAD.match(text, m.start())
        kind, owner, category, base, protocols, forward = head.groups()
        pos = head.end()
        if kind == "protocol" and (forward or re.match(r"\s*,", text[pos:])):
            if not forward:                                # @protocol X, Y;
                pos = text.index(";", pos) + 1
            continue
        # A type's line names its base and protocols: they say where inherited members map.
        adopted = ", ".join(re.findall(r"\w+", protocols or ""))
        bases = (f" : {base}" if base else "") + (f" <{adopted}>" if adopted else "")
        if kind == "interface" and not category:
            entries.add(f"class {owner}{bases}")
        elif kind == "protocol":
            entries.add(f"protocol {owner}{bases}")
        end = text.index("@end", pos)
        body = text[pos:end]
        pos = end + 4
        if body.lstrip().startswith("{"):                  # instance variables
            start = body.index("{")
            body = body[skip_group(body, start, "{", "}"):]
        body = re.sub(r"@(?:optional|required|public|private|protected|package)\b", " ", body)
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl or UNAVAILABLE.search(decl):
                continue
            if decl[0] in "-+":
                entries.add(f"{decl[0]}[{owner} {selector(decl[1:])}]")
            elif decl.startswith("@property"):
                name, attrs = property_entry(decl[len("@property"):])
                access = "readonly" if "readonly" in attrs else "readwrite"
                entries.add(f"{owner}.{name} {'class ' if 'class' in attrs else ''}{access}")
            elif re.match(r"\w", decl):
                raise ValueError(f"{owner}: a declaration neither method nor property: {decl[:80]!r}")


def owner_of(entry):
    """The class or protocol an entry belongs to."""
    m = re.match(r"(?:class |protocol |[-+]\[)?(\w+)", entry)
    return m.group(1)


def manifest(sdk):
    """{header file name: its in-scope manifest lines} of the SDK at sdk."""
    headers = {}
    for framework in FRAMEWORKS:
        directory = Path(sdk) / HEADERS.format(framework)
        if not directory.is_dir():
            raise SystemExit(f"mps_manifest: no {framework} headers at {directory}")
        for path in sorted(directory.glob("*.h")):
            if path.name in OUT_OF_SCOPE_HEADERS:
                continue
            lines = {e for e in parse(path.read_text(errors="replace")) if not OUT_OF_SCOPE_NAMES.match(owner_of(e))}
            if lines:
                headers[f"{framework}/{path.name}"] = lines
    return headers


def render(headers):
    """The manifest file's text: a `# header` line, then its entries sorted."""
    out = ["# MPS names in mpsx's scope (CNN training), by tools/mps_manifest.py from the SDK headers."]
    for header in sorted(headers):
        out.append(f"# {header}")
        out.extend(sorted(headers[header]))
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdk", default=os.environ.get("MPSX_MACOS_SDK"),
                        help="the macOS SDK root (default: $MPSX_MACOS_SDK)")
    parser.add_argument("--output", default=str(MANIFEST), help=f"where to write (default: {MANIFEST})")
    parser.add_argument("--check", action="store_true", help="exit 1 if --output differs instead of writing it")
    args = parser.parse_args()
    if not args.sdk:
        parser.error("no SDK: pass --sdk DIR or set MPSX_MACOS_SDK")
    text = render(manifest(args.sdk))
    if args.check:
        current = Path(args.output).read_text() if Path(args.output).exists() else ""
        if current != text:
            print(f"{args.output} is not current: run tools/mps_manifest.py", file=sys.stderr)
            return 1
        return 0
    Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MPS names in mpsx, read from the package: the ``MPS:`` line each public
docstring ends with, and how the MPS names manifest (docs/mps-manifest.txt,
written by tools/mps_manifest.py) maps to them. Plain Python, no Sphinx:
the docs extension (mpsx_docs.py) and tests/test_mps_names.py both use it.

An entry of the manifest is *mapped* when mpsx has it by the rule of
docs/names.md:
- a class or protocol ``MPSFoo`` is ``mpsx.Foo``, whose docstring's ``MPS:``
  line names ``MPSFoo``;
- a method or property ``m`` of ``MPSFoo`` is a member of mpsx whose
  ``MPS:`` line names ``m`` on ``MPSFoo``; or a member of ``mpsx.Foo`` (its
  own or inherited) or a function of mpsx whose line names ``m`` on one of
  ``MPSFoo``'s MPS bases or protocols (a selector MPS declares on a base maps
  where mpsx declares it on the corresponding base); or, for a selector, the
  method of ``mpsx.Foo`` the rule names whose line names a selector with the
  same first part (selectors that differ in optional arguments are one
  method);
- an ``init...`` selector of ``MPSFoo`` is ``mpsx.Foo``'s constructor when
  it takes the selector's arguments by name or the class docstring names the
  selector; ``initWithCoder:``/``encodeWithCoder:`` are mpsx.load/mpsx.save.
It is *left out* when docs/names.md lists it under "Left out" with a reason,
and *missing* when tests/data/mps_names_missing.txt lists it. A class or
protocol left out or missing carries its members with it.
"""

import collections
import enum
import inspect
import re
from pathlib import Path

import mpsx

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFEST = ROOT / "docs" / "mps-manifest.txt"
NAMES_PAGE = ROOT / "docs" / "names.md"
MISSING = ROOT / "tests" / "data" / "mps_names_missing.txt"

MPS_LINE = re.compile(r"^\s*MPS:\s*(.*?)\s*$")


def public_names(module=mpsx):
    """The module's public names: its __all__, or its attributes not starting
    with an underscore, less modules (as tests/test_fuzz.py counts them)."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)]
    return sorted(names)


def mps_line(obj):
    """The text of the docstring's ``MPS:`` line, or None."""
    found = [m.group(1) for m in map(MPS_LINE.match, (inspect.getdoc(obj) or "").splitlines()) if m]
    return found[-1].strip("`") if found else None


def members(cls):
    """(member, value, is_routine, MPS line) of each public member the class itself defines whose
    docstring's MPS: line names a counterpart."""
    out = []
    if isinstance(cls, enum.EnumMeta):
        return out
    for member, value in vars(cls).items():
        if member.startswith("_"):
            continue
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if not (inspect.isroutine(value) or inspect.isdatadescriptor(value)):
            continue
        mps = mps_line(value)
        if mps and not mps.startswith("none"):
            out.append((member, value, inspect.isroutine(value), mps))
    return out


def member_rows(cls, name):
    """(MPS, mpsx member, role) for each member the class defines whose docstring's MPS: line names a
    counterpart."""
    return [(mps, f"{name}.{member}", "meth" if routine else "attr") for member, _, routine, mps in members(cls)]


# --- the manifest -------------------------------------------------------------------------------------------

ENTRY = re.compile(r"^(?:(?P<type>class|protocol) (?P<name>\w+)(?: : (?P<base>\w+))?(?: <(?P<protocols>[\w, ]+)>)?"
                   r"|[-+]\[(?P<owner>\w+) (?P<selector>[\w:]+)\]"
                   r"|(?P<powner>\w+)\.(?P<property>\w+) (?:class )?(?:readonly|readwrite))$")
# Names on an MPS: line: a selector, Class.property, or a bare class.
NAMED = re.compile(r"[-+]\[(\w+) ([\w:]+)\]|\b(MPS\w+)\.(\w+)\b|(?:^|(?<=, ))(MPS\w+)(?=, |$)")


def key(entry):
    """The MPS name of a manifest line, as docs/names.md and the missing list write it: the line less
    its `class `/`protocol ` and its bases, or less its readonly/readwrite."""
    m = ENTRY.match(entry)
    if m is None:
        raise ValueError(f"not a manifest line: {entry!r}")
    if m["type"]:
        return m["name"]
    return entry if m["owner"] else f"{m['powner']}.{m['property']}"


def read_manifest(path=MANIFEST):
    """{header: [manifest lines]}."""
    headers, current = {}, None
    for line in Path(path).read_text().splitlines():
        if line.startswith("# ") and line.endswith(".h"):
            current = headers.setdefault(line[2:], [])
        elif line and not line.startswith("#"):
            current.append(line)
    return headers


def left_out(page=NAMES_PAGE):
    """{MPS name: reason} of the "Left out" section of docs/names.md: lines ``- `name`: reason``."""
    text = Path(page).read_text()
    section = re.search(r"^## Left out\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not section:
        return {}
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^- `([^`]+)`:?\s*(.*)$", section.group(1), re.M)}


def renamed(page=NAMES_PAGE):
    """{MPS name: mpsx name} of the lines ``- `MPSFoo` is `mpsx.Bar`: why`` of docs/names.md: the classes and
    members the rule does not name."""
    return dict(re.findall(r"^\s*- `([^`]+)` is `mpsx\.([\w.]+)`", Path(page).read_text(), re.M))


def missing(path=MISSING):
    """The MPS names of the missing list, one a line (# starts a comment)."""
    return [line.split("#")[0].strip() for line in Path(path).read_text().splitlines() if line.split("#")[0].strip()]


def mpsx_index():
    """{(MPS owner, member): {(public mpsx class or None, mpsx member name)}} of every MPS: line that names a
    member (a selector or a property; a unary selector and a property are the same member), each under the
    public classes that have it; and {MPS type: public mpsx name} of the classes' own lines."""
    index, types = collections.defaultdict(set), {}
    for name in public_names():
        obj = getattr(mpsx, name)
        line = mps_line(obj) or ""
        for sel_owner, sel, prop_owner, prop, bare in NAMED.findall(line):
            if bare:
                types.setdefault(bare, set()).add(name)
            elif not isinstance(obj, type):
                index[(sel_owner or prop_owner, sel or prop)].add((None, name))
        if not isinstance(obj, type):
            continue
        for klass in obj.__mro__:
            if not klass.__module__.startswith("mpsx"):
                continue
            for member, _, _, line in members(klass):
                for sel_owner, sel, prop_owner, prop, _ in NAMED.findall(line):
                    index[(sel_owner or prop_owner, sel or prop)].add((name, member))
    return index, types


def snake(name):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# NSSecureCoding, for every class mpsx saves.
CODING = {"initWithCoder:": "mpsx.load", "initWithCoder:device:": "mpsx.load", "encodeWithCoder:": "mpsx.save"}


def method_names(selector):
    """The names the rule gives a selector's method: its first part in snake_case, with or without the phrase
    from its first To, For, On or With that names the first argument (``encodeBatchToCommandBuffer:`` is
    ``encode_batch``, ``synchronizeOnCommandBuffer:`` is ``synchronize``, ``nodeWithSource:`` is
    ``node_with_source``)."""
    first = selector.split(":")[0]
    short = re.match(r"(.+?)(?:To|For|On|With)[A-Z]\w*$", first)
    return {snake(first)} | ({snake(short.group(1))} if short and ":" in selector else set())


def rule_names(entry):
    """The mpsx member names the rule allows for a manifest line of a selector or property."""
    m = ENTRY.match(entry)
    return {snake(m["property"])} if m["property"] else method_names(m["selector"])


def takes_arguments(function, selector):
    """Whether a method takes the later parts of a selector as arguments by their snake_case names (the variants
    of one selector that only some arguments tell apart are one method, which must take them all)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return all(snake(p) in parameters for p in selector.split(":")[1:] if p)


def constructs(cls, owner, selector):
    """Whether the class's constructor is the initializer: it takes the selector's arguments by their
    snake_case names (``initWithDevice:kernelWidth:`` takes device, kernel_width), or the class docstring
    names the selector (where MPS's argument names differ: ``As -[MPSCNNConvolution initWithDevice:weights:]``)."""
    if f"[{owner} {selector}]" in (inspect.getdoc(cls) or ""):
        return True
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    names = [snake(p) for p in re.sub(r"^init(?:With)?", "", selector).split(":") if p]
    return bool(names) and all(n in parameters for n in names) and not any(
        p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values())


def classify(headers=None, left=None, absent=None):
    """{header: [(manifest line, MPS name, status, detail)]}, status one of "mapped" (detail: the mpsx name),
    "left out" (the reason), "missing" or "unlisted". A name listed as left out or missing is so whether or
    not it is mapped: classify(left={}, absent=[]) is the mapping alone."""
    headers = read_manifest() if headers is None else headers
    left = left_out() if left is None else left
    absent = set(missing() if absent is None else absent)
    index, types = mpsx_index()
    other_names = {k: v for k, v in renamed().items() if re.fullmatch(r"MPS\w+", k)}
    bases = {}
    for lines in headers.values():
        for line in lines:
            m = ENTRY.match(line)
            if m["type"]:
                bases[m["name"]] = ([m["base"]] if m["base"] else []) + re.findall(r"\w+", m["protocols"] or "")

    def ancestry(name):
        seen, todo = [], [name]
        while todo:
            n = todo.pop(0)
            if n not in seen:
                seen.append(n)
                todo.extend(bases.get(n, []))
        return seen

    def counterpart(mps):
        """The public mpsx class the rule names for an MPS type, where its MPS: line confirms it."""
        name = other_names.get(mps, mps[3:] if mps.startswith("MPS") else None)
        return name if name in types.get(mps, ()) else None

    out = {}
    for header, lines in headers.items():
        rows = out.setdefault(header, [])
        for line in lines:
            m = ENTRY.match(line)
            name = key(line)
            owner = m["name"] or m["owner"] or m["powner"]
            member = m["selector"] or m["property"]
            found = None
            cls = counterpart(owner)
            if m["type"]:
                found = f"mpsx.{cls}" if cls else None
            elif cls and member in CODING:
                found = CODING[member]
            elif cls and member.startswith("init"):
                found = f"mpsx.{cls}()" if constructs(getattr(mpsx, cls), owner, member) else None
            else:
                # This very name on any mpsx class or function; else a base's or protocol's name where mpsx.Foo
                # has it; else a variant of the selector (same first part) that mpsx.Foo's method names.
                # Of several, the one on mpsx.Foo with the rule's name.
                best = lambda h: (h[0] != cls, h[1] not in rule_names(line), h)  # noqa: E731
                hits = sorted(index.get((owner, member), ()), key=best)
                for base in ancestry(owner):
                    hits = hits or sorted((h for h in index.get((base, member), ()) if h[0] in (cls, None)), key=best)
                first = member.split(":")[0]
                for base in ancestry(owner) if ":" in member else ():
                    hits = hits or sorted(h for (b, sel), found_at in index.items()
                                          if b == base and sel.split(":")[0] == first for h in found_at
                                          if h[0] == cls and h[1] in method_names(member)
                                          and takes_arguments(getattr(getattr(mpsx, cls), h[1]), member))
                if hits:
                    found = "mpsx." + ".".join(filter(None, hits[0]))
            # A name's own listing first, then its type's (which carries its members), then the mapping.
            if name in left:
                rows.append((line, name, "left out", left[name]))
            elif name in absent:
                rows.append((line, name, "missing", ""))
            elif not m["type"] and owner in left:
                rows.append((line, name, "left out", left[owner]))
            elif not m["type"] and owner in absent:
                rows.append((line, name, "missing", ""))
            elif found:
                rows.append((line, name, "mapped", found))
            else:
                rows.append((line, name, "unlisted", ""))
    return out


def coverage(classified=None):
    """[(header, types mapped, left out, missing, members mapped, left out, missing)] and a total row."""
    classified = classify() if classified is None else classified
    table, total = [], [0] * 6
    for header, rows in sorted(classified.items()):
        counts = [0] * 6
        for line, _, status, _ in rows:
            if status == "unlisted":
                continue
            column = ("mapped", "left out", "missing").index(status)
            counts[column + (0 if ENTRY.match(line)["type"] else 3)] += 1
        table.append((header, *counts))
        total = [a + b for a, b in zip(total, counts)]
    return table + [("total", *total)]

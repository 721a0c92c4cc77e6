"""Crash-isolated fuzzing of every public mpsx class.

The errors contract (README.md, "Bad input"): bad input gets a clear
exception naming what was expected and what was given (TypeError, ValueError
or mpsx.ShapeError, IndexError, an mpsx.MPSXError, MemoryError), raised before
anything is enqueued; nothing is lost or corrupted; never a crash or a hang.
This test drives every public class of mpsx with generated hostile
arguments, in child processes that the parent replaces after a crash or a
hang:

- the catalog: the public classes and functions (mpsx.__all__), their
  constructors, methods and properties, by introspection;
- the factories (tests/fuzz_factories.py): for each class, code making a
  valid instance and valid arguments for its methods; a probe runs each once
  and describes what it made (types, shapes, which properties are writable);
  a class with methods but no working factory fails the test by name;
- the generator: case N of a seed is a short Python snippet, a copy-pasteable
  reproducer, that runs a factory and then makes one hostile call: a
  constructor or method with an argument replaced by a hostile value fitted
  to the valid one (wrong shapes, dtypes, layouts and devices, arrays that end
  at an unreadable page, states of other kernels, committed command buffers,
  overflowing ints, non-integral floats, ...); a hostile property set, then
  an encode; the factory with one of its sizes made hostile everywhere, then
  an encode; a member of an object made by cls.__new__(cls); a data source
  whose members misbehave; a completed handler calling back into the
  runtime; valid calls around commits; a valid object saved (or pickled),
  its file (or description and arrays) tampered with, then loaded: a tensor
  referenced 100,000 times, other dtypes, shapes and offsets, names of a
  megabyte, unknown classes, nesting 100,000 deep, hostile scalars, a key
  dropped, the file cut short; or a valid encode whose destination is one
  of its sources, a batch view one image off a source batch or an image
  over a source's memory. The cases of a kind go round its targets, each
  visit taking the target's next hostile variant;
- the child runner runs a batch of cases, reporting each one's start and
  phase so that a crash or a hang is pinned on its case, then commits and
  waits for what each encoded, and judges what each raised;
- the parent loop runs the batches on every core, starts a new child after a
  crash or a hang (skipping the later cases of that target), collects the
  findings and prunes each kind's shortest reproducer.

A finding: a crash (a signal, a sanitizer's report, or an exit status
without a Python exception), a hang, an exception mpsx raised other than those
above or without a message (from a call, a command buffer's error or a
callback; what the case's own code raises is no finding), bad input accepted
(a non-integral number where an int is expected), a call that raised after
it had encoded commands, or, by the stricter rule of loading, a failure of
mpsx.save, mpsx.load or unpickling other than an mpsx.MPSXError, or with a
message quoting more than about 200 characters of the file.

Knobs: MPSX_FUZZ_CASES (cases per device; the default takes about 75 s on
2 cores with the cpu device), MPSX_FUZZ_SEED, MPSX_FUZZ_TIMEOUT (seconds one
case may take). Long runs, the same code path:
    python tests/test_fuzz.py --cases 100000 --seed 7 [--device cpu] [--only CNNConvolution,Vector]
    python tests/test_fuzz.py --cases 25000 --first-case 50000 --seed 7 --time-limit 400   # a part of one
    python tests/test_fuzz.py --seed 7 --show 1234      # prints the reproducer of case 1234
"""

import argparse
import ast
import collections
import dataclasses
import enum
import faulthandler
import gc
import inspect
import io
import json
import os
import queue
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tokenize
import traceback
import types
import zlib
from pathlib import Path

import numpy as np

import mpsx
from fuzz_factories import FACTORIES

CASES = int(os.environ.get("MPSX_FUZZ_CASES", "6000"))
SEED = int(os.environ.get("MPSX_FUZZ_SEED", "1"))
ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
TIMEOUT = float(os.environ.get("MPSX_FUZZ_TIMEOUT", "20" if ASAN else "5"))
STARTUP_TIMEOUT = 120  # seconds a child may take to start
BATCH = 40  # cases per child process
RESTART_SECONDS = 0.5  # what starting a new child after a crash costs, about
MEMORY_LIMIT = 8 << 30  # address space of a child, so that a huge allocation fails cleanly

# What every case runs first; the parts in FUZZ_ERROR and RNG where it uses them.
PRELUDE = """\
import copy, pickle, weakref
import numpy as np
import mpsx
{extras}
dev = device = mpsx.Device({device!r})
q = dev.command_queue
cb = command_buffer = q.command_buffer()
"""
FUZZ_ERROR = """

class FuzzError(Exception):
    \"\"\"What the case's own callbacks raise.\"\"\"


def fuzz_raise(*args, **kwargs):
    raise FuzzError("raised by the fuzz case")

"""
RNG = "rng = np.random.default_rng(0)\n"
GUARDED = """

def guarded(array):
    \"\"\"array, copied to end where an unreadable page begins: reading past it crashes.\"\"\"
    import ctypes, mmap
    page = mmap.PAGESIZE
    size = (array.nbytes + page - 1) // page * page
    memory = mmap.mmap(-1, size + page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
    ctypes.CDLL(None).mprotect(ctypes.c_void_p(start + size), ctypes.c_size_t(page), 0)
    out = np.frombuffer(memory, array.dtype, array.size, size - array.nbytes).reshape(array.shape)
    out[...] = array
    return out

"""


# What a checkpoint case runs: the strict rule of loading is judged here, in the case.
CHECKPOINT = """

import json, math, tempfile, types


class CheckpointFinding(Exception):
    \"\"\"mpsx.save, mpsx.load or unpickling failed other than with an mpsx.MPSXError, or with one quoting
    the file at length: args (kind of finding, what, type of the error).\"\"\"


def judged(step, read):
    \"\"\"step(), whose failure must be an mpsx.MPSXError quoting at most about 200 characters of `read`.\"\"\"
    try:
        return step()
    except mpsx.MPSXError as error:
        message, name = str(error), type(error).__name__
        # A quote of 299 characters or more holds one of these windows; no message needs 20,000.
        if len(message) > 20000 or any(message[i:i + 200] in read for i in range(0, len(message) - 199, 100)):
            raise CheckpointFinding("quote", f"{name} of {len(message)} characters: {message[:200]}", name) from error
        raise
    except Exception as error:
        raise CheckpointFinding("exception", f"{type(error).__name__}: {str(error)[:200]}",
                                type(error).__name__) from error


def tampered(obj, tamper, *args, pickled=False):
    \"\"\"obj saved by mpsx.save (or reduced, as pickle does), changed by tamper(saved, *args), then loaded
    on dev (or unpickled). saved.text is the JSON description; saved.tensors the tensors by name: the
    file's header entries, placed after tampering where it set no data_offsets, or a pickle's arrays;
    saved.blobs the file's bytes of each; saved.keep the bytes of the file to keep (modulo its size).\"\"\"
    saved = types.SimpleNamespace(blobs={}, keep=None)
    if pickled:
        restore, (saved.text, saved.tensors) = judged(obj.__reduce__, "")
        tamper(saved, *args)
        return judged(lambda: restore(saved.text, saved.tensors), saved.text)
    with tempfile.TemporaryDirectory() as folder:
        path = folder + "/checkpoint.safetensors"
        judged(lambda: mpsx.save(obj, path), "")
        with open(path, "rb") as file:
            raw = file.read()
        size = int.from_bytes(raw[:8], "little")
        saved.tensors = json.loads(raw[8:8 + size])
        metadata = saved.tensors.pop("__metadata__")
        saved.text = metadata["mpsx"]
        for name, entry in saved.tensors.items():
            begin, end = entry.pop("data_offsets")
            saved.blobs[name] = raw[8 + size + begin:8 + size + end]
        tamper(saved, *args)
        data = b""
        for name, entry in saved.tensors.items():
            entry.setdefault("data_offsets", [len(data), len(data) + len(saved.blobs[name])])
            data += saved.blobs[name]
        header = json.dumps({"__metadata__": dict(metadata, mpsx=saved.text), **saved.tensors}).encode()
        raw = len(header).to_bytes(8, "little") + header + data
        with open(path, "wb") as file:
            file.write(raw if saved.keep is None else raw[:saved.keep % len(raw)])
        return judged(lambda: mpsx.load(path, dev), saved.text + raw.decode("latin-1"))


def edited(saved, at, change, where=lambda container, key: True):
    \"\"\"The description with change(container, key) applied at the at-th place that where(container, key)
    accepts (at every one where at is None).\"\"\"
    root = [json.loads(saved.text)]
    places, stack = [], [root]
    while stack:
        container = stack.pop()
        for key in list(container) if isinstance(container, dict) else range(len(container)):
            places.append((container, key))
            if isinstance(container[key], (dict, list)):
                stack.append(container[key])
    places = [p for p in places if where(*p)]
    if at is not None:
        places = places[at % len(places):][:1] if places else []
    for container, key in places:
        change(container, key)
    saved.text = json.dumps(root[0])


def tensor_at(saved, at):
    \"\"\"The name of the at-th tensor, or None where there is none.\"\"\"
    names = sorted(saved.tensors)
    return names[at % len(names)] if names else None
"""

# How a checkpoint case tampers: what each helper does, on the description (both forms), the file or a pickle.
TAMPERINGS = {
    "tamper_references": """

def tamper_references(saved, at, copies, reference):
    \"\"\"The at-th list or tensor reference of the description extended by (a list) or replaced by a list
    of `copies` copies of `reference`.\"\"\"
    def change(container, key):
        container[key] = (container[key] if isinstance(container[key], list) else []) + [reference] * copies
    edited(saved, at, change, lambda container, key: isinstance(container[key], list)
           or isinstance(container[key], dict) and "$tensor" in container[key])

""",
    "tamper_value": """

def tamper_value(saved, at, value):
    \"\"\"The at-th scalar of the description made `value`.\"\"\"
    edited(saved, at, lambda container, key: container.__setitem__(key, value),
           lambda container, key: not isinstance(container[key], (dict, list)))

""",
    "tamper_key": """

def tamper_key(saved, at):
    \"\"\"The at-th key of the description's dicts dropped.\"\"\"
    edited(saved, at, lambda container, key: container.pop(key), lambda container, key: isinstance(container, dict))

""",
    "tamper_nesting": """

def tamper_nesting(saved, at, depth, opening, closing):
    \"\"\"The at-th value of the description made `depth` levels of `opening` around 0 and `closing`.\"\"\"
    edited(saved, at, lambda container, key: container.__setitem__(key, "nested here"))
    saved.text = saved.text.replace('"nested here"', opening * depth + "0" + closing * depth, 1)

""",
    "tamper_name": """

def tamper_name(saved, at, kind, name):
    \"\"\"The at-th class name made `name` (kind "class"), or the at-th tensor's name, in the tensors and the
    description ("tensor") or in the description alone ("reference").\"\"\"
    if kind == "class":
        edited(saved, at, lambda container, key: container.__setitem__(key, name),
               lambda container, key: key == "class")
        return
    old = tensor_at(saved, at)
    if kind == "tensor" and old is not None:
        saved.tensors[name] = saved.tensors.pop(old)
        saved.blobs[name] = saved.blobs.pop(old, b"")
    edited(saved, None, lambda container, key: container.__setitem__(key, {"$tensor": name}),
           lambda container, key: container[key] == {"$tensor": old})

""",
    "tamper_header": """

ITEM_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
              "F32": 4, "I32": 4, "U32": 4, "F64": 8, "I64": 8, "U64": 8}


def tamper_header(saved, at, field, value, fitted=False):
    \"\"\"The at-th tensor's `field` in the file's header (dtype, shape or data_offsets) made `value`, or
    value(what it was); where fitted, its bytes cut or zero-padded to its dtype and shape (up to 64 MiB; an
    unknown dtype counts a byte a value).\"\"\"
    name = tensor_at(saved, at)
    if name is None:
        return
    entry = saved.tensors[name]
    begin = sum(len(saved.blobs[n]) for n in list(saved.tensors)[:list(saved.tensors).index(name)])
    old = entry.get(field, [begin, begin + len(saved.blobs[name])])
    entry[field] = value(old) if callable(value) else value
    size = ITEM_SIZES.get(entry["dtype"], 1) * math.prod(entry["shape"]) if fitted else -1
    if 0 <= size <= 1 << 26:
        saved.blobs[name] = saved.blobs[name][:size].ljust(size, b"\\0")

""",
    "tamper_truncate": """

def tamper_truncate(saved, at):
    \"\"\"The file cut to its first `at` bytes, modulo its size.\"\"\"
    saved.keep = at

""",
    "tamper_array": """

def tamper_array(saved, at, change):
    \"\"\"The at-th tensor of a pickle (an array) made change(it).\"\"\"
    name = tensor_at(saved, at)
    if name is not None:
        saved.tensors[name] = change(saved.tensors[name])

""",
}


def prelude(device, body):
    """PRELUDE for code `body` on `device`."""
    parts = [(FUZZ_ERROR, "fuzz_raise" in body or "FuzzError" in body), (GUARDED, "guarded(" in body),
             (CHECKPOINT, "tampered(" in body)] + [(code, f"{name}," in body) for name, code in TAMPERINGS.items()]
    extras = "".join(part for part, used in parts + [(RNG, "rng" in body)] if used)
    return PRELUDE.format(device=device, extras=extras)

# ---------------------------------------------------------------- the catalog


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    kind: object  # an inspect.Parameter kind
    required: bool
    POSITIONAL_ONLY, VAR_POSITIONAL, VAR_KEYWORD = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL,
                                                    inspect.Parameter.VAR_KEYWORD)


@dataclasses.dataclass(frozen=True)
class Member:
    name: str
    kind: str  # "method", "static" or "property"
    params: tuple  # of Param; None where the signature is unknown (then it is called with a few hostile values)


# Members every class has, or that only Python's own machinery calls.
IGNORED_MEMBERS = {"__init__", "__new__", "__init_subclass__", "__subclasshook__", "__class_getitem__", "__dict__",
                   "__weakref__", "__doc__", "__module__"}


def public_names():
    """mpsx's public names: mpsx.__all__, or, where mpsx defines none, its attributes
    not starting with an underscore, less modules."""
    names = getattr(mpsx, "__all__", None)
    if names is None:
        names = [n for n, v in vars(mpsx).items() if not n.startswith("_") and not inspect.ismodule(v)]
    return sorted(names)


def parameters(function, drop_self):
    """The parameters of `function` as Params, or None where it has no signature."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    params = [Param(p.name, p.kind, p.default is inspect.Parameter.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)) for p in signature.parameters.values()]
    return tuple(params[1:] if drop_self and params else params)


def members(cls):
    """The methods and properties mpsx itself defines on cls (enums and exceptions: none)."""
    if issubclass(cls, (enum.Enum, BaseException)):
        return ()
    found = []
    for name in sorted(dir(cls)):
        if name in IGNORED_MEMBERS or (name.startswith("_") and not name.endswith("__")):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("mpsx"):
            continue
        attribute = vars(owner)[name]
        if isinstance(attribute, property) or inspect.isgetsetdescriptor(attribute):
            found.append(Member(name, "property", ()))
        elif isinstance(attribute, staticmethod):
            found.append(Member(name, "static", parameters(getattr(cls, name), drop_self=False)))
        elif callable(attribute):
            found.append(Member(name, "method", parameters(getattr(cls, name), drop_self=True)))
    return tuple(found)


class Catalog:
    """The public classes and functions of mpsx and what the fuzzer calls on them."""

    def __init__(self):
        self.callables = {n: getattr(mpsx, n) for n in public_names() if callable(getattr(mpsx, n))}
        self.classes = {n: c for n, c in self.callables.items() if isinstance(c, type)}
        self.members = {n: members(c) for n, c in self.classes.items()}
        self.enums = {n: c for n, c in self.classes.items() if issubclass(c, enum.Enum)}
        # An enum's constructor: its value (the rest is Python's functional API for new enums).
        self.constructors = {n: (Param("value", inspect.Parameter.POSITIONAL_OR_KEYWORD, True),) if n in self.enums
                             else parameters(c, drop_self=False)
                             for n, c in self.callables.items()}
        self.data_source_bases = sorted(n for n in self.classes if n.endswith("DataSource"))
        # Every class with members needs a factory: without one its members cannot be driven.
        self.drivable = sorted(n for n, m in self.members.items() if m)

    def coverage_problems(self):
        missing = [n for n in self.drivable if n not in FACTORIES]
        stale = sorted(set(FACTORIES) - set(self.classes))
        return ([f"mpsx.{n} has methods or properties but no factory in tests/fuzz_factories.py, so the fuzzer "
                 f"cannot drive it: add one making a valid instance (obj) and valid arguments" for n in missing]
                + [f"tests/fuzz_factories.py has a factory for {n}, which is not a public mpsx class"
                   for n in stale])


# ---------------------------------------------------------------- the child runner


PACKAGE = os.path.dirname(os.path.abspath(mpsx.__file__))


def raised_by_case(error):
    """Whether the case's own code raised error (itself, or through numpy or Python),
    rather than mpsx: the innermost frame of its traceback that is either decides
    (Cython names its frames mpsx._module.function)."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename.startswith("<case "):
            return True
        if frame.name.startswith("mpsx.") or frame.filename.startswith(PACKAGE + os.sep):
            return False
    return False


def unexpected(error):
    """None where `error` is an exception the errors contract allows, or one the
    case's own code raised (a hostile value it made, a callback mpsx passed it
    through); else the kind of finding, what it was and the type of the error.
    A checkpoint case judges its loads itself, by the stricter rule of loading."""
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    error = chain[0]
    name = type(error).__name__
    if name == "CheckpointFinding":
        return tuple(error.args)
    if raised_by_case(error) or any(type(e).__name__ == "FuzzError" for e in chain):
        return None
    if isinstance(error, AttributeError) and re.search(r"not writable|has no setter", str(error)):
        return None  # setting a read-only property
    if isinstance(error, NotImplementedError) and "must implement" in str(error):
        return None  # a data source protocol method the subclass lacks
    if not isinstance(error, (TypeError, ValueError, IndexError, MemoryError, BufferError, mpsx.MPSXError)):
        return "exception", f"{name}: {error}", name
    if not str(error).strip():
        return "message", f"{name} without a message", name
    return None


def describe(value):
    """What the generator needs to know of a valid value, as JSON."""
    kind = type(value)
    if isinstance(value, enum.Enum):
        return {"type": "enum", "enum": kind.__name__, "value": int(value)}
    if kind in (bool, int, float, str, type(None)):
        return {"type": kind.__name__, "value": value if kind is not float else repr(value)}
    if isinstance(value, np.ndarray):
        return {"type": "ndarray", "shape": list(value.shape), "dtype": value.dtype.name}
    if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.ismethod(value):
        return {"type": "function"}
    public = getattr(mpsx, kind.__name__, None) is kind
    found = {"type": f"mpsx.{kind.__name__}" if public else kind.__name__}
    if isinstance(value, (mpsx.Image, mpsx.ImageBatch)):
        found.update(shape=list(value.shape), dtype=value.data_type.name)
    elif isinstance(value, mpsx.Vector):
        found.update(length=value.length, dtype=value.data_type.name)
    elif isinstance(value, mpsx.State):
        found["state"] = True
    elif isinstance(value, (list, tuple)):
        found["items"] = [describe(item) for item in value[:8]]
    if any(k.__module__.startswith("mpsx") and k.__name__.endswith("DataSource") for k in kind.__mro__):
        found["data_source"] = True
    return found


def probe_factory(namespace, case, send, findings):
    """Describes what a factory made: its variables, the properties of obj (read,
    and written back where writable), the members of its Python data sources and
    whether obj saves (mpsx refuses to save some objects: states an encode made)."""
    obj = namespace.get("obj")
    if not isinstance(obj, getattr(mpsx, case["class"])):
        findings.append(dict(kind="factory", what=f"obj is a {type(obj).__name__}, not an mpsx.{case['class']}",
                             phase="setup"))
        return None
    variables = {name: describe(value) for name, value in namespace.items()
                 if not name.startswith("__") and name not in ("FuzzError", "fuzz_raise", "guarded", "rng")
                 and not inspect.ismodule(value) and not isinstance(value, type)}
    properties = {}
    for name in case["properties"]:
        send(phase=f"get {name}")
        try:
            value = getattr(obj, name)
        except BaseException as error:
            found = unexpected(error)
            if found:
                findings.append(dict(kind=found[0], what=found[1], error=found[2], phase=f"get {name}"))
            continue
        send(phase=f"set {name}")
        writable = True
        try:
            setattr(obj, name, value)
        except AttributeError as error:
            writable = unexpected(error) is not None
        except BaseException as error:
            findings.append(dict(kind="roundtrip", phase=f"set {name}",
                                 what=f"obj.{name} = obj.{name} raised {type(error).__name__}: {error}"))
        properties[name] = {"writable": writable, "value": describe(value)}
    bases = tuple(getattr(mpsx, n) for n in case["data_source_bases"])
    sources = {}
    for value in namespace.values():
        if isinstance(value, bases) and type(value) not in bases:
            described = {}
            for name in (n for n in dir(value) if not n.startswith("_")):
                attribute = getattr(value, name)
                described[name] = {"type": "function"}
                if not callable(attribute):
                    described[name] = describe(attribute)
                elif not any(p.required for p in parameters(attribute, drop_self=False) or ()):
                    try:
                        described[name] = describe(attribute())
                    except Exception:
                        pass  # the data source's own member refuses: its description stays "function"
            sources[type(value).__name__] = described
    send(phase="describe obj")
    try:
        saves = bool(mpsx.persistence.reduce(obj))
    except Exception:  # (the protocol cases' pickles judge it)
        saves = False
    return {"variables": variables, "properties": properties, "sources": sources, "saves": saves}


def finish_code(command_buffers, queue_defined):
    """Commits what a case left uncommitted and waits for everything it committed."""
    lines = []
    if command_buffers:
        lines += [f"for c in ({', '.join(command_buffers)},):", "    if c.status == 'not_enqueued':",
                  "        c.commit()", "    c.wait_until_completed()"]
    if queue_defined:
        lines.append("q.wait_until_idle()")
    return "\n".join(lines)


def run_case(case, send, unraisable):
    """Runs one case: setup, action, finish (commit and wait), cleanup; returns its findings.
    Its namespace is module __fuzz__, so that mpsx.load finds its classes, as a script's
    in __main__."""
    module = sys.modules["__fuzz__"] = types.ModuleType("__fuzz__")
    findings, probe, namespace = [], None, vars(module)
    unraisable.clear()

    def execute(phase, code):
        try:
            exec(compile(code, f"<case {case['id']} {phase}>", "exec"), namespace)
        except BaseException as error:
            return error
        return None

    def note(error, phase, context="", code=None):
        found = unexpected(error)
        if found:
            detail = "".join(traceback.format_exception(error)[-12:])
            if len(detail) > 20000:  # an error quoting a hostile value of a megabyte
                detail = f"{detail[:10000]}\n[...]\n{detail[-10000:]}"
            findings.append(dict(kind=found[0], what=context + found[1], error=found[2], phase=phase, detail=detail,
                                 code=code))

    error = execute("setup", case["setup"])
    if error is not None and case["kind"] == "probe":
        findings.append(dict(kind="factory", what=f"it raised {type(error).__name__}: {error}", phase="setup",
                             detail="".join(traceback.format_exception(error)[-12:])))
    elif error is not None:
        note(error, "setup")
    else:
        counts = {n: namespace[n].command_count for n in case["cbs"] if n in namespace}
        send(phase="action")
        error = execute("action", case["action"])
        if error is not None:
            note(error, "action")
            grown = [n for n, count in counts.items() if namespace[n].command_count > count]
            if grown and "\n" not in case["action"].strip():
                findings.append(dict(kind="enqueued", phase="action",
                                     what=f"{type(error).__name__} raised after encoding onto {', '.join(grown)}"))
        elif case.get("must_raise"):
            findings.append(dict(kind="accepted", what=case["must_raise"], phase="action"))
        if case["kind"] == "probe":
            probe = probe_factory(namespace, case, send, findings)
    command_buffers = [n for n in case["cbs"] if isinstance(namespace.get(n), mpsx.CommandBuffer)]
    finish = finish_code(command_buffers, isinstance(namespace.get("q"), mpsx.CommandQueue))
    send(phase="finish", code=finish)
    error = execute("finish", finish)
    if error is not None:
        note(error, "finish", code=finish)
    for name in command_buffers:
        if namespace[name].status == "error":
            note(namespace[name].error, "finish", f"{name}.error is ", code=finish)
    send(phase="cleanup", code=finish)
    namespace.clear()
    gc.collect()
    for error in list(unraisable):
        note(error, "callback", "raised in a callback: ", code=finish)
    return {"findings": findings, "probe": probe}


def child_main(cases_path, fd):
    """The child process: runs the cases of a file, reporting on file descriptor fd."""
    cases = json.loads(Path(cases_path).read_text())
    # So that a huge host allocation (a case's own numpy arrays included)
    # fails at once. AddressSanitizer reserves terabytes of address space and
    # limits allocations itself; GPU drivers reserve more address space than
    # the limit too, though not as data.
    if not ASAN:
        limit = resource.RLIMIT_AS if all(case["device"] == "cpu" for case in cases) else resource.RLIMIT_DATA
        resource.setrlimit(limit, (MEMORY_LIMIT, MEMORY_LIMIT))
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks for the stacks of a hang
    channel = os.fdopen(fd, "w", buffering=1)

    def send(**message):
        channel.write(json.dumps(message) + "\n")

    unraisable = []
    sys.unraisablehook = lambda hook: unraisable.append(hook.exc_value or hook.exc_type())
    try:
        for case in cases:
            send(start=case["id"])
            print(f"\n=== fuzz case {case['id']}", file=sys.stderr, flush=True)
            result = run_case(case, send, unraisable)
            send(done=case["id"], **result)
    except BaseException:
        send(harness_error=traceback.format_exc())
        raise SystemExit(70)


# ---------------------------------------------------------------- the parent loop


class HarnessError(Exception):
    """The fuzzer itself failed (not a finding)."""


def child_environment():
    """The parent's environment, with its import path (so that the child imports the
    same mpsx), one thread per library and, under AddressSanitizer, an allocation limit."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(mpsx.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [os.path.abspath(p) for p in sys.path if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if ASAN:
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "allocator_may_return_null=1",
                                                     "max_allocation_size_mb=4096"]))
    return env


def stderr_tail(text, case_id, lines=40):
    """What the child wrote to stderr while running case_id (faulthandler's stacks, sanitizer reports)."""
    marker = f"\n=== fuzz case {case_id}\n"
    start = text.rfind(marker)
    return "\n".join((text[start + len(marker):] if start >= 0 else text).splitlines()[-lines:])


def run_child(cases, workdir, timeout):
    """Runs cases in one child process until they are done or one crashes or hangs.
    Returns {id: outcome} of the cases it finished, and (id, finding) of one that
    crashed or hung, or None."""
    token = f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    cases_path, stderr_path = Path(workdir) / f"cases-{token}.json", Path(workdir) / f"stderr-{token}.txt"
    cases_path.write_text(json.dumps(cases))
    read_end, write_end = os.pipe()
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(cases_path),
                                    "--fd", str(write_end)], cwd=workdir, env=child_environment(),
                                   stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, pass_fds=(write_end,),
                                   start_new_session=True)
    os.close(write_end)
    messages = queue.Queue()

    def read():
        with os.fdopen(read_end) as stream:
            for line in stream:
                messages.put(json.loads(line))
        messages.put(None)

    threading.Thread(target=read, daemon=True).start()
    outcomes, current, phase, code, failure = {}, None, "start", None, None
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        try:
            message = messages.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            process.send_signal(signal.SIGUSR1)  # faulthandler dumps every thread's stack
            time.sleep(1)
            os.killpg(process.pid, signal.SIGKILL)
            failure = dict(kind="hang", what=f"no progress in {timeout:g} s", phase=phase, code=code)
            break
        if message is None:
            break
        if "harness_error" in message:
            os.killpg(process.pid, signal.SIGKILL)
            raise HarnessError(message["harness_error"])
        if "start" in message:
            current, phase, code, deadline = message["start"], "setup", None, time.monotonic() + timeout
        elif "phase" in message:
            phase, code = message["phase"], message.get("code", code)
        elif "done" in message:
            outcomes[message["done"]] = {"findings": message["findings"], "probe": message["probe"]}
            current, phase, deadline = None, "exit", time.monotonic() + timeout
    returncode = process.wait()
    text = stderr_path.read_text(errors="replace")
    cases_path.unlink()
    stderr_path.unlink()
    if failure is None and returncode != 0:
        what = f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit status {returncode}"
        failure = dict(kind="crash", what=what, phase=phase, code=code)
    if failure is None:
        return outcomes, None
    if current is None and not outcomes:
        raise HarnessError(f"a fuzz child failed before its first case ({failure['what']}):\n{text[-3000:]}")
    if current is None:  # after its last case: pinned on that one
        current = list(outcomes)[-1]
    failure["detail"] = stderr_tail(text, current)
    sanitizer = re.search(r"ERROR: (AddressSanitizer: [\w-]+)|runtime error: ([^\n]*)", failure["detail"])
    if sanitizer and failure["kind"] == "crash":  # a sanitizer's report, then its exit status
        failure["what"] = sanitizer.group(1) or f"UndefinedBehaviorSanitizer: {sanitizer.group(2).split(' of type')[0]}"
    return outcomes, (current, failure)


def shard_key(case):
    return zlib.crc32(case["key"].encode())


def run_cases(cases, workdir, timeout=TIMEOUT, jobs=None, progress=None, budget=None, deadline=None):
    """Runs cases in `jobs` child processes at a time (default: one more than the cores,
    as hangs and child start-ups leave a core idle); returns {id: outcome}. The cases
    of one target run in one worker in id order, and once one of them crashed or hung
    the target's later cases are skipped (outcome None): each crash costs a new child.
    Once crashes and hangs cost more than `budget` restarts (a hang costs its timeout),
    the cases not started yet are left out (no outcome), as they are once time.monotonic()
    passed `deadline`."""
    jobs = jobs or min(len(os.sched_getaffinity(0)), 8) + 1
    shards = [[] for _ in range(jobs)]
    for case in cases:
        shards[shard_key(case) % jobs].append(case)
    outcomes, errors, lock, spent = {}, [], threading.Lock(), [0.0]

    def run_shard(shard):
        failed, pending = set(), list(shard)
        try:
            while pending and (budget is None or spent[0] <= budget) and (deadline is None
                                                                           or time.monotonic() < deadline):
                batch = []
                while pending and len(batch) < BATCH:
                    case = pending.pop(0)
                    if case["key"] in failed:
                        outcomes[case["id"]] = None
                    else:
                        batch.append(case)
                if not batch:
                    break
                finished, failure = run_child(batch, workdir, timeout)
                outcomes.update(finished)
                if failure is not None:
                    case_id, finding = failure
                    index = [c["id"] for c in batch].index(case_id)
                    failed.add(batch[index]["key"])
                    outcomes.setdefault(case_id, {"findings": [], "probe": None})["findings"].append(finding)
                    pending = batch[index + 1:] + pending
                    with lock:
                        spent[0] += 1 if finding["kind"] == "crash" else timeout / RESTART_SECONDS
                if progress:
                    with lock:
                        progress(len(outcomes), len(cases))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run_shard, args=(shard,)) for shard in shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return outcomes


# ---------------------------------------------------------------- the generator

INT_EXTREMES = ["-1", "0", "2**31", "2**32 + 1", "2**62", "2**63", "-2**63", "-2**63 - 1", "2**64", "10**30"]
NOT_INTS = ["1.5", "-0.5", "float('nan')", "float('inf')", "np.float32(2.5)", "'3'"]
FLOATS = ["float('nan')", "float('inf')", "-float('inf')", "0.0", "-1.0", "1e39", "-1e39", "1e-46", "2**63",
          "2**1000", "1j", "None"]
STRINGS = ["''", "'\\x00'", "'\\ud800'", "'x' * 100000", "3", "None", "b'cpu'", "'cuda:99'"]
BOOLS = ["2", "-1", "None", "'False'", "0.5", "np.bool_(True)", "[]", "np.array([True, False])"]
CALLABLES = ["lambda: None", "lambda a, b, c: None", "fuzz_raise", "3", "type",
             "lambda command_buffer: command_buffer.commit()",
             "lambda command_buffer: command_buffer.wait_until_completed()"]
LITERALS = ["None", "True", "0", "-1", "2**31", "2**63", "-2**63", "1.5", "float('nan')", "''", "'cpu'", "b'\\x00'",
            "[]", "()", "{}", "[None]", "(1, 2, 3, 4, 5, 6, 7)", "object()", "lambda *args, **kwargs: None",
            "fuzz_raise", "mpsx", "range(3)", "...", "np.float32(1.5)", "np.array(3)", "np.array([], np.float32)",
            "np.zeros(7)", "np.zeros((2, 3), np.int64)", "np.zeros(4, np.complex64)", "np.array([None, 1])",
            "np.zeros(4, [('a', 'f4')])", "np.zeros((1, 1, 1, 1, 1), np.float32)"]
DTYPES = ["float32", "float16", "uint8", "float64", "int32", "int64", "bool", "complex64"]
IMAGE_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "UINT8": "uint8"}

# Generic things to do with an object: name -> statement.
PROTOCOL = {"repr": "repr(obj)", "str": "str(obj)", "hash": "hash(obj)", "eq": "obj == obj", "ne": "obj != 3",
            "bool": "bool(obj)", "pickle": "pickle.loads(pickle.dumps(obj))", "copy": "copy.copy(obj)",
            "deepcopy": "copy.deepcopy(obj)", "asarray": "np.asarray(obj)", "memoryview": "memoryview(obj)",
            "len": "len(obj)", "iter": "list(iter(obj))", "dir": "dir(obj)", "with": "with obj:\n    pass",
            "weakref": "weakref.ref(obj)"}

# What a completed handler does: name -> body (its argument is command_buffer).
HANDLERS = {
    "commit another on the queue": "other = q.command_buffer()\nother.commit()\nother.wait_until_completed()",
    "commit another on a new queue": "other = dev.new_command_queue().command_buffer()\nother.commit()\n"
                                     "other.wait_until_completed()",
    "wait for itself": "command_buffer.wait_until_completed()",
    "commit itself": "command_buffer.commit()",
    "wait for the queue": "q.wait_until_idle()",
    "add a handler": "command_buffer.add_completed_handler(lambda command_buffer: None)",
    "read its state": "command_buffer.status, command_buffer.error, command_buffer.command_count, "
                      "repr(command_buffer)",
    "replay itself": "command_buffer.replay()",
    "raise": "fuzz_raise()",
    "encode on it": None,  # a valid call of a random class's method, on the completed command buffer
    "encode on a new one": None,  # the same on a new command buffer of the queue, committed
}

# Checkpoint mutations: name -> (the helper in TAMPERINGS that makes it, its variants: the helper's arguments
# after the place, and what it tampers with: the "file", a "pickle"'s arguments or "both" in turn).
MUTATIONS = {
    "references": ("tamper_references", [f"{n}, {r}" for n in (1000, 100000) for r in ("{'$tensor': '0'}",
                                                                                       "{'$ref': 1}")], "both"),
    "dtypes": ("tamper_header", [f"'dtype', {d!r}, {f}" for d in ("BF16", "F8_E4M3", "F8_E5M2", "I64", "BOOL", "U8",
                                                                   "F64", "F16", "I32", "X9", "")
                                 for f in (True, False)], "file"),
    "sizes": ("tamper_header", [f"'shape', {s}, {f}" for s in ("[0, 2**62]", "[2**31, 2**31]", "[-1]", "[]", "[2**64]",
                                                               "lambda shape: [n + 1 for n in shape]",
                                                               "lambda shape: shape[::-1]",
                                                               "lambda shape: [math.prod(shape)]",
                                                               "lambda shape: shape + [1]", "lambda shape: [0] + shape")
                                for f in (True, False)]
              + [f"'data_offsets', lambda o: {o}" for o in ("[o[0] + 2**20, o[1] + 2**20]", "[o[0], o[1] + 2**20]",
                                                            "[0, o[1] - o[0]]", "[o[1], o[0]]", "[o[0], 2**64 - 1]",
                                                            "[o[0], 2**70]", "[-1, o[1]]", "[o[0] + 1, o[1] + 1]",
                                                            "[o[0], o[0]]", "[o[0]]", "None")], "file"),
    "names": ("tamper_name", [f"'class', {n}" for n in ("'x' * 1000000", "'mpsx.' + 'x' * 1000000",
                                                        "'builtins:' + 'x' * 1000000", "'mpsx.NoSuchClass'",
                                                        "'mpsx.Device'", "'mpsx.Image'", "'mpsx.CNNConvolution'",
                                                        "'mpsx.MPSXError'", "'mpsx.persistence'", "'builtins:object'",
                                                        "'os:system'", "'mpsx.persistence:_Restorer'", "''", "None")]
              + [f"{k!r}, {n}" for k in ("tensor", "reference")
                 for n in ("'x' * 1000000", "''", "'__metadata__'", "'\\ud800'", "'1'")], "both"),
    "nesting": ("tamper_nesting", [f"{d}, {o!r}, {c!r}" for d in (200, 100000)
                                   for o, c in (("[", "]"), ('{"$tuple": [', "]}"), ('{"$dict": {"a": ', "}}"))],
                "both"),
    "values": ("tamper_value", ["-1", "2**70", "-2**70", "1e308", "float('nan')", "float('inf')", "'x'",
                                "'x' * 1000000", "None", "True", "[]", "{}"], "both"),
    "keys": ("tamper_key", [""], "both"),
    "truncation": ("tamper_truncate", [""], "file"),
    "arrays": ("tamper_array", [f"lambda a: {e}" for e in (
        "a.astype(np.float64)", "a.astype(np.int64)", "a.astype(bool)", "a.astype(np.uint8)", "a.astype(np.float16)",
        "a.astype(np.complex64)", "a.astype(object)", "a.astype('>f4')", "a.reshape(-1)", "a.reshape(-1)[:-1]",
        "a[..., None]", "a[::-1]", "a.T", "np.broadcast_to(a.reshape(-1)[:1], (2**30, 2**30))",
        "np.zeros((), a.dtype)", "a.tolist()", "None", "'x' * 1000000")], "pickle"),
}

# The parameters an alias case gives one of the call's sources.
DESTINATIONS = ("destination_image", "destination_images", "destination_gradient", "destination_gradients")

# Kinds of case and their share of the cases.
KINDS = {"call": 31, "construct": 12, "set": 11, "data_source": 9, "sizes": 8, "sequence": 8, "bare": 6,
         "checkpoint": 5, "alias": 4, "protocol": 3, "handler": 3}

# Data source members become one of these.
FORMS = ["returns", "is", "raises", "arity", "deleted"]


@dataclasses.dataclass
class DataSourceClass:
    name: str  # of the class in the factory
    end: int  # its last line in the factory
    own: list  # the members its body defines
    members: list  # and those it inherits from the public class


def indent(code, prefix="    "):
    return textwrap.indent(code.strip("\n"), prefix)


def fixed_names(params):
    """The names of the parameters a call may pass by name or position; [None] for none."""
    names = [p.name for p in params or () if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return names or [None]


class Generator:
    """Case N of a seed: a deterministic function of (seed, N), the catalog and the probes.

    The kinds of case follow a fixed pattern; within a kind, the cases go round
    its targets (a method's parameter, a property, a data source member, ...),
    and each visit of a target takes the next of its hostile variants, so that
    a long run tries every variant of every target."""

    def __init__(self, catalog, probes, device, devices, seed, only=None):
        self.catalog, self.probes, self.device, self.seed = catalog, probes, device, seed
        self.other_devices = [d for d in devices if d != device]
        self.factory_ids = sorted(probes)
        self.factories = {c: [f for f in self.factory_ids if f.split("#")[0] == c] for c in catalog.drivable}
        self.factories = {c: f for c, f in self.factories.items() if f}
        # Abstract classes are made through a concrete one's factory: its targets cover them.
        concrete = [c for c, fs in self.factories.items()
                    if any(probes[f]["variables"]["obj"]["type"] == f"mpsx.{c}" for f in fs)]
        self.bareable = [c for c in catalog.drivable if not hasattr(catalog.classes[c], "_fields")]
        chosen = set(only or catalog.callables)
        made = [f for c in concrete if c in chosen for f in self.factories[c]]
        # Methods no factory has valid arguments for: only ever called with hostile ones.
        self.undriven = sorted(f"{c}.{m.name}" for c in concrete for m in self.methods(c)
                               if all(valid_arguments(m.params, probes[f]["variables"]) is None
                                      for f in self.factories[c]))
        self.targets = {
            "call": [(f, m.name, p) for f in made for m in self.methods(self.cls(f)) for p in fixed_names(m.params)],
            "construct": [(n, p) for n in sorted(chosen & set(catalog.callables))
                          for p in fixed_names(catalog.constructors[n])],
            "set": [(f, p) for f in made for p, d in probes[f]["properties"].items() if d["writable"]],
            "data_source": [(f, s.name, m) for f in self.factory_ids if self.cls(f) in chosen
                            for s in self.data_sources(f) for m in s.members],
            "sizes": [(f, n) for f in made for n in sorted(set(self.sizes(f)))],
            "sequence": made,
            "protocol": [(f, name) for f in made for name in PROTOCOL],
            "bare": [(c, m) for c in self.bareable if c in chosen
                     for m in [m.name for m in catalog.members[c]] + list(PROTOCOL)],
            "handler": list(HANDLERS) if "CommandBuffer" in chosen else [],
            "checkpoint": [(f, m) for f in made if probes[f]["saves"] for m in MUTATIONS],
            "alias": [(f, *a) for f in made for a in self.aliases(f)],
        }
        for kind, targets in self.targets.items():
            random.Random(f"{seed}/{kind}").shuffle(targets)
        self.weights = {k: w for k, w in KINDS.items() if self.targets[k]}
        self.pattern = [k for k, w in self.weights.items() for _ in range(w)]
        random.Random(seed).shuffle(self.pattern)

    # ---- what the catalog and the probes say

    @staticmethod
    def cls(factory):
        return factory.split("#")[0]

    @staticmethod
    def code(factory):
        return FACTORIES[Generator.cls(factory)][int(factory.split("#")[1])]

    def methods(self, cls):
        return [m for m in self.catalog.members[cls] if m.kind != "property"]

    def member(self, cls, name):
        return next(m for m in self.catalog.members[cls] if m.name == name)

    def data_sources(self, factory):
        """The Python data source classes the factory's code defines."""
        found = []
        for node in ast.parse(self.code(factory)).body:
            bases = [b.attr for b in node.bases if isinstance(b, ast.Attribute)
                     and b.attr in self.catalog.data_source_bases] if isinstance(node, ast.ClassDef) else []
            if bases:
                own = {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets
                       if isinstance(t, ast.Name)} | {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                inherited = {n for n in vars(self.catalog.classes[bases[0]]) if not n.startswith("_")}
                found.append(DataSourceClass(node.name, node.end_lineno, sorted(own), sorted(own | inherited)))
        return found

    def aliases(self, factory):
        """(method, destination, variant) of each encode of the factory's class that takes a
        destination and has valid arguments otherwise; a variant gives it a source ("source"),
        an image over its memory ("memory") or, for a batch, a batch one image off it
        ("shifted", +1 or -1)."""
        variables = self.probes[factory]["variables"]
        found = []
        for member in self.methods(self.cls(factory)):
            names = fixed_names(member.params)
            for destination in (n for n in names if n in DESTINATIONS):
                others = [p for p in member.params if p.name != destination]
                if "command_buffer" not in names or valid_arguments(others, variables) is None:
                    continue
                sources = [n for n in names if variables.get(n, {}).get("type") in ("mpsx.Image", "mpsx.ImageBatch")
                           and n != destination]
                found += [(member.name, destination, (form, s)) for s in sources for form in ("source", "memory")]
                found += [(member.name, destination, ("shifted", s, shift)) for s in sources for shift in (1, -1)
                          if variables[s]["type"] == "mpsx.ImageBatch"]
        return found

    def sizes(self, factory):
        """The int literals of the factory's code: {text: [(row, column) of each]}."""
        found = collections.defaultdict(list)
        for token in tokenize.generate_tokens(io.StringIO(self.code(factory)).readline):
            if token.type == tokenize.NUMBER and token.string.isdigit():
                found[token.string].append(token.start)
        return found

    # ---- cases

    def case(self, index):
        """Case `index`: its kind from the pattern, its target the next of the kind's
        targets, its variant (pick) the next for that target."""
        period = len(self.pattern)
        kind = self.pattern[index % period]
        ordinal = index // period * self.weights[kind] + self.pattern[:index % period].count(kind)
        targets = self.targets[kind]
        target = targets[ordinal % len(targets)]
        pick = ordinal // len(targets) + zlib.crc32(repr(target).encode())
        case = Case(self, random.Random(f"{self.seed}/{index}"), index, kind)
        return getattr(self, "case_" + kind)(case, target, pick).finished()

    def case_call(self, case, target, pick):
        """A method called with the target parameter (and maybe one more) hostile."""
        factory, name, param = target
        cls = self.cls(factory)
        case.use(factory)
        member = self.member(cls, name)
        arguments, hostile, reason = case.arguments(member.params, cls, param, pick)
        call = f"mpsx.{cls}" if member.kind == "static" else "obj"
        return case.done(f"{call}.{name}({arguments})", f"call {cls}.{name}({','.join(hostile)})", reason)

    def case_construct(self, case, target, pick):
        """A constructor (or public function) called with the target parameter hostile."""
        name, param = target
        case.use(case.rng.choice(self.factories[name]) if name in self.factories else None)
        arguments, hostile, reason = case.arguments(self.catalog.constructors[name], name, param, pick)
        return case.done(f"mpsx.{name}({arguments})", f"construct {name}({','.join(hostile)})", reason)

    def case_set(self, case, target, pick):
        """A property set to a hostile value, then maybe a valid call (does the encode check it?)."""
        factory, name = target
        cls = self.cls(factory)
        case.use(factory)
        value, reason = case.hostile(self.probes[factory]["properties"][name]["value"], f"obj.{name}", cls, pick=pick)
        action = f"obj.{name} = {value}"
        follow = case.valid_call(cls)
        if reason is None and follow and case.rng.random() < 0.6:
            action += "\n" + follow  # does the encode check what the setter took?
        return case.done(action, f"set {cls}.{name}", reason)

    def case_data_source(self, case, target, pick):
        """A Python data source member that returns a hostile value, is one, raises, takes no
        arguments or is deleted; then the factory (which uses the data source) and a valid call."""
        factory, name, member = target
        case.use(factory)
        source = next(s for s in self.data_sources(factory) if s.name == name)
        forms = FORMS if member in source.own else FORMS[:-1]
        form = forms[pick % len(forms)]
        described = self.probes[factory]["sources"].get(name, {}).get(member)
        value = None
        if form in ("returns", "is"):
            desc = described if described and described["type"] != "function" else None
            value = case.hostile(desc if form == "returns" else described, variables=False, pick=pick // len(forms))[0]
        mutation = {"returns": f"{name}.{member} = lambda self, *args, **kwargs: {value}",
                    "is": f"{name}.{member} = {value}", "raises": f"{name}.{member} = fuzz_raise",
                    "arity": f"{name}.{member} = lambda: None", "deleted": f"del {name}.{member}"}[form]
        case.mutate(source.end, mutation)
        action = case.valid_call(self.cls(factory)) if case.rng.random() < 0.7 else None
        return case.done(action or "pass", f"data source {name}.{member} {form}")

    def case_sizes(self, case, target, pick):
        """The factory with every literal `size` replaced by a hostile int (consistent
        hostile sizes: every vector 2**62 long, every image 2**31 wide, ...), then a valid call."""
        factory, size = target
        case.use(factory)
        options = sorted({str(int(size) - 1), str(int(size) + 1), str(2 * int(size))} | set(INT_EXTREMES))
        value = options[pick % len(options)]
        lines = case.factory_code.split("\n")
        for row, column in sorted(self.sizes(factory)[size], reverse=True):
            line = lines[row - 1]
            lines[row - 1] = f"{line[:column]}({value}){line[column + len(size):]}"
        case.factory_code = "\n".join(lines)
        action = case.valid_call(self.cls(factory), encoding=True, pick=pick // len(options))
        return case.done(action or "pass", f"sizes {factory} {size}")

    def case_checkpoint(self, case, target, pick):
        """A valid object saved (or, for half the picks, reduced as pickle does), tampered with,
        then loaded (unpickled) by tampered(), which holds it to the rule of loading: whatever
        fails is an mpsx.MPSXError quoting little of the file. What loads may get a valid call."""
        factory, mutation = target
        helper, variants, where = MUTATIONS[mutation]
        case.use(factory)
        forms = [False, True] if where == "both" else [where == "pickle"]
        pickled = forms[pick // len(variants) % len(forms)]
        variant = variants[pick % len(variants)]
        action = f"tampered({', '.join(filter(None, ['obj', helper, str(case.rng.randrange(10**6)), variant]))}" \
                 f"{', pickled=True' * pickled})"
        follow = case.valid_call(self.cls(factory))
        if follow and case.rng.random() < 0.5:
            action = f"obj = {action}\n{follow}"
        return case.done(action, f"checkpoint {factory} {mutation}{' pickled' * pickled}")

    def case_alias(self, case, target, pick):
        """A valid encode whose destination is one of its sources, an image over a source's
        memory (DLPack) or a batch view one image off a source batch; the finish commits it."""
        factory, name, destination, (form, source, *shift) = target
        cls = self.cls(factory)
        case.use(factory)
        desc = case.variables[source]
        given = {destination: source}
        if form == "memory":
            given[destination] = f"mpsx.{desc['type'][5:]}.from_dlpack(dev, {source})"
        elif form == "shifted":
            n, c, h, w = desc["shape"]
            batch = case.let("batch", f"mpsx.ImageBatch.from_numpy(dev, rng.standard_normal(({n + 1}, {c}, {h}, {w}))"
                                      f".astype(np.{IMAGE_DTYPES.get(desc['dtype'], 'float32')}))")
            views = [f"{batch}[:{n}]", f"{batch}[1:]"]
            given = {source: views[shift[0] < 0], destination: views[shift[0] > 0]}
        arguments = valid_arguments(self.member(cls, name).params, case.variables, given)
        return case.done(f"obj.{name}({arguments})", f"alias {cls}.{name} {destination}: {form} {source}")

    def case_sequence(self, case, factory, pick):
        """A few valid or hostile calls, commits, new command buffers and reads, in a row."""
        cls = self.cls(factory)
        case.use(factory)
        steps, names = [], []
        for _ in range(case.rng.randint(2, 4)):
            step = case.rng.choice(["call", "call", "hostile call", "commit", "renew", "get", "protocol"])
            properties = [m.name for m in self.catalog.members[cls] if m.kind == "property"]
            if step == "call" and case.valid_call(cls):
                code = case.valid_call(cls)
            elif step == "hostile call" and self.methods(cls):
                member = case.rng.choice(self.methods(cls))
                call = f"mpsx.{cls}" if member.kind == "static" else "obj"
                code = f"{call}.{member.name}({case.arguments(member.params, cls)[0]})"
            elif step == "commit":
                code = "cb.commit()\ncb.wait_until_completed()"
            elif step == "renew":
                code = "cb = command_buffer = q.command_buffer()"
            elif step == "get" and properties:
                code = f"obj.{case.rng.choice(properties)}"
            else:
                step, code = "protocol", case.rng.choice(list(PROTOCOL.values()))
            steps.append(code)
            names.append(code.split("(")[0] if step in ("call", "hostile call") else step)
        return case.done("\n".join(steps), f"sequence {cls}: {'; '.join(names)}")

    def case_protocol(self, case, target, pick):
        """repr, hash, pickle, copy, len, iter, with, ... of a valid object."""
        factory, name = target
        case.use(factory)
        return case.done(PROTOCOL[name], f"protocol {self.cls(factory)} {name}")

    def case_bare(self, case, target, pick):
        """A member or protocol action of an object made by cls.__new__(cls), without __init__."""
        cls, name = target
        member = next((m for m in self.catalog.members[cls] if m.name == name), None)
        if member is None:
            action = PROTOCOL[name]
        elif member.kind == "property":
            writable = any(self.probes[f]["properties"].get(name, {}).get("writable")
                           for f in self.factories.get(cls, []))
            action = f"obj.{name} = {case.plausible(cls, name)}" if writable and pick % 2 else f"obj.{name}"
        else:
            if member.params and cls in self.factories:
                case.use(case.rng.choice(self.factories[cls]))  # valid arguments for the member
            arguments = case.valid_arguments(member.params)
            action = f"obj.{name}({arguments if arguments is not None else case.arguments(member.params, cls)[0]})"
        case.lines.append(f"obj = mpsx.{cls}.__new__(mpsx.{cls})")
        return case.done(action, f"bare {cls}", member=name)

    def case_handler(self, case, name, pick):
        """A completed handler that calls back into the runtime."""
        body = HANDLERS[name]
        if body is None:
            factories = [f for fs in self.factories.values() for f in fs]
            case.use(factories[pick % len(factories)])
            body = case.valid_call(self.cls(case.factory)) or "pass"
            if name == "encode on a new one":
                body = f"command_buffer = q.command_buffer()\n{body}\ncommand_buffer.commit()"
        action = (f"def handler(command_buffer):\n{indent(body)}\n\n\ncb.add_completed_handler(handler)\n"
                  f"cb.commit()\ncb.wait_until_completed()")
        return case.done(action, f"handler {name}")


class Case:
    """One case under construction: its factory, the lines making its hostile values
    and the command buffers its finish commits and waits for."""

    def __init__(self, generator, rng, index, kind):
        self.g, self.rng, self.index, self.kind = generator, rng, index, kind
        self.factory, self.variables, self.factory_code = None, {}, ""
        self.lines, self.cbs, self.defined, self.count = [], ["cb"], set(), 0
        self.action = self.key = self.reason = self.member = None
        self.uses_bare = False

    def use(self, factory):
        self.factory = factory
        if factory is not None:
            self.variables = self.g.probes[factory]["variables"]
            self.factory_code = Generator.code(factory)

    def mutate(self, line, code):
        """Inserts code after the factory's line `line` (the end of a data source class),
        with the lines making its hostile values."""
        lines = self.factory_code.split("\n")
        self.factory_code = "\n".join(lines[:line] + [""] + self.lines + [code] + lines[line:])
        self.lines = []

    def done(self, action, key, reason=None, member=None):
        """The case's action and key: what the parent counts as one target (once a case of
        a target crashed or hung, its later cases are skipped). Objects made by __new__
        crash wherever mpsx reads them (repr, hash, attributes): a case passing one is a
        target of its own."""
        self.action, self.reason, self.member = action, reason, member
        self.key = key + (" [__new__]" if self.uses_bare else "")
        return self

    def finished(self):
        body = self.factory_code.rstrip("\n") + "\n" + "\n".join(self.lines)
        setup = prelude(self.g.device, body + self.action) + body
        return dict(id=str(self.index), kind=self.kind, key=self.key, member=self.member, device=self.g.device,
                    setup=setup.rstrip("\n") + "\n", action=self.action, cbs=self.cbs, must_raise=self.reason)

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def let(self, stem, expression):
        name = self.name(stem)
        self.lines.append(f"{name} = {expression}")
        return name

    # ---- arguments

    def valid_arguments(self, params):
        return valid_arguments(params, self.variables)

    def valid_call(self, cls, encoding=False, pick=None):
        """A call of one of cls's methods with valid arguments (one taking a command
        buffer, where there is one, if encoding), the pick-th or a random one; or None."""
        calls = []
        for member in self.g.methods(cls):
            arguments = self.valid_arguments(member.params)
            if arguments is not None:
                call = f"mpsx.{cls}" if member.kind == "static" else "obj"
                calls.append((member, f"{call}.{member.name}({arguments})"))
        if encoding and any(p.name == "command_buffer" for m, _ in calls for p in m.params or ()):
            calls = [(m, c) for m, c in calls if any(p.name == "command_buffer" for p in m.params or ())]
        if not calls:
            return None
        return (calls[pick % len(calls)] if pick is not None else self.rng.choice(calls))[1]

    def arguments(self, params, cls, focus=None, pick=None):
        """Arguments with `focus` (a parameter name; a random one if None) made hostile
        with variant `pick`, sometimes one more, and any required one the factory has
        no value for: (code, names of the hostile ones, why the call must raise or None)."""
        fixed = [p for p in params or () if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if params is None or (not fixed and any(p.kind == p.VAR_POSITIONAL for p in params)):
            values = [self.hostile(None, pick=pick)[0]] + [self.hostile(None)[0]] * self.rng.randint(0, 1)
            return ", ".join(values), ["*"], None
        if focus is None and fixed:
            focus = self.rng.choice(fixed).name
        hostile = {p.name for p in fixed if p.name == focus or (p.required and p.name not in self.variables)}
        if fixed and self.rng.random() < 0.2:
            hostile.add(self.rng.choice(fixed).name)
        positional, keywords, reasons = [], [], []
        for p in fixed:
            if p.name in hostile:
                valid = p.name if p.name in self.variables else None
                value, reason = self.hostile(self.variables.get(p.name), valid, cls,
                                             pick=pick if p.name == focus else None)
                reasons += [f"{p.name}={value}: {reason}"] if reason else []
            elif p.name in self.variables:
                value = p.name
            elif p.kind == p.POSITIONAL_ONLY:
                break  # a later positional-only parameter cannot be passed without this one
            else:
                continue
            if p.kind == p.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords.append(f"{p.name}={value}")
        names = [p.name for p in fixed if p.name in hostile]
        return ", ".join(positional + keywords), names, "; ".join(reasons) or None

    # ---- hostile values

    def hostile(self, desc, valid=None, cls=None, variables=True, pick=None):
        """A hostile value for an argument or property whose valid value (the expression
        `valid`) desc describes: variant `pick` (random if None) of the values fitted to
        desc, another variable of the factory (unless variables=False, where they are not
        made yet), one another factory makes, an object made by __new__ or a literal.
        Returns (expression, why the call must refuse it or None)."""
        options = self.fitted(desc, valid, cls) if desc else []
        if variables and [v for v in self.variables if v != valid]:
            options.append(lambda: (self.rng.choice([v for v in self.variables if v != valid]), None))
        options += [lambda: (self.from_other_factory(desc, valid), None), lambda: (self.bare(), None),
                    lambda: (self.rng.choice(LITERALS + self.enum_members()), None)]
        value, reason = (options[pick % len(options)] if pick is not None else self.rng.choice(options))()
        return (value if len(value) <= 40 else self.let("bad", value)), reason

    def fitted(self, desc, valid, cls):
        """Hostile values made from what the valid one is: thunks returning (expression, reason)."""
        kind = desc["type"]
        if kind == "int":
            return self.hostile_ints(desc["value"], cls)
        if kind == "float":
            return plain(*FLOATS) + [lambda: ("'0.5'", "'0.5' was accepted where a number is expected")]
        if kind in ("bool", "str", "function"):
            return plain(*{"bool": BOOLS, "str": STRINGS, "function": CALLABLES}[kind])
        if kind == "enum":
            return self.hostile_enums(desc)
        if kind == "ndarray":
            return self.hostile_arrays(tuple(desc["shape"]), desc["dtype"])
        if kind in ("mpsx.Image", "mpsx.ImageBatch"):
            return self.hostile_images(kind.split(".")[1], tuple(desc["shape"]), desc["dtype"], valid)
        if kind == "mpsx.Vector":
            return self.hostile_vectors(desc["length"], valid)
        if kind == "mpsx.CommandBuffer":
            return [lambda choice=c: (self.hostile_command_buffer(choice), None) for c in
                    ["committed", "completed", "with", "other queue", "replayable", "queue", "device"]
                    + ["other device"] * bool(self.g.other_devices)]
        if kind == "mpsx.Device":
            return plain("dev.name", "'cpu'", "None") + ([lambda: (self.other_device(), None)]
                                                         if self.g.other_devices else [])
        if "items" in desc:
            return self.hostile_items(desc, valid, cls)
        if desc.get("state"):
            return self.hostile_states(valid)
        return []

    def enum_members(self):
        return [f"mpsx.{e}.{m.name}" for e, c in self.g.catalog.enums.items() for m in c]

    def hostile_ints(self, value, cls):
        options = plain(str(value - 1), str(value + 1), str(-value), f"{value} * 2**31", repr(float(value)), "True",
                        f"np.int64({value})", *INT_EXTREMES)
        if not hasattr(self.g.catalog.classes.get(cls), "_fields"):
            # (namedtuples, Offset and Region, hold what they are given: what takes them checks it)
            options += [lambda bad=bad: (bad, f"{bad} was accepted where an int (like {value}) is expected")
                        for bad in NOT_INTS + [repr(value + 0.5)]]
        return options

    def hostile_enums(self, desc):
        members = list(self.g.catalog.enums[desc["enum"]])
        others = [m for m in self.enum_members() if not m.startswith(f"mpsx.{desc['enum']}.")]
        return plain(str(max(int(m) for m in members) + 1), "-1", "2**31", "2**63", "None", repr(members[0].name)) + [
            lambda: (self.rng.choice(others), None),
            lambda: ("1.5", f"1.5 was accepted where an mpsx.{desc['enum']} is expected")]

    def hostile_arrays(self, shape, dtype):
        """Arrays of the wrong shape, dtype or layout; guarded() puts an unreadable page
        right after an array, so that reading past it crashes."""
        d = f"np.{dtype}" if hasattr(np, dtype) else repr(dtype)
        zeros = lambda s, t=d: f"guarded(np.zeros({s}, {t}))"  # noqa: E731
        options = plain(zeros(shape[1:]), zeros(shape[:-1]), zeros((1,) + shape), zeros(shape + (1,)),
                        zeros((int(np.prod(shape)),)), f"np.zeros({shape}, '>f4')", f"np.zeros({shape}, object)",
                        f"np.asfortranarray({zeros(shape)})", f"np.broadcast_to(np.zeros((), {d}), {shape})",
                        f"np.zeros({shape}, {d}).tolist()", f"np.zeros((), {d})",
                        f"np.broadcast_to(np.zeros((), {d}), {shape[:-1] + (2**31 + 1,)})")
        options.append(lambda: (zeros(shape, "np." + self.rng.choice([t for t in DTYPES if t != dtype])), None))
        if shape:
            wide = shape[:-1] + (2 * shape[-1],)
            options += plain(f"{zeros(shape)}[::-1]", f"{zeros(wide)}[..., ::2]")
            for change in (lambda s: s - 1, lambda s: s + 1, lambda s: 2 * s + 1, lambda s: 0):
                options.append(lambda change=change: (zeros(self.resized(shape, change)), None))
        if dtype.startswith("float"):
            options += plain(f"np.full({shape}, np.nan, {d})")
        # DLPack capsules: a fresh one (what from_dlpack takes too) and one a consumer took already.
        options += plain(f"np.zeros({shape}, {d}).__dlpack__()")
        options.append(lambda: (self.consumed_capsule(shape), None))
        return options

    def consumed_capsule(self, shape):
        name = self.let("used_capsule", f"np.zeros({shape}, np.float32).__dlpack__()")
        self.lines.append(f"mpsx.Buffer.from_dlpack(mpsx.Device('cpu'), {name})")
        return name

    def resized(self, shape, change):
        """shape with one dimension changed."""
        i = self.rng.randrange(len(shape))
        return shape[:i] + (max(change(shape[i]), 0),) + shape[i + 1:]

    def hostile_images(self, cls, shape, dtype, valid):
        n, c, h, w = shape
        numpy_dtype = IMAGE_DTYPES.get(dtype, "float32")
        swapped = "Image" if cls == "ImageBatch" else "ImageBatch"

        def make(dims, numpy_type=numpy_dtype, kind=cls, on="dev"):
            return f"mpsx.{kind}.from_numpy({on}, np.zeros({dims}, np.{numpy_type}))"

        options = plain(make(shape, "float64"), make(shape, kind=swapped), "[]", "[None]",
                        f"mpsx.Image(dev, mpsx.ImageDescriptor(mpsx.DataType.BFLOAT16, {w}, {h}, {c}, {n}))",
                        f"[mpsx.Image.from_numpy(dev, np.zeros((1, {c}, {h}, {w}), np.float32)) for _ in range({n})]",
                        f"[mpsx.Image.from_numpy(dev, np.zeros((1, {c}, {h}, {w}), np.float32)) "
                        f"for _ in range({n + 1})]",
                        f"[mpsx.Image.from_numpy(dev, np.zeros((1, {c}, {h}, {w}), np.float32)), "
                        f"mpsx.Image.from_numpy(dev, np.zeros((1, {c + 1}, {h}, {w}), np.float32))]")
        options.append(lambda: (make(shape, self.rng.choice([t for t in IMAGE_DTYPES.values() if t != numpy_dtype])),
                                None))
        for change in (lambda s: s - 1, lambda s: s + 1, lambda s: 2 * s, lambda s: 1):
            options.append(lambda change=change: (make(self.resized(shape, lambda s: max(change(s), 1))), None))
        if valid and cls == "ImageBatch" and n > 1:
            options += plain(f"{valid}[1:]", f"{valid}[0]", f"list({valid})")
        if self.g.other_devices:
            options.append(lambda: (make(shape, on=self.other_device()), None))
        return options

    def hostile_vectors(self, length, valid):
        options = plain(*[f"mpsx.Vector(dev, {n})" for n in (length - 1, length + 1, 0, 1, 2**62, 2**61 + 1, 2**31 + 1)
                          if n >= 0],
                        *[f"mpsx.Vector(dev, {length}, mpsx.DataType.{t})" for t in ("FLOAT16", "BFLOAT16", "UINT8")],
                        f"mpsx.Vector.from_numpy(dev, np.full({length}, np.nan, np.float32))")
        if valid:
            options += plain(f"[{valid}]", f"{valid}.buffer")
        if self.g.other_devices:
            options.append(lambda: (f"mpsx.Vector({self.other_device()}, {length})", None))
        return options

    def hostile_command_buffer(self, choice):
        if choice in ("queue", "device"):
            return "q" if choice == "queue" else "dev"
        if choice == "other device":
            name = self.let("other_cb", f"{self.other_device()}.command_queue.command_buffer()")
        elif choice == "other queue":
            name = self.let("other_queue_cb", "dev.new_command_queue().command_buffer()")
        elif choice == "replayable":
            name = self.let("replayable_cb", "q.command_buffer(replayable=True)")
        elif choice == "with":
            name = self.name("used_cb")
            self.lines.append(f"with q.command_buffer() as {name}:\n    pass")
        else:
            name = self.let(f"{choice}_cb", "q.command_buffer()")
            self.lines.append(f"{name}.commit()")
            if choice == "completed":
                self.lines.append(f"{name}.wait_until_completed()")
        self.cbs.append(name)
        return name

    def hostile_items(self, desc, valid, cls):
        options = plain("[]", "[None]", "()", "(0,) * 7", "iter([])")
        if valid and desc["items"]:
            options += plain(f"list({valid}) * 2", f"list({valid})[:-1]", f"iter({valid})")
            options.append(lambda: self.item_replaced(desc, valid, cls))
        return options

    def item_replaced(self, desc, valid, cls):
        """The valid sequence with one item replaced by a hostile value for it."""
        items = desc["items"]
        i = self.rng.randrange(len(items))
        fitted = self.fitted(items[i], f"{valid}[{i}]", cls)
        item, reason = self.rng.choice(fitted)() if fitted else (self.rng.choice(LITERALS), None)
        elements = ", ".join(f"{valid}[{j}]" if j != i else item for j in range(len(items)))
        return (f"[{elements}]" if desc["type"] == "list" else f"({elements},)"), reason

    def hostile_states(self, valid):
        options = plain("[]") + [lambda: (self.bare(), None)]
        options += [lambda: (self.from_other_factory({"type": "", "state": True}, None), None)] * 2
        if valid:
            options += plain(f"mpsx.StateBatch({valid}, 3)")
            options.append(lambda: (f"({valid}, {self.from_other_factory({'type': '', 'state': True}, None)})", None))
        return options

    def bare(self):
        cls = self.rng.choice(self.g.bareable)
        self.uses_bare = True
        return self.let("bare", f"mpsx.{cls}.__new__(mpsx.{cls})")

    def plausible(self, cls, name):
        """A value of the type of property `name` of cls's valid instances, for objects made without __init__."""
        for factory in self.g.factories.get(cls, []):
            desc = self.g.probes[factory]["properties"].get(name, {}).get("value")
            if desc and desc["type"] in ("int", "float", "bool", "str"):
                return repr(desc["value"]) if desc["type"] != "float" else desc["value"]
            if desc and desc["type"] == "enum":
                return f"mpsx.{desc['enum']}({desc['value']})"
            if desc and "items" in desc:
                return repr(tuple(i.get("value", 0) for i in desc["items"]))
        return "None"

    def other_device(self):
        """A variable holding another device."""
        if "other_dev" not in self.defined:
            self.defined.add("other_dev")
            name = self.g.other_devices[self.index % len(self.g.other_devices)]
            self.lines.append(f"other_dev = mpsx.Device({name!r})")
        return "other_dev"

    def from_other_factory(self, desc, name):
        """A variable another factory makes: one named `name`, of desc's kind or any."""
        factory = self.rng.choice([f for f in self.g.factory_ids if f != self.factory])
        variables = self.g.probes[factory]["variables"]

        def category(d):
            if d is None:
                return None
            if d.get("state"):
                return "state"
            return "image" if d["type"] in ("mpsx.Image", "mpsx.ImageBatch") else d["type"]

        same = [v for v in variables if category(variables[v]) == category(desc)]
        chosen = name if name in variables and self.rng.random() < 0.5 else self.rng.choice(same or list(variables))
        function = "make_" + factory.replace("#", "_")
        if function not in self.defined:
            self.defined.add(function)
            self.lines.append(f"def {function}(dev, cb):  # the factory of {factory}\n"
                              f"    device, q, command_buffer = dev, dev.command_queue, cb\n"
                              f"{indent(Generator.code(factory))}\n    return locals()\n")
        if self.g.other_devices and self.rng.random() < 0.3:
            cb = self.let("other_cb", f"{self.other_device()}.command_queue.command_buffer()")
            self.cbs.append(cb)
            return self.let("other", f"{function}({self.other_device()}, {cb})[{chosen!r}]")
        return self.let("other", f"{function}(dev, cb)[{chosen!r}]")


def valid_arguments(params, variables, given=None):
    """A call's arguments from a factory's variables (and `given`: {name: expression}), or
    None where a required one is missing."""
    values = {**{n: n for n in variables}, **(given or {})}
    parts = []
    for p in params or ():
        if p.name in values and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            parts.append(values[p.name] if p.kind == p.POSITIONAL_ONLY else f"{p.name}={values[p.name]}")
        elif p.required:
            return None
    return ", ".join(parts)


def plain(*expressions):
    """Thunks returning each expression, with no reason to refuse it."""
    return [lambda e=e: (e, None) for e in expressions]


# ---------------------------------------------------------------- findings

# Kinds of finding: the title of their group in the report.
TITLES = {
    "crash": "crash", "hang": "hang", "exception": "unexpected exception", "message": "exception without a message",
    "accepted": "bad input accepted", "enqueued": "raised after encoding",
    "quote": "load error quoting the file at length",
    "roundtrip": "setter refuses what its getter returned", "factory": "factory failed",
    "coverage": "class the fuzzer cannot drive", "budget": "run stopped early",
}


def reproducer(case, finding):
    """The code that shows a finding: the case up to the phase it happened in."""
    phase = finding.get("phase", "")
    parts = [case["setup"].rstrip()]
    if phase.startswith(("get ", "set ")):
        name = phase.split()[1]
        parts.append(f"obj.{name}" if phase.startswith("get") else f"obj.{name} = obj.{name}")
    elif phase != "setup":
        parts.append(case["action"].strip())
    if phase in ("finish", "cleanup", "callback", "exit") and finding.get("code"):
        parts.append(finding["code"])
    return "\n".join(p for p in parts if p) + "\n"


def pruned(setup, rest):
    """setup less its top-level statements that only bind names nothing else reads
    (repeatedly): a shorter reproducer, if running it shows the same finding."""
    statements = ast.parse(setup).body
    reads = [{n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
             for s in statements]
    later = {n.id for n in ast.walk(ast.parse(rest)) if isinstance(n, ast.Name)}

    def binds(node):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return {node.name}
        if isinstance(node, ast.Import):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        targets = [n for t in getattr(node, "targets", []) for n in ast.walk(t)]
        if isinstance(node, ast.Assign) and all(isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for n in targets):
            return {n.id for n in targets if isinstance(n, ast.Name)}
        return set()

    kept = set(range(len(statements)))
    changed = True
    while changed:
        changed = False
        for i in sorted(kept):
            names = binds(statements[i])
            if names and not names & later and not any(names & reads[j] for j in kept if j != i):
                kept.discard(i)
                changed = True
    lines = setup.split("\n")
    return "\n".join("\n".join(lines[s.lineno - 1:s.end_lineno]) for i, s in enumerate(statements) if i in kept) + "\n"


def failing_statement(setup, finding):
    """(the code before, the code of) the top-level statement of setup in which the
    finding happened, from the line its traceback names; None where it names none."""
    line = re.findall(r'File "<case [^>]* setup>", line (\d+),? in <module>', finding.get("detail") or "")
    if not line:
        return None
    failing = next(s for s in ast.parse(setup).body if s.lineno <= int(line[0]) <= s.end_lineno)
    lines = setup.split("\n")
    return "\n".join(lines[:failing.lineno - 1]), "\n".join(lines[failing.lineno - 1:failing.end_lineno]) + "\n"


class Report:
    """The findings of one run and how to read them."""

    def __init__(self, device, seed, cases, outcomes, problems=(), undriven=(), out_of_time=False):
        self.device, self.seed, self.undriven = device, seed, undriven
        generated = [c for c in cases if c["kind"] != "probe"]
        self.probes = len(cases) - len(generated)
        self.tried = sum(1 for c in generated if outcomes.get(c["id"]) is not None)
        self.skipped = sum(1 for c in generated if c["id"] in outcomes and outcomes[c["id"]] is None)
        self.findings = [dict(kind="coverage", what=p, id="-", target="catalog", reproducer="") for p in problems]
        left_out = sum(1 for c in generated if c["id"] not in outcomes)
        # Cases the time limit left out are no finding: the summary counts them.
        self.unrun = left_out if out_of_time else 0
        if left_out and not out_of_time:
            self.findings.append(dict(kind="budget", id="-", target="run", reproducer="",
                                      what=f"{left_out} cases were left out: crashes and hangs used up the run's "
                                           f"restart budget (a new child costs about {RESTART_SECONDS} s, a hang "
                                           f"its timeout)"))
        for case in cases:
            for finding in (outcomes.get(case["id"]) or {}).get("findings", []):
                target = case["key"] + (f".{case['member']}" if case.get("member") else "")
                self.findings.append(dict(finding, id=case["id"], target=target, case=case,
                                          reproducer=reproducer(case, finding)))

    @staticmethod
    def group(finding):
        kind = finding["kind"]
        if kind == "crash":
            bare = finding["target"].startswith("bare ") or finding["target"].endswith("[__new__]")
            return f"crash ({finding['what']})" + (" with an object made by cls.__new__(cls)" if bare else "")
        if kind == "exception":
            return f"unexpected {finding['error']}"
        return TITLES[kind]

    def representatives(self):
        """The finding of each group with the shortest reproducer."""
        groups = collections.defaultdict(list)
        for finding in self.findings:
            groups[self.group(finding)].append(finding)
        return {g: min(f, key=lambda f: len(f["reproducer"])) for g, f in groups.items()}

    def shrink(self, workdir, timeout=TIMEOUT, jobs=None):
        """Prunes the reproducer of each group's representative where the pruned code
        still shows a finding of the group."""
        candidates = {}
        for group, finding in self.representatives().items():
            case = finding.get("case")
            if case is None:
                continue
            setup, rest = case["setup"], reproducer(case, finding)[len(case["setup"].rstrip()):]
            failing = failing_statement(setup, finding) if finding["phase"] == "setup" else None
            setup = pruned(failing[0], failing[1]) + failing[1] if failing else pruned(setup, rest)
            shrunk = dict(case, id=f"shrink {case['id']}", key=f"shrink {case['id']}", setup=setup)
            candidates[shrunk["id"]] = (group, finding, shrunk)
        outcomes = run_cases([c for _, _, c in candidates.values()], workdir, timeout, jobs)
        for case_id, (group, finding, shrunk) in candidates.items():
            for found in (outcomes.get(case_id) or {}).get("findings", []):
                code = reproducer(shrunk, found)
                if self.group(dict(found, target=finding["target"])) == group:
                    finding["reproducer"] = code
                    break

    def summary(self):
        groups = collections.Counter(self.group(f) for f in self.findings)
        found = ", ".join(f"{n} {g}" for g, n in groups.most_common()) or "none"
        unrun = f", {self.unrun} not run within the time limit" if self.unrun else ""
        return (f"mpsx fuzz on {self.device}, seed {self.seed}: {self.tried} cases tried (and {self.probes} factory "
                f"probes), {self.skipped} skipped after their target crashed or hung{unrun}; "
                f"{len(self.findings)} findings: {found}")

    def render(self, path=None):
        """Every finding, one line each, grouped by kind, with the shortest reproducer of each group."""
        out = [self.summary()]
        if path:
            out.append(f"every finding with its reproducer and what the child printed: {path}")
        if self.undriven:
            out.append(f"methods only ever given hostile arguments (no factory has valid ones): "
                       f"{', '.join(self.undriven)}")
        by_group = collections.defaultdict(list)
        for finding in self.findings:
            by_group[self.group(finding)].append(finding)
        for title, findings in sorted(by_group.items(), key=lambda item: -len(item[1])):
            out.append(f"\n== {title}: {len(findings)} finding(s)")
            lines = collections.defaultdict(list)
            for f in findings:
                lines[(f["target"], f["what"], f.get("phase", ""))].append(f["id"])
            for (target, what, phase), ids in sorted(lines.items()):
                more = f" (+{len(ids) - 1}: {', '.join(ids[1:4])}{'...' * (len(ids) > 4)})" if len(ids) > 1 else ""
                out.append(f"  #{ids[0]}{more} {target}: {what}" + (f" [in {phase}]" if phase else ""))
            shortest = self.representatives()[title]
            if shortest["reproducer"]:
                out.append(f"  reproducer of #{shortest['id']}:\n{indent(shortest['reproducer'], '    ')}")
        return "\n".join(out)

    def write(self, path):
        with open(path, "w") as out:
            out.write(self.summary() + "\n")
            out.write(f"methods only ever given hostile arguments: {', '.join(self.undriven) or 'none'}\n")
            for f in self.findings:
                out.write(f"\n==== #{f['id']} {f['target']}: {f['what']} [{f.get('phase', '')}]\n"
                          f"{f['reproducer']}\n---- detail\n{f.get('detail') or ''}\n")


def probe_cases(catalog, device):
    """One case per factory, describing what it makes."""
    return [{"id": f"probe {cls}#{i}", "kind": "probe", "key": f"probe {cls}#{i}", "class": cls, "device": device,
             "setup": prelude(device, code) + code, "action": "", "cbs": ["cb"], "must_raise": None,
             "properties": [m.name for m in catalog.members[cls] if m.kind == "property"],
             "data_source_bases": catalog.data_source_bases}
            for cls in sorted(FACTORIES) if cls in catalog.classes for i, code in enumerate(FACTORIES[cls])]


def fuzz(device, cases, seed, workdir, only=None, timeout=TIMEOUT, jobs=None, progress=None, first_case=0,
         time_limit=None):
    """Probes the factories, then runs the generated cases first_case .. first_case + cases - 1 on the
    device, starting none once `time_limit` seconds have passed; returns the Report and the Generator."""
    deadline = time.monotonic() + time_limit if time_limit else None
    catalog = Catalog()
    probing = probe_cases(catalog, device)
    outcomes = run_cases(probing, workdir, timeout, jobs)
    probes = {c["id"].split()[1]: outcomes[c["id"]]["probe"] for c in probing
              if outcomes.get(c["id"]) and outcomes[c["id"]]["probe"]}
    generator = Generator(catalog, probes, device, [d.name for d in mpsx.devices()], seed, only)
    problems = catalog.coverage_problems() + [
        f"every factory of mpsx.{c} failed (see the factory findings), so the fuzzer cannot drive it"
        for c in catalog.drivable if c in FACTORIES and c not in generator.factories]
    # Without a working factory there is nothing to fuzz: the problems say why.
    generated = [generator.case(i) for i in range(first_case, first_case + cases)] if generator.factories else []
    outcomes.update(run_cases(generated, workdir, timeout, jobs, progress, budget=max(100, cases // 20),
                              deadline=deadline))
    out_of_time = deadline is not None and time.monotonic() >= deadline
    report = Report(device, seed, probing + generated, outcomes, problems, generator.undriven, out_of_time)
    report.shrink(workdir, timeout, jobs)
    return report, generator


# ---------------------------------------------------------------- the tests


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


# ---------------------------------------------------------------- standalone


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=CASES)
    parser.add_argument("--first-case", type=int, default=0, help="the id of the first case (a long run in parts)")
    parser.add_argument("--time-limit", type=float, help="seconds after which no case starts; the report counts "
                        "the cases left out")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--device", action="append", help="a device name (default: every device)")
    parser.add_argument("--only", help="comma-separated public names to target")
    parser.add_argument("--timeout", type=float, default=TIMEOUT)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--show", help="print the reproducer of this case id instead of running")
    parser.add_argument("--report", help="folder for the findings files (default: a new temporary one)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args.child, args.fd)
    workdir = Path(args.report or tempfile.mkdtemp(prefix="mpsx-fuzz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    only = args.only.split(",") if args.only else None
    failed = False
    for device in args.device or [d.name for d in mpsx.devices()]:
        if args.show is not None:
            _, generator = fuzz(device, 0, args.seed, workdir, only, args.timeout, args.jobs)
            case = generator.case(int(args.show))
            print(f"# case {args.show}: {case['key']}\n{case['setup']}{case['action']}\n"
                  f"{finish_code(case['cbs'], True)}")
            continue
        start = time.monotonic()
        report, _ = fuzz(device, args.cases, args.seed, workdir, only, args.timeout, args.jobs,
                         lambda done, total: print(f"\r{done}/{total} cases", end="", file=sys.stderr, flush=True),
                         args.first_case, args.time_limit)
        path = workdir / f"fuzz-findings-{device.replace(':', '-')}-{args.seed}.txt"
        report.write(path)
        print(f"\n{report.render(path)}\n({time.monotonic() - start:.0f} s)")
        failed |= bool(report.findings)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

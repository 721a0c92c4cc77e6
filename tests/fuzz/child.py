"""The child runner: runs a batch of cases in a child process, reporting each one's start and phase on a
pipe so that the parent pins a crash or a hang on its case, and judges what each raised."""

import enum
import faulthandler
import gc
import inspect
import json
import os
import re
import resource
import signal
import sys
import traceback
import types
from pathlib import Path

import numpy as np

import mpsx

from .catalog import parameters
from .config import ASAN, MEMORY_LIMIT

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
    # A case that brings a PyTorch module in, or calls from_torch (which imports its importer, hostile arguments
    # or not), imports torch.fx and sympy, seconds on a loaded machine, and leaves millions of objects for every
    # later case's gc.collect to walk: imported within the start-up's time, and frozen out of collection.
    if any("import torch" in case["setup"] or "from_torch" in case["setup"] + case.get("action", "")
           for case in cases):
        try:
            import mpsx._torch_import  # noqa: F401
            import torch.fx.experimental.symbolic_shapes  # noqa: F401
        except ImportError:  # without torch, the cases get from_torch's ImportError
            pass
        gc.freeze()
    try:
        for case in cases:
            send(start=case["id"])
            print(f"\n=== fuzz case {case['id']}", file=sys.stderr, flush=True)
            result = run_case(case, send, unraisable)
            send(done=case["id"], **result)
    except BaseException:
        send(harness_error=traceback.format_exc())
        raise SystemExit(70)

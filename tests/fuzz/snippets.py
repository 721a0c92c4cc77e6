"""The code every case runs first (PRELUDE) and the helpers a case's code may call: fuzz_raise, guarded,
and for checkpoint cases judged, tampered and the TAMPERINGS."""

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

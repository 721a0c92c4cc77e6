"""mpsx.save, mpsx.load and copies: MPS's NSSecureCoding and copyWithZone:device:.

A saved object is one safetensors file: its metadata holds a JSON description
of the object under "mpsx" and the format version under "mpsx.format"; its
tensors are the arrays the description names. Loading parses JSON and reads
tensors through the safetensors package, so nothing in a file is executed,
and classes are looked up by name, never imported.

A class takes part by defining
    __mpsx_state__(self) -> dict   the values that remake it: JSON scalars,
                                   numpy arrays, lists, tuples, dicts with
                                   str keys, and other such objects
    __mpsx_restore__(cls, state, device) (a classmethod) -> the object
and may define
    __mpsx_identity__(self)        what makes two objects the same one (a
                                   wrapper of a native node: the node), by
                                   default the object itself
    __mpsx_dependencies__(self)    the objects it is made from: they are
                                   described first, in order, so that a
                                   graph's description stays flat however
                                   deep the graph
mpsx's classes do; pickle and copy.deepcopy go through the same description
(their __reduce__ is mpsx.persistence.reduce). A Python object of another
class (a data source subclass) is saved through its __dict__, its class
named as pickle would; loading it needs its module imported first.
"""

import contextlib
import json
import math
import os
import sys

import numpy as np

from mpsx._errors import MPSXError, OutOfMemoryError, PersistenceError, UnsavableError

FORMAT_VERSION = 1
_DESCRIPTION_KEY, _VERSION_KEY = "mpsx", "mpsx.format"
# Deeper descriptions are refused: nothing mpsx saves nests this far.
_MAX_DEPTH = 64
# numpy's dtypes by safetensors' names: the tensors mpsx saves and loads (numpy has no bfloat16 or float8).
_DTYPES = {name: np.dtype(t) for name, t in (
    ("BOOL", np.bool_), ("U8", np.uint8), ("I8", np.int8), ("U16", np.uint16), ("I16", np.int16),
    ("U32", np.uint32), ("I32", np.int32), ("U64", np.uint64), ("I64", np.int64), ("F16", np.float16),
    ("F32", np.float32), ("F64", np.float64))}


# ---------------------------------------------------------------- describing

class _Describer:
    def __init__(self):
        self.tensors = {}
        # Objects described so far, by id, with their index: an object met
        # again (a node two filters read) is {"$ref": index}.
        self.seen = {}
        self.kept = []  # keeps them alive, so ids are not reused meanwhile

    def describe(self, obj, where="the object"):
        """{"class": name, "state": encoded state} of an object, with "before": the
        descriptions of the objects it depends on not described yet."""
        self.seen[_identity(obj)] = len(self.seen)
        self.kept.append(obj)
        cls = type(obj)
        if hasattr(cls, "__mpsx_restore__") and hasattr(obj, "__mpsx_state__"):
            before = [self.encode(d, where, 0) for d in self.undescribed_dependencies(obj)]
            state = obj.__mpsx_state__()
        elif _extends_mpsx(cls) and hasattr(obj, "__dict__"):  # a Python data source, say
            before, state = [], dict(vars(obj))
        else:
            raise UnsavableError(f"mpsx.save: {where} is a {_class_name(cls)}, which mpsx cannot save")
        description = {"class": _class_name(cls), "state": self.encode(state, f"{where} ({cls.__name__})", 0)}
        if before:
            description["before"] = before
        return description

    def undescribed_dependencies(self, obj):
        """What obj depends on (__mpsx_dependencies__, transitively) and is not described yet,
        dependencies first; without recursion, so a graph of any depth goes."""
        order, listed = [], set()
        stack = [iter(_dependencies(obj))]
        path = []
        while stack:
            for d in stack[-1]:
                key = _identity(d)
                if key not in self.seen and key not in listed:
                    listed.add(key)
                    path.append(d)
                    stack.append(iter(_dependencies(d)))
                    break
            else:
                stack.pop()
                if path:
                    order.append(path.pop())
        return order

    def encode(self, value, where, depth):
        if depth > _MAX_DEPTH:
            raise UnsavableError(f"mpsx.save: {where} nests more than {_MAX_DEPTH} levels")
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            return value if math.isfinite(value) else {"$float": repr(value)}
        if isinstance(value, np.ndarray):
            if value.dtype not in _DTYPES.values():
                raise UnsavableError(f"mpsx.save: {where} holds an array of dtype {value.dtype}, which mpsx cannot "
                                     f"save")
            name = str(len(self.tensors))
            self.tensors[name] = np.ascontiguousarray(value)
            return {"$tensor": name}
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
            return {"$tuple": items} if isinstance(value, tuple) else items
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise UnsavableError(f"mpsx.save: {where} is a dict with a {type(key).__name__} key; keys must "
                                         f"be str")
            return {"$dict": {k: self.encode(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}}
        if _identity(value) in self.seen:
            return {"$ref": self.seen[_identity(value)]}
        return {"$object": self.describe(value, where)}


def _identity(obj):
    identity = getattr(obj, "__mpsx_identity__", None)
    return id(obj) if identity is None else identity()


def _dependencies(obj):
    dependencies = getattr(obj, "__mpsx_dependencies__", None)
    return () if dependencies is None else dependencies()


def _is_mpsx_class(cls):
    """One of the classes mpsx exports (a subclass elsewhere in the package, the benchmarks', is not)."""
    return cls.__module__.split(".")[0] == "mpsx" and getattr(sys.modules["mpsx"], cls.__name__, None) is cls


def _extends_mpsx(cls):
    """A class of the caller's deriving from one of mpsx's (a data source protocol)."""
    return not _is_mpsx_class(cls) and any(_is_mpsx_class(c) for c in cls.__mro__)


def _class_name(cls):
    if _is_mpsx_class(cls):
        return "mpsx." + cls.__name__
    return f"{cls.__module__}:{cls.__qualname__}"


# ---------------------------------------------------------------- restoring

# The most characters of anything from a file a message quotes.
_QUOTED = 200
def _quote(value):
    """``value``, from a file or pickle, as a message quotes it: its type and repr, at most _QUOTED characters of it
    (a repr that never recurses far, however deep the value)."""
    from mpsx._runtime import quoted  # _runtime imports this module
    return _shorten(quoted(value))


def _shorten(text):
    """Text that may hold what a file holds (a name, an error quoting one) as a message quotes it."""
    text = str(text)
    return text if len(text) <= _QUOTED else f"{text[:_QUOTED]}... ({len(text)} characters)"


def _is_binding_panic(error):
    """pyo3's PanicException, which the safetensors binding raises when it fails inside (after a MemoryError, say):
    a BaseException, so that ``except Exception`` misses it."""
    return type(error).__name__ == "PanicException" and type(error).__module__ == "pyo3_runtime"


@contextlib.contextmanager
def _failures_as_persistence_errors(action):
    """Every failure in the block as an MPSXError starting "``action``: ": the MPSXErrors as they are, MemoryError as
    OutOfMemoryError, the rest as PersistenceError; KeyboardInterrupt and SystemExit pass."""
    try:
        yield
    except MPSXError:
        raise
    except MemoryError as e:
        raise OutOfMemoryError(f"{action}: out of memory: {_shorten(e)}") from e
    except Exception as e:
        raise PersistenceError(f"{action}: {type(e).__name__}: {_shorten(e)}") from e
    except BaseException as e:
        if not _is_binding_panic(e):
            raise
        raise PersistenceError(f"{action}: the safetensors package failed: {_shorten(e)}") from e


class _Restorer:
    """Makes the objects of a description. ``read(name)`` gives the tensor ``name`` (one of ``names``), each read
    once: its references share it. Messages start with ``action``."""

    def __init__(self, action, names, read, device):
        self.action, self.names, self.read, self.device = action, names, read, device
        self.tensors = {}
        self.made = []  # by the order the describer met them; None while one is being made

    def fail(self, what):
        raise PersistenceError(f"{self.action}: {what}")

    def tensor(self, name):
        if not isinstance(name, str) or name not in self.names:
            self.fail(f"the description names tensor {_quote(name)}, which is not among its tensors")
        if name not in self.tensors:
            self.tensors[name] = self.read(name)
        return self.tensors[name]

    def resolve(self, name):
        """The class a description names: an mpsx class, or one of a module already imported."""
        if not isinstance(name, str):
            self.fail(f"expected a class name (a string), given {_quote(name)}")
        if name.startswith("mpsx.") and ":" not in name:
            import mpsx
            cls = getattr(mpsx, name[5:], None)
            if not isinstance(cls, type) or not hasattr(cls, "__mpsx_restore__"):
                self.fail(f"unknown mpsx class {_quote(name)}")
            return cls
        module, _, qualname = name.partition(":")
        if not module or not qualname:
            self.fail(f"unknown class {_quote(name)}; expected 'mpsx.Name' or 'module:QualifiedName'")
        if module not in sys.modules:
            self.fail(f"the file holds an object of class {_shorten(qualname)} of module {_shorten(module)}, which is "
                      f"not imported; import it first (mpsx.load imports nothing and runs no code from the file)")
        cls = sys.modules[module]
        for part in qualname.split("."):
            cls = getattr(cls, part, None)
        if not isinstance(cls, type):
            self.fail(f"module {_shorten(module)} has no class {_shorten(qualname)}")
        return cls

    def restore(self, description, depth=0):
        if not isinstance(description, dict) or not {"class", "state"} <= set(description) <= {"class", "state",
                                                                                               "before"}:
            self.fail(f"expected an object description {{'class': ..., 'state': ...}}, given {_quote(description)}")
        cls = self.resolve(description["class"])
        index = len(self.made)
        self.made.append(None)
        before = description.get("before", [])
        if not isinstance(before, list):
            self.fail(f"expected a list of the objects made before, given {_quote(before)}")
        for dependency in before:
            self.decode(dependency, depth + 1)
        state = self.decode(description["state"], depth + 1)
        obj = self._make(cls, state)
        self.made[index] = obj
        return obj

    def _make(self, cls, state):
        if hasattr(cls, "__mpsx_restore__"):
            if not isinstance(state, dict):
                self.fail(f"expected the state of {cls.__name__} as a dict, given {_quote(state)}")
            try:
                return cls.__mpsx_restore__(state, self.device)
            except MemoryError:  # the process's, not the state's
                raise
            except Exception as e:  # what the constructors refuse, as a load error
                self.fail(f"the state of {cls.__name__} does not make one: {type(e).__name__}: {_shorten(e)}")
        if not _extends_mpsx(cls):
            self.fail(f"class {_class_name(cls)} is not an mpsx class or a subclass of one (a data source)")
        if not isinstance(state, dict):
            self.fail(f"expected the attributes of {cls.__name__} as a dict, given {_quote(state)}")
        obj = cls.__new__(cls)
        obj.__dict__.update(state)
        return obj

    def decode(self, value, depth):
        if depth > _MAX_DEPTH:
            self.fail(f"the description nests more than {_MAX_DEPTH} levels")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v, depth + 1) for v in value]
        if not isinstance(value, dict) or len(value) != 1:
            self.fail(f"expected a value, given {_quote(value)}")
        (marker, content), = value.items()
        if marker == "$tensor":
            return self.tensor(content)
        if marker == "$float":
            if content not in ("nan", "inf", "-inf"):
                self.fail(f"expected 'nan', 'inf' or '-inf' for a float, given {_quote(content)}")
            return float(content)
        if marker == "$tuple" and isinstance(content, list):
            return tuple(self.decode(v, depth + 1) for v in content)
        if marker == "$dict" and isinstance(content, dict):
            return {k: self.decode(v, depth + 1) for k, v in content.items()}
        if marker == "$object":
            return self.restore(content, depth + 1)
        if marker == "$ref":
            if type(content) is not int or not 0 <= content < len(self.made) or self.made[content] is None:
                self.fail(f"expected a reference to an object made before, given {_quote(content)}")
            return self.made[content]
        self.fail(f"expected a value, given {_quote(value)}")

    def decode_text(self, text):
        """The object a description's JSON text describes."""
        if not isinstance(text, str):
            self.fail(f"expected the description as JSON text, given {_quote(text)}")
        try:
            description = json.loads(text)
        except (ValueError, RecursionError) as e:
            self.fail(f"the description is not JSON: {type(e).__name__}: {_shorten(e)}")
        return self.decode(description, 0)


# ---------------------------------------------------------------- API

def _header(obj):
    """The JSON text describing ``obj`` and its tensors by name; UnsavableError for what cannot be described."""
    try:
        describer = _Describer()
        description = describer.encode(obj, "the object", 0)
    except TypeError as e:  # an object's own refusal: a kernel made without __init__, the state of one encode
        if isinstance(e, MPSXError):
            raise
        raise UnsavableError(str(e)) from e
    return json.dumps(description, allow_nan=False, separators=(",", ":")), describer.tensors


def save(obj, path):
    """Writes ``obj`` (a descriptor, data source, kernel, optimizer or graph, or a list, tuple or str-keyed dict of
    them: a checkpoint) to ``path``, as JSON plus safetensors. Objects met twice are saved once and shared after
    loading. UnsavableError (a TypeError) for an object mpsx cannot save, PersistenceError for a file it cannot
    write.

    MPS: -[MPSKernel encodeWithCoder:]
    """
    import safetensors.numpy
    with _failures_as_persistence_errors(f"mpsx.save: {path}"):
        text, tensors = _header(obj)
        try:
            safetensors.numpy.save_file(tensors, str(path),
                                        metadata={_DESCRIPTION_KEY: text, _VERSION_KEY: str(FORMAT_VERSION)})
        except safetensors.SafetensorError as e:
            raise PersistenceError(f"mpsx.save: safetensors cannot write {path} ({_shorten(e)}); its header would "
                                   f"hold a description of {len(text)} characters and {len(tensors)} tensors") from e


def _fail(what):
    raise PersistenceError(f"mpsx.load: {what}")


def _checked_tensors(f, path):
    """The names of the tensors of the open file ``f``, once each one's dtype is one numpy has and its shape, its zero
    dimensions aside, claims no more bytes than the file holds (the safetensors package checks the shapes of the
    bytes a tensor holds; an empty tensor holds none)."""
    size = os.path.getsize(path)
    names = set(f.keys())
    for name in names:
        tensor = f.get_slice(name)
        dtype, shape = _DTYPES.get(tensor.get_dtype()), tensor.get_shape()
        if dtype is None:
            _fail(f"{path}: tensor {_quote(name)} holds {_shorten(tensor.get_dtype())} values, which numpy has no "
                  f"type for; mpsx reads {', '.join(_DTYPES)}")
        if math.prod(n for n in shape if n) * dtype.itemsize > size:
            _fail(f"{path}: tensor {_quote(name)} claims shape {_shorten(shape)} of {dtype}, more than the "
                  f"{size}-byte file holds")
    return names


def load(path, device=None):
    """The object saved at ``path``, its kernels on ``device`` (default: the device it was saved from where this
    process has it, else the best one). A plain safetensors file of tensors (a PyTorch ``state_dict``, say) gives a
    dict of numpy arrays by name. Each tensor of the file is read once. PersistenceError for a file mpsx cannot
    read (OutOfMemoryError where memory runs out).

    MPS: -[MPSKernel initWithCoder:device:]
    """
    import safetensors
    with _failures_as_persistence_errors(f"mpsx.load: {path}"):
        try:
            with safetensors.safe_open(str(path), framework="numpy") as f:
                metadata = f.metadata() or {}
                names = _checked_tensors(f, path)
                if _DESCRIPTION_KEY not in metadata:
                    return {name: f.get_tensor(name) for name in sorted(names)}
                version = metadata.get(_VERSION_KEY)
                if not isinstance(version, str) or not (version.isascii() and version.isdigit()):
                    _fail(f"{path}: expected a format version, given {_quote(version)}")
                if len(version) > 9 or int(version) > FORMAT_VERSION:  # int() refuses 4,300 digits and more
                    _fail(f"{path} was written in format {_shorten(version)} by a newer mpsx; this one reads format "
                          f"{FORMAT_VERSION} and older")
                restorer = _Restorer("mpsx.load", names, f.get_tensor, device)
                return restorer.decode_text(metadata[_DESCRIPTION_KEY])
        except safetensors.SafetensorError as e:  # not a safetensors file, or a damaged one
            _fail(f"{path} is not a readable safetensors file: {_shorten(e)}")
        except OSError as e:
            _fail(f"{path}: {e}")


def copy(obj, device=None):
    """An independent copy of ``obj`` made through its description, its kernels on ``device``.

    MPS: -[MPSKernel copyWithZone:device:]
    """
    text, tensors = _header(obj)
    return _Restorer("mpsx.persistence.copy", tensors, lambda name: tensors[name].copy(), device).decode_text(text)


def property_names(cls):
    """The settable properties an object of ``cls`` saves: the ``_mpsx_properties`` of ``cls`` and of its bases, bases
    first.

    MPS: none (mpsx)
    """
    names = []
    for klass in reversed(cls.__mro__):
        names += [n for n in vars(klass).get("_mpsx_properties", ()) if n not in names]
    return names


def restore_properties(obj, properties, names):
    """Sets the saved ``properties`` (a dict) of ``obj``, each one of ``names``; TypeError or ValueError otherwise.

    MPS: none (mpsx)
    """
    if not isinstance(properties, dict):
        raise TypeError(f"expected the properties of {type(obj).__name__} as a dict, given {type(properties).__name__}")
    for name in properties:
        if name not in names:
            raise ValueError(f"{type(obj).__name__} has no property {name!r} to restore")
    for name, value in properties.items():
        setattr(obj, name, value)


def _unpickle(*payload):
    """The object ``reduce`` pickled as (description text, {name: array}); PersistenceError for a payload altered."""
    with _failures_as_persistence_errors("unpickling"):
        if len(payload) != 2 or not isinstance(payload[1], dict):
            raise PersistenceError(f"unpickling: expected (description, {{name: array}}), given {_quote(payload)}")
        text, tensors = payload
        for name, array in tensors.items():
            if not isinstance(array, np.ndarray) or array.dtype not in _DTYPES.values():
                raise PersistenceError(f"unpickling: expected tensor {_quote(name)} as an array of one of "
                                       f"{', '.join(_DTYPES)}, given {_quote(array)}")
        return _Restorer("unpickling", tensors, tensors.__getitem__, None).decode_text(text)


def _unpickle_device(name):
    """The device a pickle names (a Device's ``__reduce__``); PersistenceError for one this process lacks."""
    import mpsx
    with _failures_as_persistence_errors("unpickling"):
        return mpsx.Device(name)


def reduce(obj):
    """``obj.__reduce__`` for mpsx classes: pickle and ``copy.deepcopy`` through the description.

    MPS: none (mpsx)
    """
    text, tensors = _header(obj)
    return _unpickle, (text, tensors)


def device_of(state, device):
    """The device an object restores onto: ``device`` if given, else the one ``state`` was saved from where this
    process has it, else the best one.

    MPS: none (mpsx)
    """
    import mpsx
    if device is not None:
        if not isinstance(device, mpsx.Device):
            raise TypeError(f"expected an mpsx.Device, given {type(device).__name__}")
        return device
    name = state.get("device")
    if isinstance(name, str) and name in [d.name for d in mpsx.devices()]:
        return mpsx.Device(name)
    return mpsx.Device()


# ---------------------------------------------------------------- PyTorch weights

def weights_from_torch(descriptor, weight):
    """PyTorch weights as mpsx's OHWI for a convolution ``descriptor``: a Conv2d's [out, in / groups, kh, kw], or a
    Linear's [out, C * H * W] over a C x H x W input flattened in PyTorch's (C, H, W) order, H x W the descriptor's
    kernel size (a fully connected layer). ValueError for another shape.

    MPS: none (mpsx)
    """
    weight = np.asarray(weight, np.float32)
    out, kh, kw = descriptor.output_feature_channels, descriptor.kernel_height, descriptor.kernel_width
    cin = descriptor.input_feature_channels // descriptor.groups
    if weight.ndim == 2:
        if weight.shape != (out, cin * kh * kw):
            raise ValueError(f"expected linear weights of shape {(out, cin * kh * kw)} for {descriptor!r}, "
                             f"given {weight.shape}")
        weight = weight.reshape(out, cin, kh, kw)
    if weight.shape != (out, cin, kh, kw):
        raise ValueError(f"expected OIHW weights of shape {(out, cin, kh, kw)} for {descriptor!r}, given {weight.shape}")
    return np.ascontiguousarray(weight.transpose(0, 2, 3, 1))


def weights_to_torch(weight, linear=False):
    """mpsx OHWI weights in PyTorch's layout: OIHW, or [out, C * H * W] for a Linear (``linear=True``).

    MPS: none (mpsx)
    """
    weight = np.ascontiguousarray(np.asarray(weight, np.float32).transpose(0, 3, 1, 2))
    return weight.reshape(len(weight), -1) if linear else weight


def torch_state_dict(data_sources):
    """``{name: data source}`` as the arrays of a PyTorch ``state_dict``, in PyTorch's names and layouts:
    ``name.weight`` and ``name.bias`` of a convolution or (for a fully connected descriptor whose kernel covers its
    input, given as ``("linear", data source)``) a Linear; ``name.weight``, ``name.bias``, ``name.running_mean``,
    ``name.running_var`` of a batch normalization. ``safetensors.numpy.save_file`` writes it for torch's safetensors
    loader.

    MPS: none (mpsx)
    """
    import mpsx
    arrays = {}
    for name, source in data_sources.items():
        linear = isinstance(source, tuple) and source[0] == "linear"
        source = source[1] if linear else source
        if isinstance(source, mpsx.BatchNormalizationWeights):
            arrays.update({f"{name}.weight": source.gamma(), f"{name}.bias": source.beta(),
                           f"{name}.running_mean": source.mean(), f"{name}.running_var": source.variance()})
        elif hasattr(source, "descriptor") and hasattr(source, "weights"):
            arrays[f"{name}.weight"] = weights_to_torch(source.weights(), linear)
            bias = source.bias_terms() if hasattr(source, "bias_terms") else None
            if bias is not None:
                arrays[f"{name}.bias"] = np.asarray(bias, np.float32)
        else:
            raise TypeError(f"torch_state_dict: {name} is a {type(source).__name__}; expected convolution or batch "
                            f"normalization weights")
    return arrays


def convolution_weights_from_torch(descriptor, state_dict, name, optimizer=None):
    """ConvolutionWeights of the Conv2d or Linear ``name`` of a PyTorch ``state_dict`` (numpy arrays, as ``mpsx.load``
    reads a safetensors file). KeyError for a name the state_dict lacks.

    MPS: none (mpsx)
    """
    import mpsx
    weight = _entry(state_dict, f"{name}.weight")
    bias = state_dict.get(f"{name}.bias")
    return mpsx.ConvolutionWeights(descriptor, weights_from_torch(descriptor, weight),
                                   None if bias is None else np.asarray(bias, np.float32), optimizer=optimizer)


def batch_normalization_weights_from_torch(state_dict, name, epsilon=1e-5, momentum=0.1, optimizer=None):
    """BatchNormalizationWeights of the BatchNorm2d ``name`` of a PyTorch ``state_dict``. KeyError for a name the
    state_dict lacks.

    MPS: none (mpsx)
    """
    import mpsx
    return mpsx.BatchNormalizationWeights(*(np.asarray(_entry(state_dict, f"{name}.{k}"), np.float32)
                                            for k in ("weight", "bias", "running_mean", "running_var")),
                                          epsilon, momentum, optimizer)


def _entry(state_dict, key):
    if key not in state_dict:
        raise KeyError(f"the state_dict has no {key!r}; it has {sorted(state_dict)[:20]}")
    return state_dict[key]

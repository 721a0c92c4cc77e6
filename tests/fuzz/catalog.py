"""The catalog: mpsx's public classes and functions, and what the fuzzer calls on them, by introspection."""

import dataclasses
import enum
import inspect

import mpsx
from fuzz.factories import FACTORIES


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
        return ([f"mpsx.{n} has methods or properties but no factory in tests/fuzz/factories.py, so the fuzzer "
                 f"cannot drive it: add one making a valid instance (obj) and valid arguments" for n in missing]
                + [f"tests/fuzz/factories.py has a factory for {n}, which is not a public mpsx class"
                   for n in stale])

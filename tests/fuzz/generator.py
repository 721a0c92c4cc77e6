"""The generator: case N of a seed, a copy-pasteable Python snippet making one hostile call."""

import ast
import collections
import dataclasses
import io
import random
import textwrap
import tokenize
import zlib

import numpy as np

from fuzz.factories import FACTORIES

from .snippets import prelude
from .values import (BOOLS, CALLABLES, DESTINATIONS, DTYPES, FLOATS, FORMS, HANDLERS, IMAGE_DTYPES, INT_EXTREMES,
                     KINDS, LITERALS, MUTATIONS, NOT_INTS, PROTOCOL, STRINGS)


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

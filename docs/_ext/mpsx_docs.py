"""The mpsx documentation's own Sphinx extension.

- ``.. mpsx-names::`` renders the MPS-to-mpsx name tables from the package
  itself: each public name's, method's and property's MPS counterpart from
  the ``MPS:`` line its docstring ends with.
- autodoc shows each class with the members it and its private bases define
  (those of a public base are on that base's entry), bases by their public
  names (``mpsx.CNNKernel``, not ``mpsx._kernels.CNNKernel``).
- The build warns (an error with -W) for every public name of mpsx and
  mpsx.distributed that no page documents, so a new class without docs fails,
  and for any link out of the site.
"""

import enum
import inspect
import re

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import mpsx
import mpsx.distributed

logger = logging.getLogger(__name__)

BUILTIN_BASES = {"object", "tuple", "int", "Enum", "IntEnum", "Flag", "IntFlag", "ReprEnum",
                 "BaseException", "Exception", "ValueError", "MemoryError"}

MPS_LINE = re.compile(r"^\s*MPS:\s*(.*?)\s*$")


def public_names(module=mpsx):
    """The module's public names: its __all__, or its attributes not starting
    with an underscore, less modules (as tests/test_fuzz.py counts them)."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)]
    return sorted(names)


def documented_names():
    """Every full name the pages must document."""
    return ([f"mpsx.{n}" for n in public_names()]
            + [f"mpsx.distributed.{n}" for n in public_names(mpsx.distributed)
               if getattr(mpsx.distributed, n) is not getattr(mpsx, n, None)])


def mps_line(obj):
    """The text of the docstring's ``MPS:`` line, or None."""
    found = [m.group(1) for m in map(MPS_LINE.match, (inspect.getdoc(obj) or "").splitlines()) if m]
    return found[-1].strip("`") if found else None


def member_rows(cls, name):
    """(MPS, mpsx member, role) for each member the class defines whose docstring's MPS: line names a
    counterpart."""
    rows = []
    if isinstance(cls, enum.EnumMeta):
        return rows
    for member, value in vars(cls).items():
        if member.startswith("_"):
            continue
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if not (inspect.isroutine(value) or inspect.isdatadescriptor(value)):
            continue
        mps = mps_line(value)
        if mps and not mps.startswith("none"):
            rows.append((mps, f"{name}.{member}", "meth" if inspect.isroutine(value) else "attr"))
    return rows


def _reference(target, role):
    """A cross-reference to the Python object named target, shown as code."""
    xref = addnodes.pending_xref("", refdomain="py", reftype=role, reftarget=target, refexplicit=False,
                                 refwarn=False)
    xref += nodes.literal(target, target, classes=["xref", "py", f"py-{role}"])
    return xref


def _table(title, rows):
    """A two-column table (MPS, mpsx) of (text, node) rows, built as nodes so
    that it is the same in a Markdown page as in a reStructuredText one."""
    table = nodes.table(classes=["mpsx-names"])
    table += nodes.title(title, title)
    group = nodes.tgroup(cols=2)
    table += group
    group += [nodes.colspec(colwidth=1), nodes.colspec(colwidth=1)]

    def row(*cells):
        line = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", cell)
            line += entry
        return line
    head = nodes.thead()
    head += row(nodes.Text("MPS"), nodes.Text("mpsx"))
    body = nodes.tbody()
    for mps, reference in rows:
        body += row(nodes.Text(mps) if mps.startswith("none") else nodes.literal(mps, mps), reference)
    group += [head, body]
    return table


class NameMapDirective(SphinxDirective):
    """The MPS-to-mpsx name tables, read from the package."""

    def run(self):
        classes, members, missing = [], [], []
        for name in public_names():
            counterpart = mps_line(getattr(mpsx, name))
            if counterpart is None:
                missing.append(name)
                continue
            classes.append((counterpart, _reference(f"mpsx.{name}", "obj")))
            members.extend((mps, _reference(f"mpsx.{member}", role))
                           for mps, member, role in member_rows(getattr(mpsx, name), name))
        for name in missing:
            logger.warning(f"mpsx.{name} names no MPS counterpart: give its docstring an ``MPS:`` line",
                           location=self.get_location())
        # In the order of the MPS names, selectors by their class.
        by_mps = lambda row: (row[0].lstrip("-+[").lower(), row[1].astext())
        classes.sort(key=by_mps)
        members.sort(key=by_mps)
        return [_table("Classes and functions", classes), _table("Methods and properties", members)]


def public_bases(app, name, obj, options, bases):
    """Bases by their public mpsx names; a private base by its own public bases."""
    def resolve(base):
        if getattr(mpsx, base.__name__, None) is base:
            return [f":py:class:`mpsx.{base.__name__}`"]
        if base.__module__.startswith("mpsx") and base.__name__.startswith("_"):
            return [r for b in base.__bases__ for r in resolve(b)]
        return [base]
    bases[:] = [r for base in list(bases) for r in resolve(base)]


def check_coverage(app, env):
    """Warns for each public name no page documents."""
    documented = set(env.get_domain("py").objects)
    for name in documented_names():
        if name not in documented:
            logger.warning(f"{name} is on no page of the documentation: add it to the page of its family")


def no_outside_links(app, doctree, docname):
    """Warns for a link out of the site: it documents the shipped files only."""
    for reference in doctree.findall(nodes.reference):
        if re.match(r"^[a-z][a-z+.-]*:", reference.get("refuri", "")):
            logger.warning(f"a link out of the site: {reference['refuri']}", location=reference)


def stop_at_public_bases(app, config):
    """Each class shows what it and its private bases define; the members of a
    public base (or a builtin one) are on that base's entry."""
    public_classes = {n for n in public_names() if isinstance(getattr(mpsx, n), type)}
    config.autodoc_default_options["inherited-members"] = ",".join(sorted(public_classes | BUILTIN_BASES))


def setup(app):
    app.connect("config-inited", stop_at_public_bases)
    app.add_directive("mpsx-names", NameMapDirective)
    app.connect("autodoc-process-bases", public_bases)
    app.connect("env-check-consistency", check_coverage)
    app.connect("doctree-resolved", no_outside_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

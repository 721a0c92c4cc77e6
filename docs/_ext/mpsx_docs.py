"""The mpsx documentation's own Sphinx extension.

- ``.. mpsx-names::`` renders the MPS-to-mpsx name tables from the package
  itself: each public name's, method's and property's MPS counterpart from
  the ``MPS:`` line its docstring ends with (read by mps_names.py).
- ``.. mps-coverage::`` renders, per header, how many names of the MPS
  names manifest (docs/mps-manifest.txt) are mapped, left out and missing.
- autodoc shows each class with the members it and its private bases define
  (those of a public base are on that base's entry), bases by their public
  names (``mpsx.CNNKernel``, not ``mpsx._kernels.CNNKernel``).
- The build warns (an error with -W) for every public name of mpsx and
  mpsx.distributed that no page documents, so a new class without docs fails,
  and for any link out of the site.
"""

import re

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import mpsx
import mpsx.distributed
from mps_names import coverage, member_rows, mps_line, public_names

logger = logging.getLogger(__name__)

BUILTIN_BASES = {"object", "tuple", "int", "Enum", "IntEnum", "Flag", "IntFlag", "ReprEnum",
                 "BaseException", "Exception", "ValueError", "MemoryError"}


def documented_names():
    """Every full name the pages must document."""
    return ([f"mpsx.{n}" for n in public_names()]
            + [f"mpsx.distributed.{n}" for n in public_names(mpsx.distributed)
               if getattr(mpsx.distributed, n) is not getattr(mpsx, n, None)])


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


class CoverageDirective(SphinxDirective):
    """The MPS names manifest's coverage table, per header."""

    def run(self):
        heads = ("header", "classes and protocols mapped", "left out", "missing",
                 "selectors and properties mapped", "left out", "missing")
        table = nodes.table(classes=["mps-coverage"])
        group = nodes.tgroup(cols=len(heads))
        table += group
        group += [nodes.colspec(colwidth=3 if i == 0 else 1) for i in range(len(heads))]

        def row(cells):
            line = nodes.row()
            for cell in cells:
                entry = nodes.entry()
                entry += nodes.paragraph("", str(cell))
                line += entry
            return line
        head, body = nodes.thead(), nodes.tbody()
        head += row(heads)
        for cells in coverage():
            body += row(cells)
        group += [head, body]
        return [table]


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
    app.add_directive("mps-coverage", CoverageDirective)
    app.connect("autodoc-process-bases", public_bases)
    app.connect("env-check-consistency", check_coverage)
    app.connect("doctree-resolved", no_outside_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

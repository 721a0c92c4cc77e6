"""Sphinx configuration of the mpsx documentation.

The API pages are autodoc of the built package (its docstrings live in
compiled Cython modules), so the build imports mpsx: install it, or build it
with tools/dev_build.sh and set PYTHONPATH to build/dev/stage.
tools/build_docs.sh does the whole build, warnings as errors.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

try:
    import mpsx
except ImportError as error:
    raise RuntimeError(
        "the documentation imports the built mpsx: pip install . (or tools/dev_build.sh and "
        f"PYTHONPATH=build/dev/stage), then build again ({error})") from error

project = "mpsx"
author = "the mpsx authors"
copyright = "the mpsx authors, Apache License 2.0"
release = mpsx.__version__
version = release

extensions = ["sphinx.ext.autodoc", "myst_parser", "mpsx_docs"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Members in the order of the source, each class's own (the inherited ones are
# on their base class's page); signatures come from inspect (binding=True, and
# each Cython class's __text_signature__).
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"
autoclass_content = "class"

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "alabaster"
html_title = f"mpsx {release}"
html_show_sourcelink = False
html_copy_source = False
html_show_sphinx = False
# The site links to nothing outside itself.
html_theme_options = {"page_width": "1160px", "sidebar_width": "240px", "show_powered_by": False}

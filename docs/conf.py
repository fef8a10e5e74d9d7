"""Sphinx configuration of the bmczoo documentation.

Build: ``pip install -e ".[docs]"`` then ``sphinx-build -W -b html docs docs/_build/html``.
The notebooks are rendered from their stored outputs (nothing is executed at build time).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
# importing bmczoo imports JAX: keep it on the CPU and quiet while the docs build
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MPLBACKEND", "Agg")

import bmczoo  # noqa: E402

# The notebooks live in notebooks/ (where they are run and tested); the gallery renders
# copies of them (git-ignored), refreshed when a notebook changes.
_GALLERY = HERE / "gallery"
for _nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
    _copy = _GALLERY / _nb.name
    if not _copy.exists() or _copy.read_bytes() != _nb.read_bytes():
        _copy.write_bytes(_nb.read_bytes())

project = "bmczoo"
author = "the bmczoo authors"
copyright = "bmczoo authors"
release = bmczoo.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    # MathJax 3 served from the built site (_static/mathjax/), not from a CDN, so that the
    # mathematics renders offline; this extension sets mathjax_path and copies the files
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
]
# The served MathJax is version 3 (myst adds the classes it typesets to this configuration).
# An undefined macro is a TeX error, shown and found by scripts/check_docs_render.py, rather
# than MathJax 3's default of printing its name in red.
mathjax3_config = {"tex": {"packages": {"[-]": ["noundefined"]}}}

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# --- MyST / MyST-NB: Markdown pages, notebooks from their committed outputs ---------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
nb_execution_mode = "off"
nb_merge_streams = True
# Notebook cells display their result tables as text/markdown (Markdown pipe tables);
# myst-nb's default CommonMark parser has no tables and would print them as text
nb_render_markdown_format = "gfm"

# --- API reference --------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autosummary_ignore_module_all = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # numpydoc renders the types the docstrings state
autodoc_member_order = "bysource"
autodoc_inherit_docstrings = True

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Warnings as errors then fail the build on a public name without a docstring (GL08) and
# on a parameter a docstring does not describe (PR01).  Private names are not public API.
numpydoc_validation_checks = {"GL08", "PR01"}
numpydoc_validation_exclude = {
    r"\._[a-zA-Z]",  # private modules, functions and methods
    r"\.__[a-z]+__$",  # dunder methods
    # Containers the library builds and hands out (results, their metadata, data views);
    # users read their documented attributes and methods, never call their constructors.
    r"^bmczoo\.inference\.(FitResult|MCMCFit|GibbsFit|NUTSFit|VBFit|SVIFit|MAPFit|TensorFit|FitInfo|ConjugateGibbsState)$",
    r"^bmczoo\.inference\.results\.outputs\.FoldInFit$",
    r"^bmczoo\.(diagnostics\.FitArrays|priors\.VBGamma|datasets\.(Simulation|MovieLensInfo)|data\.SortedView|offsets\.Shift)$",
    r"^bmczoo\.inference\.checkpoint\.ResumeGuarantee$",
    r"\.[A-Z][A-Z0-9_]+$",  # constants: their pages and the guide say what they hold
    # NumPyro's own protocol methods, documented by NumPyro
    r"^bmczoo\.inference\.ConjugateGibbs\.(init|sample|postprocess_fn|get_diagnostics_str|default_fields)$",
}
# Public names whose docstrings do not yet describe every parameter: listed one per line
# in docs/validation_pending.txt.  The list only shrinks; a new public name must pass.
_pending = HERE / "validation_pending.txt"
if _pending.exists():
    numpydoc_validation_exclude |= {
        "^" + line.strip().replace(".", r"\.") + "$"
        for line in _pending.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable", None),
    "jax": ("https://docs.jax.dev/en/latest", None),
    "numpyro": ("https://num.pyro.ai/en/stable", None),
    "arviz": ("https://python.arviz.org/en/stable", None),
}
# The build must not depend on the network: intersphinx inventories are only fetched
# when BMCZOO_DOCS_INTERSPHINX=1.
if os.environ.get("BMCZOO_DOCS_INTERSPHINX") != "1":
    intersphinx_mapping = {}

# Broken cross-references are warnings (errors with -W).  References into other
# projects resolve only with intersphinx; offline they are accepted as plain text.
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(abc|urllib|numpy|numpyro|jax|jaxlib|arviz|xarray|pandas|matplotlib|scipy|optax)(\..*)?",
    ),
    (r"py:class", r"Array"),  # jax.Array in signatures
]
# Docstring references not yet resolvable (a name that is not documented, or written
# relative to another module), one "py:role target" per line; the list only shrinks.
_nitpick_pending = HERE / "nitpick_pending.txt"
if _nitpick_pending.exists():
    nitpick_ignore = [
        tuple(line.split(None, 1))
        for line in _nitpick_pending.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

# --- HTML -----------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "bmczoo"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "secondary_sidebar_items": ["page-toc"],
}
html_static_path: list[str] = []
html_show_sourcelink = False


def _public_bases(app, name, obj, options, bases):
    """ "Bases:" lists public classes only (a private base declares the fields that several
    settings classes share: it is documented through them)."""
    bases[:] = [b for b in bases if not getattr(b, "__name__", "").startswith("_")] or [object]


def setup(app):
    app.connect("autodoc-process-bases", _public_bases)

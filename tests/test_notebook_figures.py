"""Every plotting cell of the committed notebooks carries its figure.

The documentation renders the notebooks from their stored outputs, so a plotting cell
without a stored image is a figure missing from the site.  This reads the ``.ipynb`` JSON
only (nothing is executed): fast, in the default suite.

The rule, on each code cell's syntax tree (IPython magics and shell lines dropped):

* a **plotting call** is a call, outside any ``def`` / ``lambda`` / ``class`` body, whose
  dotted function name

  - is ``plt.<name>`` with exactly one attribute (``plt.subplots``, ``plt.show``, ...),
    except the calls that draw nothing (``NON_DRAWING_PLT``); ``plt.rcParams.update`` and
    ``plt.style.use`` have two attributes and are not plotting calls;
  - has a part named ``plot`` or starting with ``plot_`` (``ax.plot``, ``df.plot.bar``,
    ``az.plot_ppc``, ``bmc.diagnostics.plot_trace``);
  - ends in ``Figure`` or ``Image`` (a Matplotlib figure built directly and displayed,
    an image file displayed with ``IPython.display.Image``);
  - is a function defined in an earlier or the same cell of the notebook whose body makes
    a plotting call (a plotting helper);

* a **plotting cell** is a code cell that makes a plotting call; it must have an output
  with ``image/png`` or ``image/svg+xml`` data.

``bmc.diagnostics.report`` writes its figures to files, not to the cell's output, so it is
not a plotting call (a later cell that displays one of them calls ``Image``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb"))
IMAGE_TYPES = ("image/png", "image/svg+xml")
NON_DRAWING_PLT = frozenset(
    {"close", "ioff", "ion", "isinteractive", "rc", "rc_context", "rcdefaults", "switch_backend"}
)
# lines IPython transforms before Python sees them: %magic, %%cell magic, !shell
_IPYTHON_LINE = re.compile(r"^\s*(%|!)")


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes; None for anything else
    (a subscript, a call's result: ``axes[0].plot`` is ``None`` and handled by its last part)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _attribute_parts(func: ast.expr) -> list[str]:
    """The names along a call's function, including the attributes after a subscript or a
    call (``axes[0].plot`` -> ``["plot"]``, ``df.plot.bar`` -> ``["df", "plot", "bar"]``)."""
    name = dotted_name(func)
    if name is not None:
        return name.split(".")
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    return list(reversed(parts))


def is_plotting_call(call: ast.Call, helpers: set[str]) -> bool:
    """Whether ``call`` draws a figure by the module docstring's rule."""
    parts = _attribute_parts(call.func)
    if not parts:
        return False
    if len(parts) == 2 and parts[0] == "plt":
        return parts[1] not in NON_DRAWING_PLT
    if any(p == "plot" or p.startswith("plot_") for p in parts):
        return True
    if parts[-1] in ("Figure", "Image"):
        return True
    return len(parts) == 1 and parts[0] in helpers


class _Calls(ast.NodeVisitor):
    """The plotting calls of a tree outside function and class bodies, and the names of
    the functions it defines whose bodies make plotting calls."""

    def __init__(self, helpers: set[str]):
        self.helpers = helpers
        self.plots = False

    def visit_Call(self, node: ast.Call) -> None:
        self.plots = self.plots or is_plotting_call(node, self.helpers)
        self.generic_visit(node)

    def _visit_def(self, node) -> None:
        inner = _Calls(self.helpers)
        for stmt in node.body:
            inner.visit(stmt)
        if inner.plots:
            self.helpers.add(node.name)
        for deco in node.decorator_list:
            self.visit(deco)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_def

    def visit_Lambda(self, node: ast.Lambda) -> None:  # a body that runs only when called
        return None


def plotting_cells(nb) -> list[int]:
    """Indices (in ``nb.cells``) of the code cells that make a plotting call."""
    helpers: set[str] = set()
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = [ln for ln in cell.source.splitlines() if not _IPYTHON_LINE.match(ln)]
        visitor = _Calls(helpers)
        visitor.visit(ast.parse("\n".join(lines)))
        if visitor.plots:
            found.append(i)
    return found


def has_image(cell) -> bool:
    """Whether a code cell's stored outputs hold an image."""
    return any(m in out.get("data", {}) for out in cell.outputs for m in IMAGE_TYPES)


def _cells(source: str) -> list[int]:
    """``plotting_cells`` of a notebook whose code cells are ``source`` split on ``# ---``."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in source.split("# ---\n")]
    )
    return plotting_cells(nb)


RULE_CASES = [
    # (code cells, separated by "# ---"; indices of the plotting cells)
    ("fig, ax = plt.subplots()\n# ---\nx = 1", [0]),
    ("import matplotlib.pyplot as plt\n%matplotlib inline\nplt.close('all')", []),
    ("plt.rcParams.update({'font.size': 9})\nplt.style.use('ggplot')", []),
    # names in comments and strings are not calls
    ("# plt.plot(x)\nprint('az.plot_ppc(idata)')", []),
    ("if ok:\n    axes[0].plot([0, 1])", [0]),
    ("df.plot.bar()\n# ---\naz.plot_trace(idata)\n# ---\nbmc.diagnostics.report(f, d)", [0, 1]),
    ("fig = Figure()\n# ---\ndisplay(Image(filename='a.png'))", [0, 1]),
    # a helper that plots is a plotting function where it is called, not where it is defined
    ("def show(x):\n    plt.plot(x)\n# ---\nshow(1)\n# ---\nf = lambda: plt.plot(1)", [1]),
    ("def table(x):\n    return x\n# ---\ntable(1)", []),
]


@pytest.mark.parametrize("source, expected", RULE_CASES)
def test_the_rule(source, expected):
    assert _cells(source) == expected


def test_has_image():
    out = nbformat.v4.new_output(
        "display_data", data={"image/png": "iVBORw0K", "text/plain": "<Figure>"}
    )
    cell = nbformat.v4.new_code_cell("plt.plot(x)", outputs=[out])
    assert has_image(cell)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"})]
    assert not has_image(cell)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_plotting_cells_carry_their_figures(name):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    cells = plotting_cells(nb)
    assert cells, f"{name} shows no figure"
    missing = [i for i in cells if not has_image(nb.cells[i])]
    assert not missing, (
        f"{name}: plotting cells without a stored image (cell index, first line): "
        + "; ".join(f"{i}: {nb.cells[i].source.splitlines()[0]!r}" for i in missing)
    )

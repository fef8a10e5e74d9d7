"""The package's shape: no import circle, no arrow back up, small files and functions.

These are the limits ``docs/design.md`` ("Rules") states, measured on the syntax tree of
``src/bmczoo`` so that a change that breaks one fails here rather than in a review.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "bmczoo"

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 10

# Public entry points whose keyword signature is the documented API (``bmc.fit`` and the
# NumPyro kernel, whose keywords mirror the Gibbs settings as NumPyro's own kernels do):
# their parameters are listed one by one for users rather than hidden behind an object.
PUBLIC_SIGNATURES = {
    "bmczoo.inference.fit.fit",
    "bmczoo.inference.gibbs.kernel.ConjugateGibbs.__init__",
    # the sampler's public entry point for hand-driven runs: one keyword per component
    "bmczoo.inference.gibbs.state.build_problem",
    # the VB core's entry point for hand-driven runs (bmczoo.inference.vb.update): likewise
    "bmczoo.inference.vb.cavi.update",
    # the public NumPyro model (API.md): one keyword per component, like fit
    "bmczoo.models.matrix_completion.matrix_completion",
}


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_package)
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(module: str) -> set[str]:
    """The package's modules that ``module`` imports, function-local imports included
    (they run too), ``TYPE_CHECKING`` imports excluded; a package's own ``__init__`` is
    not counted as an import of its children."""
    path, is_package = MODULES[module]
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    here = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.startswith("bmczoo") else None
            if target and target != module:
                if MODULES[target][1] and module.startswith(target + "."):
                    continue
                found.add(target)
    return found


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_circle_between_modules():
    edges = {m: _imports(m) for m in MODULES}
    assert _circles(edges) == []


def test_no_import_circle_between_subpackages():
    # e.g. results importing diagnostics while diagnostics imports results: an arrow that
    # runs back up even when no two modules import each other
    edges: dict[str, set[str]] = {}
    for m in MODULES:
        for t in _imports(m):
            a, b = _subpackage(m), _subpackage(t)
            if a != b and b != "bmczoo":
                edges.setdefault(a, set()).add(b)
    assert _circles(edges) == []


def _functions():
    for module, (path, _) in MODULES.items():
        tree = ast.parse(path.read_text())
        stack = [(tree, module)]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}.{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        yield name, child
                    stack.append((child, name))
                else:
                    stack.append((child, prefix))


def _parameters(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return count - (bool(names) and names[0] in ("self", "cls"))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_file_length(module):
    lines = len(MODULES[module][0].read_text().splitlines())
    assert lines <= MAX_FILE_LINES, f"{module}: {lines} lines"


def test_function_length():
    long = {
        name: fn.end_lineno - fn.lineno + 1
        for name, fn in _functions()
        if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES and name not in PUBLIC_SIGNATURES
    }
    assert long == {}


def test_function_parameters():
    many = {
        name: _parameters(fn)
        for name, fn in _functions()
        if _parameters(fn) > MAX_PARAMETERS and name not in PUBLIC_SIGNATURES
    }
    assert many == {}


def test_no_branching_on_component_or_result_names():
    offenders = []
    for module, (path, _) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
                if node.left.attr == "__name__" and not (
                    isinstance(node.left.value, ast.Name) and node.left.value.id == "__name__"
                ):
                    offenders.append(f"{module}:{node.lineno}")
    assert offenders == []


def test_the_checks_see_a_circle():
    # the helpers themselves: a planted circle and a planted long function are found
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("def f(a, b, c, d, e, f, g, h, i, j, k):\n" + "    x = 1\n" * 90)
    fn = tree.body[0]
    assert _parameters(fn) == 11 and fn.end_lineno - fn.lineno + 1 == 91

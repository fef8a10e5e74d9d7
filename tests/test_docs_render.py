"""The documentation renders its notebook tables and its mathematics offline, in a real
headless browser (``scripts/check_docs_render.py``).

The checker is tried on small sites made here: one as the documentation looked when it
failed (Markdown tables printed as text, MathJax from a CDN), which it must reject, and one
that renders, which it must accept.  The last test checks the built documentation itself
(``docs/_build/html``, or the folder ``BMCZOO_DOCS_SITE`` names).  The browser tests skip,
saying why, where Playwright or a Chromium is missing, the site test where no site is built.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checker():
    spec = importlib.util.spec_from_file_location(
        "check_docs_render", REPO / "scripts" / "check_docs_render.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def browser(checker) -> str:
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (docs extra)")
    try:
        return checker.find_browser()
    except checker.CannotCheck as exc:
        pytest.skip(str(exc))


def _notebook(path: Path, markdown_outputs: list[str]) -> None:
    """Write a notebook whose one code cell displays ``markdown_outputs`` as Markdown."""
    outputs = [
        {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": text}}
        for text in markdown_outputs
    ]
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "| not | counted |\n|---|---|\n"},
        {"cell_type": "code", "metadata": {}, "source": "", "outputs": outputs},
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))


TABLE_MD = "| a | b |\n|---|--:|\n| 1 | 2 |\n"


def _page(body: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


def test_markdown_table_counts(checker, tmp_path):
    # text/markdown outputs only, one per delimiter row; markdown cells and text are not outputs
    _notebook(tmp_path / "two.ipynb", [TABLE_MD, "text\n\n" + TABLE_MD.replace("--:", ":-:")])
    _notebook(tmp_path / "none.ipynb", ["no table | here"])
    assert checker.markdown_table_counts(tmp_path) == {"two": 2}


def test_find_browser_rejects_a_path_that_is_no_program(checker, tmp_path):
    with pytest.raises(checker.CannotCheck, match="not an executable file"):
        checker.find_browser(str(tmp_path / "no-such-browser"))


def test_check_site_needs_a_built_site_and_the_notebooks(checker, tmp_path):
    with pytest.raises(checker.CannotCheck, match="no built site"):
        checker.check_site(tmp_path, tmp_path, "chromium")
    (tmp_path / "index.html").write_text(_page("<p>home</p>"))
    with pytest.raises(checker.CannotCheck, match=r"no notebook \(\*\.ipynb\) in"):
        checker.check_site(tmp_path, tmp_path, "chromium")


def test_rejects_tables_as_text_and_mathematics_from_a_cdn(checker, browser, tmp_path):
    site, notebooks = tmp_path / "site", tmp_path / "notebooks"
    (site / "gallery").mkdir(parents=True)
    notebooks.mkdir()
    _notebook(notebooks / "nb.ipynb", [TABLE_MD])
    (site / "index.html").write_text(_page("<p>home</p>"))
    # the table as the CommonMark renderer left it: a paragraph of pipes
    (site / "gallery" / "nb.html").write_text(
        _page(f'<div class="cell_output"><p>{TABLE_MD}</p></div>')
    )
    mathjax_cdn = "https://cdn.jsdelivr.net/npm/mathjax@4/tex-mml-chtml.js"
    (site / "math.html").write_text(
        _page(
            r'<p><span class="math notranslate nohighlight">\(x^2\)</span></p>',
            head=f'<script defer src="{mathjax_cdn}"></script>',
        )
    )
    problems = checker.check_site(site, notebooks, browser)
    expected = [
        "gallery/nb.html: 0 visible <table> element(s) in the cell outputs, but the notebook's "
        "outputs display 1 Markdown table(s)",
        "gallery/nb.html: a cell output shows 1 Markdown table(s) as text, first delimiter "
        "row: '|---|--:|'",
        "math.html: MathJax did not load, the mathematics shows as raw TeX",
        f"the site asked for a resource outside itself (blocked): {mathjax_cdn}",
    ]
    assert problems == expected


def test_rejects_hidden_tables_and_untypeset_tex(checker, browser, tmp_path):
    site, notebooks = tmp_path / "site", tmp_path / "notebooks"
    (site / "gallery").mkdir(parents=True)
    notebooks.mkdir()
    _notebook(notebooks / "nb.ipynb", [TABLE_MD])
    (site / "index.html").write_text(_page("<p>home</p>"))
    table = "<table><tr><th>a</th></tr><tr><td>1</td></tr></table>"
    (site / "gallery" / "nb.html").write_text(
        _page(f'<div class="cell_output" style="display: none">{table}</div>')
    )
    # a MathJax stand-in that typesets nothing
    stub = "window.MathJax = {startup: {promise: Promise.resolve()}};"
    (site / "math.html").write_text(
        _page(
            r'<span class="math">\(y\)</span><p>and $\alpha + 1$, written outside math</p>',
            head=f"<script>{stub}</script>",
        )
    )
    problems = checker.check_site(site, notebooks, browser)
    assert problems == [
        "gallery/nb.html: 0 visible <table> element(s) in the cell outputs, but the notebook's "
        "outputs display 1 Markdown table(s)",
        r"math.html: 1 of 1 math element(s) not rendered by MathJax (raw TeX left), first: '\\(y\\)'",
        r"math.html: TeX left as text outside the math elements: '$\\alpha + 1$'",
    ]


def _bundled_mathjax() -> Path:
    """The MathJax files the docs build serves (the sphinx-mathjax-offline package)."""
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        pytest.skip("sphinx-mathjax-offline is not installed (docs extra)")
    return Path(spec.origin).parent / "static" / "mathjax"


def test_accepts_rendered_tables_and_local_mathjax(checker, browser, tmp_path):
    site, notebooks = tmp_path / "site", tmp_path / "notebooks"
    (site / "gallery").mkdir(parents=True)
    notebooks.mkdir()
    _notebook(notebooks / "nb.ipynb", [TABLE_MD])
    (site / "_static").mkdir()
    (site / "_static" / "mathjax").symlink_to(_bundled_mathjax(), target_is_directory=True)
    (site / "index.html").write_text(_page("<p>home</p>"))
    table = "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>"
    (site / "gallery" / "nb.html").write_text(_page(f'<div class="cell_output">{table}</div>'))
    math = r'<span class="math">\(\sum_{k=1}^n x_k\)</span><div class="math">\[\frac{a}{b}\]</div>'
    (site / "math.html").write_text(
        _page(math, head='<script defer src="_static/mathjax/tex-chtml.js"></script>')
    )
    assert checker.check_site(site, notebooks, browser) == []
    # an undefined macro, under docs/conf.py's MathJax configuration, is a TeX error: it is
    # typeset as an error and reported with MathJax's message
    config = '<script>window.MathJax = {tex: {packages: {"[-]": ["noundefined"]}}}</script>'
    (site / "math.html").write_text(
        _page(
            r'<span class="math">\(x + \nosuchmacro\)</span>',
            head=config + '<script defer src="_static/mathjax/tex-chtml.js"></script>',
        )
    )
    assert checker.check_site(site, notebooks, browser) == [
        r"math.html: 1 MathJax error(s), first: 'Undefined control sequence \\nosuchmacro'"
    ]


def test_built_documentation_renders_offline(checker, browser):
    site = Path(os.environ.get("BMCZOO_DOCS_SITE", REPO / "docs" / "_build" / "html"))
    if not (site / "index.html").is_file():
        pytest.skip(f"no built documentation at {site}: build it with sphinx-build (docs/conf.py)")
    problems = checker.check_site(site, REPO / "notebooks", browser)
    assert not problems, (
        f"the documentation at {site} does not render (rebuild it if it is older than "
        "docs/conf.py):\n" + "\n".join(problems)
    )

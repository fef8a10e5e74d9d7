"""Check in a real headless browser, offline, that the built documentation renders.

The site is served from this machine (127.0.0.1) and the browser may load nothing else:
every other request is blocked, recorded and reported.  Then

* every gallery page whose notebook (``notebooks/NAME.ipynb``) displays Markdown tables
  (``text/markdown`` outputs) shows each of them as a visible ``<table>``, and no cell output
  shows a pipe table's text;
* every page with mathematics has MathJax's rendered output (``mjx-container``) in each of
  its math elements, no TeX left as text (in those elements or in the prose around them),
  no MathJax error and no script error.

Needs ``playwright`` (the ``docs`` extra) and a Chromium: Debian's ``chromium`` package, or
one given by ``--browser`` / ``BMCZOO_BROWSER`` (Playwright's own download is not needed)::

    pip install -e ".[docs]"
    apt-get install chromium
    sphinx-build -W --keep-going -q -b html docs docs/_build/html
    python scripts/check_docs_render.py docs/_build/html

Exit status: 0 when everything renders, 1 when something does not (each problem is
printed), 2 when the check cannot run (no built site, no Playwright, no browser).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Debian's /usr/bin/chromium is a shell wrapper around this binary (and prints noise)
_DEBIAN_CHROMIUM = Path("/usr/lib/chromium/chromium")
_BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# a Markdown table's delimiter row (|---|:--:|), also after Sphinx's smart quotes (— and –)
_PIPE_DELIMITER_ROW = re.compile(r"^\s*\|(\s*:?[-—–]+:?\s*\|)+\s*$", re.MULTILINE)
# the same in a page's text, where a paragraph's line breaks have become spaces
_PIPE_DELIMITER_TEXT = re.compile(r"(?:^|\s)\|(\s*:?[-—–]+:?\s*\|)+(?=\s|$)")
# how long one page may take to load and typeset (milliseconds)
_PAGE_TIMEOUT_MS = 60_000


class CannotCheck(RuntimeError):
    """The check cannot run here (no built site, no Playwright or no browser)."""


def find_browser(explicit: str | None = None) -> str:
    """Return the path of a Chromium executable to drive.

    Parameters
    ----------
    explicit : str or None
        A path given by the caller; else ``BMCZOO_BROWSER``, else Debian's Chromium, else
        the first of chromium, chromium-browser, google-chrome on ``PATH``.

    Returns
    -------
    str
        The executable's path.

    Raises
    ------
    CannotCheck
        When the given path is not an executable file, or no browser is found.
    """
    given = explicit or os.environ.get("BMCZOO_BROWSER")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise CannotCheck(f"browser {given!r} is not an executable file")
        return given
    if _DEBIAN_CHROMIUM.is_file() and os.access(_DEBIAN_CHROMIUM, os.X_OK):
        return str(_DEBIAN_CHROMIUM)
    for name in _BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise CannotCheck(
        "no Chromium found (looked for BMCZOO_BROWSER, " + ", ".join(_BROWSER_NAMES) + "): "
        "install one, e.g. `apt-get install chromium`, or pass --browser PATH"
    )


def markdown_table_counts(notebooks: Path) -> dict[str, int]:
    """Count the Markdown tables each notebook's stored outputs display.

    Parameters
    ----------
    notebooks : Path
        The folder of the notebooks (``NAME.ipynb``) the gallery renders.

    Returns
    -------
    dict of str to int
        ``{NAME: number of tables}`` for the notebooks with at least one table in a
        ``text/markdown`` output (a table is counted by its delimiter row).
    """
    counts = {}
    for path in sorted(notebooks.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        n = 0
        for cell in cells:
            for output in cell.get("outputs", []):
                text = output.get("data", {}).get("text/markdown", "")
                text = "".join(text) if isinstance(text, list) else text
                n += len(_PIPE_DELIMITER_ROW.findall(text))
        if n:
            counts[path.stem] = n
    return counts


def pages_with_math(site: Path) -> list[str]:
    """Return the site's pages (paths relative to ``site``) that hold Sphinx math elements.

    Parameters
    ----------
    site : Path
        The built HTML site.

    Returns
    -------
    list of str
        POSIX paths of the HTML pages whose source has an element of class ``math``.
    """
    pages = []
    for path in sorted(site.rglob("*.html")):
        if "_static" in path.relative_to(site).parts:
            continue
        if re.search(r'class="math[ "]', path.read_text(encoding="utf-8", errors="replace")):
            pages.append(path.relative_to(site).as_posix())
    return pages


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # the check reports what matters; the access log would bury it


@contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` over HTTP on 127.0.0.1 (a free port) while the context is open.

    Parameters
    ----------
    site : Path
        The folder to serve.

    Yields
    ------
    str
        The base URL, ending in ``/``.
    """
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


# In the page: the cell outputs' tables as Markdown renders them (DataFrames' HTML tables,
# class "dataframe", are not what this checks), each with its visibility and size.
_TABLES_JS = """() => {
    const tables = [...document.querySelectorAll('.cell_output table:not(.dataframe)')];
    return tables.map((t) => {
        const box = t.getBoundingClientRect();
        const style = getComputedStyle(t);
        return {visible: box.width > 0 && box.height > 0 && style.visibility !== 'hidden'
                         && style.display !== 'none', rows: t.rows.length};
    });
}"""
_OUTPUT_TEXT_JS = "() => [...document.querySelectorAll('.cell_output')].map((e) => e.innerText)"


def check_tables(page, name: str, expected: int) -> list[str]:
    """Check one loaded gallery page's Markdown tables.

    Parameters
    ----------
    page : playwright.sync_api.Page
        The page, loaded.
    name : str
        The page's name, for the messages.
    expected : int
        How many Markdown tables its notebook's outputs display.

    Returns
    -------
    list of str
        The problems found (empty when all tables render).
    """
    problems = []
    tables = page.evaluate(_TABLES_JS)
    shown = [t for t in tables if t["visible"] and t["rows"] > 1]
    if len(shown) < expected:
        problems.append(
            f"{name}: {len(shown)} visible <table> element(s) in the cell outputs, but the "
            f"notebook's outputs display {expected} Markdown table(s)"
        )
    for text in page.evaluate(_OUTPUT_TEXT_JS):
        raw = [m.group(0).strip() for m in _PIPE_DELIMITER_TEXT.finditer(text)]
        if raw:
            problems.append(
                f"{name}: a cell output shows {len(raw)} Markdown table(s) as text, "
                f"first delimiter row: {raw[0]!r}"
            )
    return problems


# In the page: wait for MathJax to finish typesetting, then describe each math element.
_MATH_JS = """async () => {
    if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) {
        return {loaded: false, math: []};
    }
    await MathJax.startup.promise;
    // TeX that MathJax did not typeset stays as the element's own text
    const math = [...document.querySelectorAll('.math')].map((e) => ({
        rendered: e.querySelector('mjx-container') !== null,
        error: (e.querySelector('mjx-merror') || {dataset: {}}).dataset.mjxError || null,
        raw: [...e.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE)
            .map((n) => n.textContent).join('').trim().slice(0, 80),
    }));
    // the page's prose: TeX written outside any math element was never typeset
    const prose = document.body.cloneNode(true);
    prose.querySelectorAll('pre, code, script, style, .math, mjx-container')
        .forEach((e) => e.remove());
    return {loaded: true, math: math, prose: prose.textContent};
}"""
_RAW_TEX = re.compile(r"\\\(|\\\[|\$")
# TeX delimiters in prose: \(...\), \[...\], $$...$$, or $...$ around a macro such as \alpha
_TEX_IN_PROSE = re.compile(
    r"\\\(.{1,200}?\\\)|\\\[.{1,400}?\\\]|\$\$.{1,400}?\$\$|\$(?=[^$\s])[^$]{0,200}?\\[A-Za-z]+[^$]{0,200}?\$",
    re.DOTALL,
)


def check_math(page, name: str) -> list[str]:
    """Check that MathJax rendered every math element of one loaded page.

    Parameters
    ----------
    page : playwright.sync_api.Page
        The page, loaded.
    name : str
        The page's name, for the messages.

    Returns
    -------
    list of str
        The problems found (empty when all mathematics renders).
    """
    # the page has loaded, so its (deferred) MathJax script has run if it could be fetched
    result = page.evaluate(_MATH_JS)
    if not result["loaded"]:
        return [f"{name}: MathJax did not load, the mathematics shows as raw TeX"]
    if not result["math"]:
        return [f"{name}: no math element found on the page"]
    problems = []
    raw = [m["raw"] for m in result["math"] if not m["rendered"] or _RAW_TEX.search(m["raw"])]
    if raw:
        problems.append(
            f"{name}: {len(raw)} of {len(result['math'])} math element(s) not rendered by "
            f"MathJax (raw TeX left), first: {raw[0]!r}"
        )
    tex = _TEX_IN_PROSE.search(result["prose"])
    if tex:
        problems.append(
            f"{name}: TeX left as text outside the math elements: {tex.group(0)[:80]!r}"
        )
    errors = [m["error"] for m in result["math"] if m["error"] is not None]
    if errors:
        problems.append(f"{name}: {len(errors)} MathJax error(s), first: {errors[0]!r}")
    return problems


def _visit(context, base: str, page_path: str, check) -> list[str]:
    """Open ``page_path`` in a new page of ``context``, run ``check`` on it, close it."""
    page = context.new_page()
    script_errors: list[str] = []
    page.on("pageerror", lambda exc: script_errors.append(str(exc)))
    try:
        response = page.goto(base + page_path, wait_until="load", timeout=_PAGE_TIMEOUT_MS)
        if response is None or not response.ok:
            status = "no response" if response is None else f"HTTP {response.status}"
            return [f"{page_path}: could not be opened ({status})"]
        problems = check(page)
    finally:
        page.close()
    return problems + [f"{page_path}: script error: {e}" for e in script_errors]


def check_site(site: Path, notebooks: Path, browser: str) -> list[str]:
    """Open the built site in headless Chromium, offline, and check tables and mathematics.

    Parameters
    ----------
    site : Path
        The built HTML site (``docs/_build/html``).
    notebooks : Path
        The notebooks the gallery renders (to know how many Markdown tables each shows).
    browser : str
        The Chromium executable (see `find_browser`).

    Returns
    -------
    list of str
        Every problem found; empty when the site renders its tables and mathematics.

    Raises
    ------
    CannotCheck
        When the site is not built, ``notebooks`` holds no notebook or Playwright is not
        installed.
    """
    if not (site / "index.html").is_file():
        raise CannotCheck(f"no built site at {site} (no index.html): build the docs first")
    if not any(notebooks.glob("*.ipynb")):
        raise CannotCheck(f"no notebook (*.ipynb) in {notebooks}: the gallery's tables need them")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise CannotCheck("Playwright is not installed: pip install -e '.[docs]'") from exc
    table_pages = {
        f"gallery/{stem}.html": n for stem, n in markdown_table_counts(notebooks).items()
    }
    missing = [p for p in table_pages if not (site / p).is_file()]
    math_pages = pages_with_math(site)
    problems = [f"{p}: page missing from the built site" for p in missing]
    if not math_pages:
        problems.append(f"no page of {site} holds mathematics: nothing to check")
    with serve(site) as base, sync_playwright() as pw:
        blocked: list[str] = []

        def route(r) -> None:  # the site itself, nothing else
            if r.request.url.startswith(base):
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort("blockedbyclient")

        chromium = pw.chromium.launch(executable_path=browser, headless=True)
        try:
            context = chromium.new_context()
            context.route("**/*", route)
            for page_path, n in table_pages.items():
                if page_path not in missing:
                    check = functools.partial(check_tables, name=page_path, expected=n)
                    problems += _visit(context, base, page_path, check)
            for page_path in math_pages:
                check = functools.partial(check_math, name=page_path)
                problems += _visit(context, base, page_path, check)
        finally:
            chromium.close()
    for url in sorted(set(blocked)):
        problems.append(f"the site asked for a resource outside itself (blocked): {url}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run the check from the command line; return the exit status (0, 1 or 2).

    Parameters
    ----------
    argv : list of str or None
        The arguments (``sys.argv[1:]`` when None).

    Returns
    -------
    int
        0 when the site renders, 1 when it does not, 2 when the check cannot run.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "site",
        nargs="?",
        type=Path,
        default=ROOT / "docs" / "_build" / "html",
        help="the built HTML site (default: docs/_build/html)",
    )
    parser.add_argument(
        "--notebooks",
        type=Path,
        default=ROOT / "notebooks",
        help="the notebooks the gallery renders (default: notebooks/)",
    )
    parser.add_argument("--browser", help="Chromium executable (default: BMCZOO_BROWSER or PATH)")
    args = parser.parse_args(argv)
    try:
        browser = find_browser(args.browser)
        problems = check_site(args.site, args.notebooks, browser)
    except CannotCheck as exc:
        print(f"check_docs_render: cannot check: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"check_docs_render: FAIL: {problem}", file=sys.stderr)
    if problems:
        return 1
    counts = markdown_table_counts(args.notebooks)
    print(
        f"check_docs_render: OK ({browser}, offline): {sum(counts.values())} Markdown table(s) "
        f"on {len(counts)} gallery page(s) and the mathematics of "
        f"{len(pages_with_math(args.site))} page(s) render"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The documentation's examples run: every ```python block of README.md and of the
Markdown pages under docs/ is executed, so that an example cannot drift from the code.

The blocks of one file run in order in one namespace (a page's later blocks use what its
earlier ones built), in a temporary working directory.  MovieLens 100K is read from the
repository's neighbour ``../shared/data/ml-100k`` (or ``$BMCZOO_ML100K``: the ``ml100k``
fixture of tests/conftest.py) through the loader's own cache folder, so
``load_movielens("100k")`` runs as written without a download; a file that needs it is
skipped, saying how to provide the data, when it is absent.  Blocks fenced as
```bash, ```text or ```{code-block} are not run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Pages whose examples run in seconds (no model is fitted) are in the default suite; the
# others fit models (15 s to minutes each on a 2-core CPU, mostly compilation) and are slow.
FAST = {"docs/user-guide/data.md"}

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(path: Path) -> list[str]:
    """The ```python blocks of a Markdown file, in order."""
    return [m.group(1) for m in _FENCE.finditer(path.read_text(encoding="utf-8"))]


def _documents() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
    return [p for p in [ROOT / "README.md", *docs] if python_blocks(p)]


def _param(path: Path):
    rel = path.relative_to(ROOT).as_posix()
    marks = [] if rel in FAST else [pytest.mark.slow]
    return pytest.param(path, id=rel, marks=marks)


def test_extractor_finds_the_readme_examples():
    """The README's quick start and the paper's priors example are found (a renamed
    fence or a broken pattern would otherwise make every test below vacuous)."""
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) >= 2
    assert any("bmc.fit(" in b and "load_movielens" in b for b in blocks)


@pytest.mark.parametrize("path", [_param(p) for p in _documents()])
def test_examples_run(path: Path, tmp_path, monkeypatch, request):
    source = path.read_text(encoding="utf-8")
    if "load_movielens" in source or "ml-100k" in source:
        ml100k = request.getfixturevalue("ml100k")  # skips where the data is absent
        # the loader's cache layout: <root>/movielens/ml-100k/u.data
        (tmp_path / "cache" / "movielens").mkdir(parents=True)
        (tmp_path / "cache" / "movielens" / "ml-100k").symlink_to(
            ml100k.resolve(), target_is_directory=True
        )
        monkeypatch.setenv("BMCZOO_CACHE", str(tmp_path / "cache"))
    # enable_compilation_cache() in an example keeps the suite's compilation cache
    import bmczoo._cache

    suite_cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if suite_cache:
        monkeypatch.setattr(
            bmczoo._cache, "default_compilation_cache_dir", lambda: Path(suite_cache)
        )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__docs_example__"}
    for i, block in enumerate(python_blocks(path)):
        code = compile(block, f"{path.relative_to(ROOT)} [python block {i + 1}]", "exec")
        exec(code, namespace)

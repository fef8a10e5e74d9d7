"""Docstrings and comments say what the code is and why, not its history: timings, before ->
after figures and earlier versions belong in commit messages and benchmark outputs.

The patterns are those found and removed; each names what it catches.  Error messages and
other string values are not read (a message may well tell a user about an old file)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bmczoo"

PATTERNS = {
    "a before -> after figure": re.compile(r"\d[\d.,]*\s*(?:->|→)\s*\d"),
    "a speed comparison": re.compile(
        r"\btimes as (?:long|fast)\b|\b\d+(?:\.\d+)?\s*x (?:faster|slower)\b"
        r"|\btook \d|\b\d+(?:\.\d+)? times (?:faster|slower)\b"
    ),
    "earlier versions": re.compile(
        r"\b(?:earlier|previous) versions?\b|\bbefore the fix\b|\bused to be\b"
    ),
}


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and (
            doc := ast.get_docstring(node, clean=False)
        ):
            yield node.body[0].lineno, doc


def _comments(text: str):
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def prose(path: Path) -> list[tuple[int, str]]:
    """The docstrings and comments of one module, with their first line numbers."""
    text = path.read_text(encoding="utf-8")
    return [*_docstrings(ast.parse(text)), *_comments(text)]


def offending(path: Path) -> list[str]:
    found = []
    for line, chunk in prose(path):
        flat = " ".join(chunk.replace("#", " ").split())
        for what, pattern in PATTERNS.items():
            if m := pattern.search(flat):
                found.append(f"{path.relative_to(SRC.parent)}:{line}: {what}: {m.group(0)!r}")
    return found


def test_no_history_in_docstrings_or_comments():
    found = [f for p in sorted(SRC.rglob("*.py")) for f in offending(p)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        '"""ESS of the rank 1451 -> 2381."""\n',
        "# four chains took 1.5 times as long stacked\nx = 1\n",
        "def f():\n    '''The draws of earlier versions up to rounding.'''\n",
    ],
)
def test_patterns_catch_the_removed_text(tmp_path, text):
    probe = tmp_path / "probe.py"
    probe.write_text(text, encoding="utf-8")
    flat = [" ".join(c.replace("#", " ").split()) for _, c in prose(probe)]
    assert any(p.search(t) for p in PATTERNS.values() for t in flat), flat


def test_error_messages_are_not_read(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('raise ValueError("written by an earlier version")\n', encoding="utf-8")
    assert prose(probe) == []

"""The scaffolding of the tests that prove an extension takes one file (a prior, a
likelihood, a sweep option): a copy of the installed package with that change alone, and
fresh interpreters run on the copy side by side."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import bmczoo


def _python_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*.py") if "__pycache__" not in p.parts}


def copy_package(tmp_path: Path, change: Callable[[Path], None]) -> tuple[Path, set[Path]]:
    """The package copied to ``tmp_path / "bmczoo"`` and ``change(copy)`` applied; returns
    the copy and the Python files the change added or edited (relative to the package)."""
    pkg = Path(bmczoo.__file__).parent
    dst = tmp_path / "bmczoo"
    shutil.copytree(pkg, dst, ignore=shutil.ignore_patterns("__pycache__"))
    change(dst)
    before, after = _python_files(pkg), _python_files(dst)
    assert before <= after, before - after
    edited = {p for p in before if not filecmp.cmp(pkg / p, dst / p, shallow=False)}
    return dst, (after - before) | edited


def child_env(tmp_path: Path) -> dict:
    """The children's environment: the copy first on the path, CPU JAX, a private home; the
    suite's compile options and compilation cache (tests/conftest.py) carry over."""
    env = {
        "PYTHONPATH": str(tmp_path),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAX_PLATFORMS": "cpu",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(tmp_path / "mpl"),
        "HOME": str(tmp_path),
    }
    env.update(
        {
            k: v
            for k, v in os.environ.items()
            if k == "XLA_FLAGS" or k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
        }
    )
    return env


def run_side_by_side(runs: dict[str, list[str]], tmp_path: Path) -> dict[str, str]:
    """Run each command of ``runs`` (name -> argv) at once in ``tmp_path`` with
    :func:`child_env`; each must exit 0.  Returns each command's standard output."""
    env = child_env(tmp_path)
    procs = {
        name: subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env
        )
        for name, argv in runs.items()
    }
    outs = {name: (p.communicate(timeout=600), p.returncode) for name, p in procs.items()}
    for name, ((out, err), rc) in outs.items():
        assert rc == 0, f"{name}: exit {rc}\n{out[-2000:]}\n{err[-3000:]}"
    return {name: out for name, ((out, _), _) in outs.items()}

"""The sdist and the wheel that ``python -m build`` made (CI): what each must carry.

Usage: ``python .ci/check_dist.py DIST_FOLDER``.  The sdist carries the compiled kernel's
source and the build files (a wheel is built from it); the wheel carries the package, the
console command and, on Linux and macOS, the kernel built for its Python.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path


def main(folder: str) -> int:
    dist = Path(folder)
    (sdist,) = dist.glob("bmczoo-*.tar.gz")
    (wheel,) = dist.glob("bmczoo-*.whl")
    root = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as tar:
        in_sdist = {name.removeprefix(root + "/") for name in tar.getnames()}
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
        entry_points = next(zf.read(n) for n in in_wheel if n.endswith("entry_points.txt"))
    problems = []
    for need in ("src/bmczoo/_gram.cc", "setup.py", "pyproject.toml", "README.md"):
        if need not in in_sdist:
            problems.append(f"the sdist lacks {need}")
    problems += [f"the sdist holds a built file {n}" for n in in_sdist if n.endswith(".so")]
    for need in ("bmczoo/__init__.py", "bmczoo/cli/__init__.py", "bmczoo/_native.py"):
        if need not in in_wheel:
            problems.append(f"the wheel lacks {need}")
    if sys.platform != "win32" and not any(
        n.startswith("bmczoo/_gram_cpu") and n.endswith((".so", ".pyd")) for n in in_wheel
    ):
        problems.append("the wheel lacks the compiled kernel (bmczoo/_gram_cpu*)")
    if b"bmczoo = bmczoo.cli:main" not in entry_points:
        problems.append("the wheel does not declare the bmczoo command")
    for p in problems:
        print(f"check_dist: {p}", file=sys.stderr)
    if not problems:
        print(f"check_dist: {sdist.name} ({len(in_sdist)} files), {wheel.name} ({len(in_wheel)})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

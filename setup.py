"""The optional compiled CPU kernel of the Gibbs sweep (``src/bmczoo/_gram.cc``, an XLA FFI
custom call; ``bmczoo._native`` loads it).  Everything else is in ``pyproject.toml``.

The kernel needs a C++17 compiler and the XLA FFI headers that ship with jaxlib (a build
requirement); without either, on Windows, or with ``BMCZOO_NO_NATIVE`` set at build
time, the package installs without it and the sweep uses JAX's sparse product
(``bmczoo.linalg.resolve_hot_path``)."""

import importlib.util
import os
import sys

from setuptools import Extension, setup


def _ffi_include() -> str | None:
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = os.path.join(list(spec.submodule_search_locations)[0], "include")
    return include if os.path.isfile(os.path.join(include, "xla", "ffi", "api", "ffi.h")) else None


def _extensions() -> list[Extension]:
    include = _ffi_include()
    if include is None or sys.platform == "win32" or os.environ.get("BMCZOO_NO_NATIVE"):
        return []
    return [
        Extension(
            "bmczoo._gram_cpu",
            ["src/bmczoo/_gram.cc"],
            include_dirs=[include],
            extra_compile_args=["-std=c++17", "-O3", "-fvisibility=hidden"],
            language="c++",
            optional=True,  # a failed build leaves the JAX path, not a failed install
        )
    ]


setup(ext_modules=_extensions())

"""The optional compiled CPU kernel of the Gibbs sweep (``src/bmczoo/_gram.cc``, an XLA FFI
custom call; ``bmczoo._native`` loads it).  Everything else is in ``pyproject.toml``.

The kernel needs a C++17 compiler and the XLA FFI headers that ship with jaxlib (a build
requirement, in the range the runtime accepts).  ``BMCZOO_NATIVE`` (see ``bmczoo._native``)
decides at build time as at run time: unset or ``auto``, a build that cannot make the kernel
(no headers, no compiler, Windows) installs without it and the sweep uses JAX's sparse
product; ``0``, the kernel is not built; ``1``, a build without it fails."""

import importlib.util
import os
import sys

from setuptools import Extension, setup

_MODES = {  # bmczoo._native.MODES (the package cannot be imported before it is built)
    "auto": ("", "auto"),
    "off": ("0", "off", "false", "no"),
    "required": ("1", "on", "true", "yes", "required", "require"),
}


def _mode() -> str:
    word = os.environ.get("BMCZOO_NATIVE", "").strip().lower()
    for name, words in _MODES.items():
        if word in words:
            return name
    raise SystemExit(f"BMCZOO_NATIVE={word!r}: expected 0, 1, auto or unset")


def _ffi_include() -> str | None:
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = os.path.join(list(spec.submodule_search_locations)[0], "include")
    return include if os.path.isfile(os.path.join(include, "xla", "ffi", "api", "ffi.h")) else None


def _extensions() -> list[Extension]:
    mode = _mode()
    if mode == "off":
        return []
    include = _ffi_include()
    if include is None or sys.platform == "win32":
        if mode == "required":
            why = (
                "on Windows" if sys.platform == "win32" else "jaxlib's XLA FFI headers are missing"
            )
            raise SystemExit(f"BMCZOO_NATIVE=1: the compiled Gram kernel cannot be built ({why})")
        return []
    return [
        Extension(
            "bmczoo._gram_cpu",
            ["src/bmczoo/_gram.cc"],
            include_dirs=[include],
            extra_compile_args=["-std=c++17", "-O3", "-fvisibility=hidden"],
            language="c++",
            # auto: a failed build leaves the JAX path, not a failed install
            optional=mode != "required",
        )
    ]


setup(ext_modules=_extensions())

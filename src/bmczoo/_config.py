"""What this installation of bmczoo runs on: versions, JAX's devices, the sweep's hot path
and the compiled kernel (:func:`show_config`, ``bmczoo info``).

The information is collected as plain data first (:func:`config`) and printed at the edge.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import IO, Any

__all__ = ["config", "show_config", "DEPENDENCIES"]

#: the distributions whose versions are reported (the runtime dependencies, then SciPy,
#: which the tests and some benchmarks use)
DEPENDENCIES = (
    "jax",
    "jaxlib",
    "numpy",
    "numpyro",
    "arviz",
    "optax",
    "matplotlib",
    "h5netcdf",
    "h5py",
    "tqdm",
    "threadpoolctl",
    "scipy",
)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def config() -> dict[str, Any]:
    """This installation's configuration as a dictionary of plain values.

    Returns
    -------
    dict
        ``bmczoo`` (its version), ``python``, ``platform``, ``dependencies`` (name ->
        version, None when not installed), ``backend`` (JAX's default backend),
        ``devices`` (their descriptions), ``x64`` (whether float64 is enabled),
        ``hot_path`` (the setting and what it resolves to on the default backend),
        ``kernel`` (``loaded``, ``detail``: the library's path or why it is not in use,
        ``setting``: ``BMCZOO_NATIVE``'s mode) and ``compilation_cache`` (JAX's persistent
        cache folder, None when off).
    """
    import jax

    from . import __version__, _native, linalg

    loaded, detail = _native.status()
    try:
        setting = _native.mode()
    except ValueError as e:  # reported, not raised: this is where a user looks for it
        setting = f"invalid ({e})"
    try:
        resolved = linalg.resolve_hot_path()
    except (ValueError, RuntimeError) as e:
        resolved = f"unavailable ({e})"
    return {
        "bmczoo": __version__,
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.machine()}",
        "dependencies": {name: _version(name) for name in DEPENDENCIES},
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
        "hot_path": {"setting": linalg.get_hot_path(), "resolved": resolved},
        "kernel": {"loaded": loaded, "detail": detail, "setting": setting},
        "compilation_cache": jax.config.jax_compilation_cache_dir or None,
        "cpu_count": os.cpu_count(),
    }


def show_config(file: IO[str] | None = None) -> None:
    """Print the versions, JAX's devices, the sweep's hot path and whether the compiled
    kernel loaded (what a bug report needs).

    Parameters
    ----------
    file : text stream, optional
        Where to print (default: ``sys.stdout``).

    Examples
    --------
    >>> import bmczoo as bmc
    >>> bmc.show_config()  # doctest: +SKIP
    bmczoo 0.1.0 (Python 3.11.7, Linux x86_64, 2 CPUs)
    ...
    """
    c = config()
    deps = ", ".join(f"{k} {v}" for k, v in c["dependencies"].items() if v is not None)
    missing = [k for k, v in c["dependencies"].items() if v is None]
    kernel = c["kernel"]
    lines = [
        f"bmczoo {c['bmczoo']} (Python {c['python']}, {c['platform']}, {c['cpu_count']} CPUs)",
        f"dependencies: {deps}" + (f"; not installed: {', '.join(missing)}" if missing else ""),
        f"JAX backend: {c['backend']}; devices: {', '.join(c['devices'])}; "
        f"float64 {'enabled' if c['x64'] else 'disabled'}",
        f"hot path: {c['hot_path']['setting']} -> {c['hot_path']['resolved']}",
        f"compiled Gram kernel (BMCZOO_NATIVE: {kernel['setting']}): "
        + (f"loaded from {kernel['detail']}" if kernel["loaded"] else kernel["detail"]),
        f"compilation cache: {c['compilation_cache'] or 'off'}",
    ]
    print("\n".join(lines), file=sys.stdout if file is None else file)

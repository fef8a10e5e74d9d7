"""bmczoo: a model zoo for Bayesian low-rank matrix completion on NumPyro + JAX.

Implements "Bayesian matrix completion: prior specification" (Alquier, Cottet, Chopin,
Rousseau): the fixed, inverse-gamma, gamma and discrete (spike-and-slab) priors, fast
conjugate Gibbs kernels, closed-form VB, NumPyro SVI/NUTS baselines, ArviZ diagnostics.
"""

# The subpackages and names below are imported on first use (PEP 562), not here: importing
# them pulls in JAX, and the command line installs its Ctrl-C handling before that happens
# (a KeyboardInterrupt raised inside JAX's import or XLA's callbacks can be swallowed).
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import _xla

_xla.configure()
_xla.configure_pool()

__version__ = "0.1.0"

_SUBMODULES = (
    "data",
    "datasets",
    "diagnostics",
    "evaluation",
    "inference",
    "likelihoods",
    "linalg",
    "models",
    "offsets",
    "priors",
)
_NAMES = {
    "RatingData": "data",
    "TensorData": "data",
    "fit": "inference",
    "load": "inference.saving",
    "enable_compilation_cache": "_cache",
    "show_config": "_config",
    "SettingsError": "inference.errors",
}

__all__ = [
    "RatingData",
    "TensorData",
    "fit",
    "load",
    "enable_compilation_cache",
    "show_config",
    "SettingsError",
    "evaluation",
    "data",
    "datasets",
    "diagnostics",
    "inference",
    "likelihoods",
    "linalg",
    "models",
    "offsets",
    "priors",
    "__version__",
]

if TYPE_CHECKING:  # static analysers and IDEs see the eager imports
    from . import (
        data,
        datasets,
        diagnostics,
        evaluation,
        inference,
        likelihoods,
        linalg,
        models,
        offsets,
        priors,
    )
    from ._cache import enable_compilation_cache
    from ._config import show_config
    from .data import RatingData, TensorData
    from .inference import fit
    from .inference.errors import SettingsError
    from .inference.saving import load


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""The prior zoo on the column scales ``gamma_h`` of ``M`` and ``N``.

Each prior lives in its own module; a fifth one is one more module with a
:class:`~bmczoo.priors.base.Prior` subclass (and its tests).
"""

from .base import Prior, VBGamma
from .discrete import ColumnSpikeSlabNormal, Discrete
from .fixed import Fixed
from .gamma import Gamma
from .inverse_gamma import InverseGamma

__all__ = ["Prior", "VBGamma", "Fixed", "InverseGamma", "Gamma", "Discrete", "ColumnSpikeSlabNormal", "get_prior"]


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def get_prior(name: str, **hyper) -> Prior:
    """Instantiate a prior by its ``name`` (``"fixed"``, ``"inverse-gamma"``, ``"gamma"``,
    ``"discrete"``, or any registered subclass), e.g. ``get_prior("discrete", eps=0.07)``."""
    key = name.lower().replace("_", "-")
    for sub in _all_subclasses(Prior):
        if sub.name == key:
            return sub(**hyper)
    known = sorted(s.name for s in _all_subclasses(Prior))
    raise ValueError(f"unknown prior {name!r}; known: {', '.join(known)}")

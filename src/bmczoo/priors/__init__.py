"""The prior zoo on the column scales ``gamma_h`` of ``M`` and ``N``.

Each prior lives in its own module of this package with one
:class:`~bmczoo.priors.base.Prior` subclass.  Every module here is imported and every
subclass exported under its class name, so a fifth prior is one new module (plus its
tests): ``bmc.priors.MyPrior`` and ``get_prior("my-prior")`` then find it.
"""

import dataclasses
import inspect

from .._components import all_subclasses, export_components

from .base import Prior, VBGamma
from .discrete import ColumnSpikeSlabNormal, Discrete
from .fixed import Fixed
from .gamma import Gamma
from .inverse_gamma import InverseGamma

__all__ = [
    "Prior",
    "VBGamma",
    "Fixed",
    "InverseGamma",
    "Gamma",
    "Discrete",
    "ColumnSpikeSlabNormal",
    "get_prior",
    "registry",
]

export_components(__name__, __path__, Prior, globals(), skip=("base",))


def registry() -> dict[str, type[Prior]]:
    """Every prior class of the zoo by its ``name`` (in the order the modules are found):
    what the command line offers and the experiments can run.  A subclass that keeps its
    parent's name (a variant defined elsewhere, e.g. in a test) does not replace the parent:
    the first class of each name counts, as in :func:`get_prior`."""
    out: dict[str, type[Prior]] = {}
    for sub in all_subclasses(Prior):
        if sub.name and not inspect.isabstract(sub):
            out.setdefault(sub.name, sub)
    return out


def get_prior(name: str, **hyper) -> Prior:
    """Instantiate a prior by its ``name`` (``"fixed"``, ``"inverse-gamma"``, ``"gamma"``,
    ``"discrete"``, or any other subclass's), e.g. ``get_prior("discrete", eps=0.07)``.

    Parameters
    ----------
    name : str
        The prior's ``name`` (case-insensitive; ``_`` for ``-`` accepted).
    **hyper
        Its hyper-parameters.
    """
    if not isinstance(name, str):
        raise TypeError(f"prior name must be a string, got {name!r}")
    key = name.lower().replace("_", "-")
    for sub in all_subclasses(Prior):
        if sub.name == key:
            fields = [f.name for f in dataclasses.fields(sub)]
            unknown = sorted(set(hyper) - set(fields))
            if unknown:
                raise ValueError(
                    f"{sub.__name__} has no hyper-parameter {', '.join(unknown)}; it has {', '.join(fields)}"
                )
            return sub(**hyper)
    known = sorted(s.name for s in all_subclasses(Prior) if s.name)
    raise ValueError(f"unknown prior {name!r}; known: {', '.join(known)}")

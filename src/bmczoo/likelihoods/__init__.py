"""Likelihood components: the observation model of the ratings given ``theta``.

Each likelihood lives in its own module with one :class:`~bmczoo.likelihoods.base.Likelihood`
subclass.  Every module here is imported and every subclass exported under its class name,
so a new likelihood is one new module (plus its tests): ``bmc.likelihoods.MyLikelihood``,
:func:`get_likelihood` and :func:`registry` then find it.  Today: :class:`Tempered` (the
paper's, the default), :class:`LearnedNoise`, :class:`StudentT` (robust noise), and the
latent-Gaussian :class:`Probit` (binary) and :class:`OrderedProbit` (ordinal levels), and
:class:`OneClass` (implicit feedback: every pair observed).
"""

import dataclasses

from .._components import all_subclasses, export_components

from .base import Likelihood
from .learned_noise import LearnedNoise
from .one_class import OneClass
from .probit import LatentLikelihood, OrderedProbit, Probit
from .student_t import StudentT
from .tempered import Tempered

__all__ = [
    "Likelihood",
    "Tempered",
    "LearnedNoise",
    "Probit",
    "OrderedProbit",
    "LatentLikelihood",
    "StudentT",
    "OneClass",
    "get_likelihood",
    "registry",
]

export_components(__name__, __path__, Likelihood, globals(), skip=("base", "truncnorm"))


def registry() -> dict[str, type[Likelihood]]:
    """Every likelihood class by its ``name``."""
    return {sub.name: sub for sub in all_subclasses(Likelihood) if sub.name}


def get_likelihood(name: str, **settings) -> Likelihood:
    """Instantiate a likelihood by name, e.g. ``get_likelihood("tempered", noise_sd=0.9)``.

    Parameters
    ----------
    name : str
        The likelihood's ``name`` (case-insensitive; ``_`` for ``-`` accepted).
    **settings
        Its settings.
    """
    if not isinstance(name, str):
        raise TypeError(f"likelihood name must be a string, got {name!r}")
    cls = registry().get(name.lower().replace("_", "-"))
    if cls is None:
        raise ValueError(f"unknown likelihood {name!r}; known: {', '.join(sorted(registry()))}")
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(settings) - set(fields))
    if unknown:
        raise ValueError(
            f"{cls.__name__} has no setting {', '.join(unknown)}; it has {', '.join(fields)}"
        )
    return cls(**settings)

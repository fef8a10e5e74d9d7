"""Likelihood components: the observation model of the ratings given ``theta``.

Each likelihood lives in its own module with one :class:`~bmczoo.likelihoods.base.Likelihood`
subclass; :func:`get_likelihood` and :func:`registry` find them by ``name``.
Today: :class:`Tempered` (the paper's, the default), :class:`LearnedNoise`, and the
latent-Gaussian :class:`Probit` (binary) and :class:`OrderedProbit` (ordinal levels).
"""

import dataclasses

from .base import Likelihood
from .learned_noise import LearnedNoise
from .probit import LatentLikelihood, OrderedProbit, Probit
from .tempered import Tempered

__all__ = [
    "Likelihood",
    "Tempered",
    "LearnedNoise",
    "Probit",
    "OrderedProbit",
    "LatentLikelihood",
    "get_likelihood",
    "registry",
]


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def registry() -> dict[str, type[Likelihood]]:
    """Every likelihood class by its ``name``."""
    return {sub.name: sub for sub in _all_subclasses(Likelihood) if sub.name}


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

"""What every fit records about its model and run (:class:`FitInfo`), and the ``q_gamma``
placeholder of a VB fit whose prior has no column scales (:func:`no_gamma`): below the
result classes, which hold them, and the file layer, which writes and reads them."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..likelihoods import Likelihood
from ..offsets import Shift
from ..priors import Prior
from .settings import Settings

__all__ = ["FitInfo", "no_gamma"]


@dataclasses.dataclass(frozen=True)
class FitInfo:
    """What every fit records about its model and run (typed; no dict between modules).

    Attributes
    ----------
    method : "gibbs", "vb", "svi", "nuts" or "map".
    prior, likelihood : the model's components.
    K : latent dimension.  shape : (m1, m2).
    shift : the map from ``theta`` to predictions (centring offset, clipping).
    center : whether the data were centred.  seed : the PRNG seed.  dtype : float dtype name.
    settings : the :mod:`~bmczoo.inference.settings` object the fit ran with.
    tau : the likelihood precision of the factor blocks (the starting value when the
        likelihood learns it).
    biases : the :class:`~bmczoo.offsets.Biases` component, or None (no biases).
    offsets : the sampled offsets (:class:`~bmczoo.offsets.Offset`, such as
        :class:`~bmczoo.offsets.Context`), a tuple (empty: none).
    """

    method: str
    prior: Prior
    likelihood: Likelihood
    K: int
    shape: tuple[int, int]
    shift: Shift
    center: bool
    seed: int
    dtype: str
    settings: Settings
    tau: float
    biases: Any = None
    offsets: tuple = ()

    def as_dict(self) -> dict[str, Any]:
        lik = self.likelihood.describe()
        return {
            "method": self.method,
            "prior": self.prior,
            "prior_name": self.prior.name,
            "hyperparameters": self.prior.hyperparameters(),
            "K": self.K,
            "lam": lik.get("lam"),
            "noise_sd": lik.get("noise_sd"),
            "likelihood": lik,
            "tau": self.tau,
            "center": self.center,
            "biases": None if self.biases is None else self.biases.describe(),
            **({"offsets": [o.describe() for o in self.offsets]} if self.offsets else {}),
            "offset": self.shift.offset,
            "clip": self.shift.clip,
            "seed": self.seed,
            "dtype": self.dtype,
            **self.settings.as_dict(),
        }


class _NoGamma(dict):
    """``VBFit.q_gamma`` of a prior without column scales: empty, and any item access
    raises ``ValueError`` naming the prior and where its q parameters are."""

    def __init__(self, prior_name: str):
        super().__init__()
        self.prior_name = prior_name

    def __missing__(self, key):
        raise ValueError(
            f"the {self.prior_name} prior has no column scales gamma_h, so q(gamma) has no "
            f"{key!r}; its variational parameters are in VBFit.q_prior"
        )


def no_gamma(prior) -> dict:
    """The ``q_gamma`` of a VB fit whose prior has no column scales."""
    return _NoGamma(prior.name)

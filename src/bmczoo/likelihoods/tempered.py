"""The paper's tempered Gaussian likelihood ``exp(-(lam/n) sum_k (Y_k - theta_k)^2)``."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .._checks import check_real
from .base import Likelihood

__all__ = ["Tempered"]


@dataclasses.dataclass(frozen=True)
class Tempered(Likelihood):
    """Gaussian likelihood with a fixed precision ``tau = 2 lam / n`` (docs/algorithms.md,
    "The model").

    ``lam = None`` means ``lam = n / (2 noise_sd^2)``: the ordinary posterior under
    N(0, noise_sd^2) noise, ``tau = 1 / noise_sd^2``; a smaller ``lam`` is the PAC-Bayes
    tempered posterior.  The NumPyro site ``obs`` is ``Normal(theta, 1/sqrt(tau))``, which
    differs from the tempered likelihood by a constant only.

    Parameters
    ----------
    lam : float > 0, optional
        Temperature.
    noise_sd : float > 0
        Noise standard deviation used when ``lam`` is None (checked in both cases: a bad
        value is a mistake even where it is unused).
    """

    lam: float | None = None
    noise_sd: float = 1.0
    name = "tempered"
    cli_help = "the paper's Gaussian, fixed noise"

    def __post_init__(self):
        object.__setattr__(
            self, "noise_sd", check_real("noise_sd", self.noise_sd, low=0.0, low_open=True)
        )
        if self.lam is not None:
            object.__setattr__(self, "lam", check_real("lam", self.lam, low=0.0, low_open=True))

    def precision(self, n: int) -> float:
        if self.lam is None:
            return 1.0 / self.noise_sd**2
        return 2.0 * self.lam / n

    def sample_obs(self, mean, n, obs):
        return numpyro.sample("obs", dist.Normal(mean, 1.0 / jnp.sqrt(self.precision(n))), obs=obs)

"""The interface every prior on the column scales ``gamma_h`` implements.

A prior is a small frozen dataclass of hyper-parameters (hashable, so it can be a static
argument of a jitted function) providing three things:

* its NumPyro sample statements (:meth:`Prior.sample_latents`): ``gamma`` then the
  columns of ``M`` and ``N``;
* its exact Gibbs conditional (:meth:`Prior.sample_conditional`) of ``gamma`` given
  ``S_h = ||M_h||^2 + ||N_h||^2``;
* its mean-field VB update (:meth:`Prior.vb_update`): ``E_q[1/gamma_h]`` and the
  log-normaliser that enters the ELBO.

Adding a prior means writing one module with one subclass and registering nothing else:
:func:`bmczoo.priors.get_prior` finds subclasses by their ``name``.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["Prior", "VBGamma", "check_positive", "set_fields"]

LOG_2PI = math.log(2.0 * math.pi)


def as_real_scalar(owner: str, name: str, value) -> float:
    """``value`` as a Python float, or ``ValueError`` unless it is a real (int or float)
    scalar: bools, complex numbers, strings and arrays with elements are rejected."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}")
    try:
        arr = np.asarray(value)
    except Exception:
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}") from None
    if arr.shape != () or arr.dtype.kind not in "iuf":
        raise ValueError(f"{owner}: {name} must be a real number, got {value!r}")
    return float(arr)


def check_positive(owner: str, **params) -> dict[str, float]:
    """Each parameter as a float; ``ValueError`` unless it is a finite real number > 0."""
    out = {}
    for name, value in params.items():
        v = as_real_scalar(owner, name, value)
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{owner}: {name} must be finite and > 0, got {value!r}")
        out[name] = v
    return out


def set_fields(obj, values: dict[str, float]) -> None:
    """Store validated floats on a frozen dataclass (hashable, usable as a static argument)."""
    for name, v in values.items():
        object.__setattr__(obj, name, v)


class VBGamma(NamedTuple):
    """Result of a prior's VB update for ``q(gamma_h)``, all arrays of shape (..., K).

    Attributes
    ----------
    inv_mean : E_q[1/gamma_h], the weights that enter the row precisions.
    log_normalizer : log of ``Z_h = int p(g) g^(-d/2) exp(-E[S_h] / (2 g)) dg``; at the
        optimal ``q(gamma_h)`` the gamma part of the ELBO equals
        ``log_normalizer - (d/2) log(2 pi)`` (summed over h).
    params : the parameters of ``q(gamma_h)`` (prior-specific names).
    """

    inv_mean: jax.Array
    log_normalizer: jax.Array
    params: dict


@dataclasses.dataclass(frozen=True)
class Prior(abc.ABC):
    """Base class of the zoo's priors on ``gamma_h`` (iid over ``h = 1..K``)."""

    name: ClassVar[str] = ""

    # ------------------------------------------------------------------ NumPyro
    @abc.abstractmethod
    def sample_gamma(self, K: int, d: int) -> jax.Array:
        """NumPyro sample statement for the site ``"gamma"`` (shape (K,))."""

    def sample_latents(self, m1: int, m2: int, K: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """NumPyro sample statements for ``gamma``, ``M`` (m1 x K) and ``N`` (m2 x K).

        ``M[:, h] ~ N(0, gamma_h I)`` and ``N[:, h] ~ N(0, gamma_h I)`` given gamma.
        """
        gamma = self.sample_gamma(K, m1 + m2)
        scale = jnp.sqrt(gamma)
        M = numpyro.sample("M", dist.Normal(0.0, scale).expand([m1, K]).to_event(2))
        N = numpyro.sample("N", dist.Normal(0.0, scale).expand([m2, K]).to_event(2))
        return gamma, M, N

    # ------------------------------------------------------------------ Gibbs
    @abc.abstractmethod
    def sample_conditional(self, key: jax.Array, S: jax.Array, d: int) -> jax.Array:
        """Draw ``gamma`` from its conditional given ``S`` (shape (..., K)), with ``d = m1 + m2``."""

    # ------------------------------------------------------------------ VB
    @abc.abstractmethod
    def vb_update(self, ES: jax.Array, d: int) -> VBGamma:
        """Optimal ``q(gamma_h)`` given ``E_q[S_h]`` (shape (..., K))."""

    # ------------------------------------------------------------------ helpers
    @abc.abstractmethod
    def log_prob(self, gamma: jax.Array, d: int) -> jax.Array:
        """Prior log density (log mass for discrete priors) of each ``gamma_h``."""

    @abc.abstractmethod
    def init_gamma(self, K: int, d: int, dtype=jnp.float32) -> jax.Array:
        """A deterministic starting value of gamma for samplers and VB (shape (K,))."""

    def hyperparameters(self) -> dict:
        """The hyper-parameters as a plain dict (for metadata and reports)."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v:g}" for k, v in self.hyperparameters().items())
        return f"{self.name}({args})"

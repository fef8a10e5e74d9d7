"""The interface every likelihood component implements.

A likelihood is a frozen dataclass (hashable: a static argument of jitted code) that owns
everything the model's observation part needs: its validation, the likelihood precision
``tau`` the factor blocks use, its NumPyro sample statement for ``obs``, its term of the
VB evidence lower bound, and its command-line name.  Adding a likelihood is one module in
this package; :func:`bmczoo.likelihoods.get_likelihood` finds it by ``name``.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp

__all__ = ["Likelihood", "LOG_2PI"]

LOG_2PI = math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True)
class Likelihood(abc.ABC):
    """Base class of the observation models ``p(Y_k | theta_k)``."""

    name: ClassVar[str] = ""

    #: whether ``tau`` is a model variable with its own Gibbs block / VB factor
    learned: ClassVar[bool] = False

    @abc.abstractmethod
    def precision(self, n: int) -> float:
        """The likelihood precision ``tau`` for ``n`` ratings (the starting value when it is
        learned)."""

    def block_precision(self, tau):
        """The precision the Gaussian factor and bias blocks see for a noise precision
        ``tau`` (``temper * tau`` for a tempered learned noise; ``tau`` itself here)."""
        return tau

    def sample_tau(self, key: jax.Array, sse: jax.Array, n: int) -> jax.Array:
        """Gibbs block of a learned ``tau`` given ``SSE = sum_k (R_k - theta_k)^2`` (only
        called when :attr:`learned`)."""
        raise NotImplementedError(f"{type(self).__name__} has a fixed tau")

    @abc.abstractmethod
    def sample_obs(self, mean: jax.Array, n: int, obs: jax.Array | None) -> jax.Array:
        """NumPyro sample statement of the site ``"obs"`` given ``theta`` at the rated
        entries (inside the model's ``ratings`` plate)."""

    def vb_loglik(self, n: int, expected_sse: jax.Array, tau) -> jax.Array:
        """``E_q[log p(Y | theta)]`` given ``E_q[sum_k (Y_k - theta_k)^2]`` (Gaussian with
        precision ``tau``, normalising constant included)."""
        return 0.5 * n * (jnp.log(tau) - LOG_2PI) - 0.5 * tau * expected_sse

    def describe(self) -> dict:
        """Name and settings, for metadata, reports and checkpoints."""
        return {"name": self.name, **dataclasses.asdict(self)}

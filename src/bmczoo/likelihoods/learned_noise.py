"""Gaussian likelihood with a learned noise precision ``tau ~ Gamma(a, b)``."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .. import _rng
from .._checks import check_real
from .base import LOG_2PI, Likelihood

__all__ = ["LearnedNoise"]


@dataclasses.dataclass(frozen=True)
class LearnedNoise(Likelihood):
    """``Y_k ~ N(theta_k, 1/tau)`` with ``tau ~ Gamma(a, rate b)`` learned from the data
    (docs/algorithms.md, "Learned noise"), the likelihood optionally tempered: raised to the power
    ``temper`` in (0, 1] (1: the ordinary posterior).

    Gibbs: ``tau | rest ~ Gamma(a + temper n / 2, b + temper SSE / 2)`` with
    ``SSE = sum_k (R_k - theta_k)^2``; the factor and bias blocks see the precision
    ``temper * tau``.  NumPyro site: ``tau``.

    Parameters
    ----------
    a, b : float > 0
        Shape and rate of the Gamma prior on ``tau`` (on the centred scale).
    temper : float in (0, 1]
        Power of the likelihood.
    """

    a: float = 1.0
    b: float = 1.0
    temper: float = 1.0
    name = "learned"
    cli_help = "Gaussian, noise precision learned"
    learned = True

    def __post_init__(self):
        object.__setattr__(self, "a", check_real("a", self.a, low=0.0, low_open=True))
        object.__setattr__(self, "b", check_real("b", self.b, low=0.0, low_open=True))
        object.__setattr__(
            self, "temper", check_real("temper", self.temper, low=0.0, high=1.0, low_open=True)
        )

    def precision(self, n: int) -> float:
        """The prior mean ``a / b`` (the Gibbs chains' starting value)."""
        return self.a / self.b

    def block_precision(self, tau):
        return self.temper * tau

    def sample_tau(self, key, sse, n):
        shape = self.a + 0.5 * self.temper * n
        rate = self.b + 0.5 * self.temper * sse
        tau = _rng.gamma(key, jnp.asarray(shape, sse.dtype), jnp.shape(sse), dtype=sse.dtype) / rate
        # a draw below the smallest normal float (a gamma variate at its extreme over a
        # large SSE) would flush to 0, an infinite noise variance: represented by tiny
        fi = jnp.finfo(sse.dtype)
        return jnp.clip(tau, fi.tiny, fi.max)

    # ------------------------------------------------------------------ VB
    # q(tau) = Gamma(shape, rate), state {"shape": (C,), "rate": (C,)}

    def vb_state(self, C, dtype):
        """``q(tau)`` starts at the prior ``Gamma(a, b)`` (``E[tau] = a / b``, the Gibbs start)."""
        return {"shape": jnp.full((C,), self.a, dtype), "rate": jnp.full((C,), self.b, dtype)}

    def vb_block_precision(self, q, tau):
        """``temper * E_q[tau]`` (C,)."""
        return self.temper * q["shape"] / q["rate"]

    def vb_step(self, q, expected_sse, n):
        """``q(tau) = Gamma(a + temper n / 2, b + temper E[SSE] / 2)``."""
        dt = expected_sse.dtype
        shape = jnp.broadcast_to(
            jnp.asarray(self.a + 0.5 * self.temper * n, dt), expected_sse.shape
        )
        return {"shape": shape, "rate": self.b + 0.5 * self.temper * expected_sse}

    def vb_elbo_term(self, q, n, expected_sse, tau):
        """``temper E[log N(Y | theta, 1/tau)] + E[log Gamma(tau | a, b)] - E[log q(tau)]``
        at the stored ``q(tau) = Gamma(shape, rate)``, with ``E[tau] = shape / rate`` and
        ``E[log tau] = digamma(shape) - log(rate)``."""
        from jax.scipy.special import digamma, gammaln

        s, r = q["shape"], q["rate"]
        Et, Elog = s / r, digamma(s) - jnp.log(r)
        loglik = 0.5 * n * (Elog - LOG_2PI) - 0.5 * Et * expected_sse
        log_prior = self.a * jnp.log(self.b) - gammaln(self.a) + (self.a - 1.0) * Elog - self.b * Et
        log_q = s * jnp.log(r) - gammaln(s) + (s - 1.0) * Elog - r * Et
        return self.temper * loglik + log_prior - log_q

    def vb_params(self, q):
        """``shape``, ``rate``, ``mean`` (E[tau]) and ``inv_mean`` (E[1/tau], the predictive
        noise variance; needs shape > 1) of ``q(tau)``."""
        s, r = q["shape"], q["rate"]
        return {"shape": s, "rate": r, "mean": s / r, "inv_mean": r / (s - 1.0)}

    # ------------------------------------------------------------------ NumPyro
    def sample_params(self):
        """NumPyro sample statement of the global site ``tau ~ Gamma(a, rate b)``; the model
        calls it once, outside (before) its ``ratings`` plate, and passes the result to
        :meth:`sample_obs` as keywords."""
        return {"tau": numpyro.sample("tau", dist.Gamma(self.a, self.b))}

    def sample_obs(self, mean, n, obs, tau=None):
        """``obs ~ Normal(mean, 1/sqrt(tau))`` with its log density multiplied by ``temper``
        (inside the ``ratings`` plate, whose subsampling factor ``n / b`` multiplies it
        too).  Only the obs term is tempered, never the prior of ``tau``, so the model's
        conditional of ``tau`` is ``Gamma(a + temper n / 2, b + temper SSE / 2)``, the Gibbs
        block's."""
        if tau is None:
            raise ValueError(
                "LearnedNoise.sample_obs needs tau: sample it with sample_params() "
                "outside the ratings plate and pass it as tau="
            )
        fn = dist.Normal(mean, 1.0 / jnp.sqrt(tau))
        if self.temper == 1.0:
            return numpyro.sample("obs", fn, obs=obs)
        with numpyro.handlers.scale(scale=self.temper):
            return numpyro.sample("obs", fn, obs=obs)

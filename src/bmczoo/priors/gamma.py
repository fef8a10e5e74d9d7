"""Gamma prior: ``gamma_h ~ Gamma(shape (d+1)/2, rate beta^2/2)`` with ``d = m1 + m2``."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .. import _rng
from .base import Prior, VBGamma, check_positive, set_fields


@dataclasses.dataclass(frozen=True)
class Gamma(Prior):
    """The paper's gamma prior, whose marginal MAP is the group-lasso estimator.

    With shape ``(d+1)/2`` the conditional of ``gamma_h`` is ``GIG(1/2, beta^2, S_h)``,
    i.e. ``1/gamma_h ~ InverseGaussian(mean beta/sqrt(S_h), shape beta^2)``.  (The paper's
    table of conditionals puts the inverse Gaussian on ``gamma_h``: erratum.)  NumPyro has
    no inverse Gaussian; the sampler is the Michael-Schucany-Haas transformation of
    ``jax.random.wald``, rearranged to be exact in float32.

    Parameters
    ----------
    beta : float > 0
        The group-lasso penalty; the paper tunes ``beta^2`` (500 to 40000).
    """

    beta: float = 100.0
    name = "gamma"
    cli_defaults = {"beta": 100.0}
    tuned = "beta"

    def __post_init__(self):
        set_fields(self, check_positive("Gamma", beta=self.beta))

    def concentration(self, d: int) -> float:
        return 0.5 * (d + 1)

    @property
    def rate(self) -> float:
        return 0.5 * self.beta**2

    def sample_gamma(self, K, d):
        return numpyro.sample(
            "gamma", dist.Gamma(self.concentration(d), self.rate).expand([K]).to_event(1)
        )

    def sample_conditional(self, key, S, d):
        # 1/gamma ~ IG(mu, lam), mu = beta/sqrt(S), lam = beta^2, by Michael-Schucany-Haas
        # (the algorithm of jax.random.wald) written without its cancellation: with
        # r = mu y / lam, the root is x = mu / (1 + r/2 + sqrt(r (1 + r/4))); float32's
        # jax.random.wald returns negative draws when mu y is large (small beta sqrt(S)).
        k_y, k_u, k_s = jax.random.split(key, 3)
        dt = S.dtype
        lam = jnp.asarray(self.beta**2, dt)
        S_pos = jnp.where(S > 0, S, jnp.ones_like(S))
        mu = self.beta / jnp.sqrt(S_pos)
        y = jax.random.normal(k_y, S.shape, dt) ** 2
        u = jax.random.uniform(k_u, S.shape, dt)
        r = mu * y / lam
        denom = 1.0 + 0.5 * r + jnp.sqrt(r) * jnp.sqrt(1.0 + 0.25 * r)
        # precision x = mu/denom with probability mu/(mu+x), else mu^2/x; gamma = 1/precision
        gamma = jnp.where(u * (1.0 + 1.0 / denom) <= 1.0, denom / mu, 1.0 / (mu * denom))
        # S = 0 (a column of zeros): the conditional is GIG(1/2, beta^2, 0) = Gamma(1/2, rate beta^2/2)
        g0 = _rng.gamma(k_s, jnp.asarray(0.5, dt), S.shape, dtype=dt) / (0.5 * lam)
        # A draw below the smallest normal float (a collapsed column, S ~ tiny, or a gamma
        # variate at its extreme) would flush to 0, an infinite column precision: such a
        # draw is represented by tiny (and one above the largest float by the largest).
        fi = jnp.finfo(dt)
        return jnp.clip(jnp.where(S > 0, gamma, g0), fi.tiny, fi.max)

    def column_proposal(self, gamma, z, d):
        """The log-scale random walk of gamma_h with the column rescaled
        (:meth:`~bmczoo.priors.Prior.log_walk_proposal`); ``benchmarks/bench_column_moves.py``
        measures its effect on the mixing of the effective rank."""
        return self.log_walk_proposal(gamma, z, d)

    def vb_update(self, ES, d):
        # Z = int Gamma(g; (d+1)/2, r) g^(-d/2) exp(-E/(2g)) dg
        #   = r^a / Gamma(a) * 2 (E / (2r))^(1/4) K_{1/2}(sqrt(2 r E)),  a = (d+1)/2,
        # with K_{1/2}(z) = sqrt(pi / (2z)) exp(-z); sqrt(2 r E) = beta sqrt(E).  The powers
        # of E cancel exactly ((E/2r)^(1/4) z^(-1/2) = beta^(-1), as 2r = beta^2):
        #   log Z = a log r - lgamma(a) + log(2) + (1/2) log(pi/2) - log(beta) - beta sqrt(E),
        # which is finite at E = 0 (where Z = r^(d/2) Gamma(1/2) / Gamma(a)).  Writing it with
        # log(E) - log(E) instead gives NaN at E = 0 and, in float32, rounds each of the
        # large terms separately: the constant is summed once, in double precision.
        a = self.concentration(d)
        const = (
            a * math.log(self.rate)
            - math.lgamma(a)
            + math.log(2.0)
            + 0.5 * math.log(math.pi / 2.0)
            - math.log(self.beta)
        )
        z = self.beta * jnp.sqrt(ES)
        logz = const - z
        return VBGamma(
            inv_mean=self.beta / jnp.sqrt(ES),
            log_normalizer=logz,
            params={
                "ig_mean": self.beta / jnp.sqrt(ES),
                "ig_shape": jnp.full_like(ES, self.beta**2),
            },
        )

    def log_prob(self, gamma, d):
        return dist.Gamma(self.concentration(d), self.rate).log_prob(gamma)

    def init_gamma(self, K, d, dtype=jnp.float32):
        # the prior mean (d+1)/beta^2
        return jnp.full((K,), self.concentration(d) / self.rate, dtype)

    # ------------------------------------------------------------------ diagnostics
    def q_sample(self, params, num_draws, rng):
        # 1/gamma ~ InverseGaussian(mean, shape)
        mu = np.asarray(params["ig_mean"], np.float64)
        lam = np.asarray(params["ig_shape"], np.float64)
        return 1.0 / rng.wald(mu, lam, size=(num_draws,) + mu.shape)

    def q_prob_above(self, params, threshold):
        mu = np.asarray(params["ig_mean"], np.float64)
        if threshold <= 0:
            return np.ones(mu.shape)
        lam = np.asarray(params["ig_shape"], np.float64)
        # P(gamma > t) = P(x < 1/t) for x = 1/gamma ~ IG(mu, lam): the IG CDF in log space
        from jax.scipy.special import log_ndtr

        x = 1.0 / threshold
        r = np.sqrt(lam / x)
        with jax.enable_x64(True):
            a = np.asarray(log_ndtr(r * (x / mu - 1.0)), np.float64)
            b = 2.0 * lam / mu + np.asarray(log_ndtr(-r * (x / mu + 1.0)), np.float64)
        return np.clip(np.exp(np.logaddexp(a, b)), 0.0, 1.0)

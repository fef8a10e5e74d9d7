"""Student-t noise: ``Y_k = theta_k + e_k`` with ``e_k ~ t_nu(0, 1/sqrt(tau))``, robust to
outlying ratings, and conjugate as a gamma scale mixture of normals."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .. import _rng
from .._checks import check_real
from .base import Likelihood
from .learned_noise import LearnedNoise

__all__ = ["StudentT"]

#: the largest ``nu + 1`` whose weights are drawn as ``chi^2_(nu+1) / 2`` (an integer
#: ``nu``); a larger or fractional ``nu`` uses the gamma sampler
CHI2_MAX_DOF = 32


def _half_chi2(key: jax.Array, dof: int, shape, dtype) -> jax.Array:
    """``chi^2_dof / 2``, i.e. ``Gamma(dof/2, 1)`` variates, as half the sum of ``dof``
    squared standard normals (one array of ``shape`` at a time)."""
    total = jnp.zeros(shape, dtype)
    for i in range(dof):
        z = _rng.normal(jax.random.fold_in(key, i), shape, dtype)
        total = total + z * z
    return 0.5 * total


@dataclasses.dataclass(frozen=True)
class StudentT(Likelihood):
    """``Y_k ~ t_nu(theta_k, scale 1/sqrt(tau))`` with ``tau ~ Gamma(a, rate b)`` learned and
    the degrees of freedom ``nu`` fixed (docs/algorithms.md, "Student-t noise").

    As a scale mixture, ``Y_k | w_k ~ N(theta_k, 1/(tau w_k))`` with per-rating weights
    ``w_k ~ Gamma(nu/2, rate nu/2)``: a rating far from ``theta_k`` gets a small weight, so
    that a few outlying ratings move the factors much less than under Gaussian noise.
    Gibbs blocks (each exact):

    * ``w_k | rest ~ Gamma((nu + 1)/2, (nu + tau (Y_k - theta_k)^2)/2)`` (all ratings at once);
    * the factor and bias rows given ``w``: the Gaussian blocks with rating ``k``'s precision
      ``tau w_k`` (weighted sums over the ratings);
    * ``tau | rest ~ Gamma(a + n/2, b + sum_k w_k (Y_k - theta_k)^2 / 2)``.

    NumPyro: the site ``tau`` and ``obs ~ StudentT(nu, theta, 1/sqrt(tau))`` (``w``
    integrated out).  Outputs: ``noise_sd = 1/sqrt(tau)`` is the noise's scale; its
    variance is ``nu / (nu - 2) / tau`` (``nu > 2``).

    Parameters
    ----------
    nu : float > 0
        Degrees of freedom (small: heavy tails; ``inf`` would be Gaussian noise).
    a, b : float > 0
        Shape and rate of the Gamma prior on ``tau`` (on the centred scale).
    """

    nu: float = 4.0
    a: float = 1.0
    b: float = 1.0
    name = "student-t"
    cli_help = "heavy-tailed noise robust to outlying ratings, scale learned"
    learned = True
    weighted = True

    def __post_init__(self):
        for name in ("nu", "a", "b"):
            value = check_real(name, getattr(self, name), low=0.0, low_open=True)
            object.__setattr__(self, name, value)

    def precision(self, n: int) -> float:
        """The prior mean ``a / b`` (the Gibbs chains' starting value)."""
        return self.a / self.b

    # ------------------------------------------------------------------ Gibbs
    def sample_weights(self, key: jax.Array, resid: jax.Array, tau: jax.Array) -> jax.Array:
        """The weights' block: ``w_k ~ Gamma((nu + 1)/2, (nu + tau r_k^2)/2)`` (C, n) for the
        residuals ``r = Y - theta`` (C, n) and ``tau`` (C,), one key per chain (C,)."""
        dtype = resid.dtype
        dof = self.nu + 1.0
        if float(dof).is_integer() and dof <= CHI2_MAX_DOF:
            # Gamma(dof/2, 1) = chi^2_dof / 2: dof normals per weight cost a fraction of a
            # rejection sampler's rounds over every rating
            g = jax.vmap(lambda k: _half_chi2(k, int(dof), resid.shape[1:], dtype))(key)
        else:
            shape = jnp.asarray(0.5 * dof, dtype)
            g = jax.vmap(lambda k: _rng.gamma(k, shape, resid.shape[1:], dtype=dtype))(key)
        w = g / (0.5 * (self.nu + tau[:, None] * resid * resid))
        fi = jnp.finfo(dtype)  # a weight that underflows would drop its rating: kept tiny
        return jnp.clip(w, fi.tiny, fi.max)

    def sample_tau(self, key, sse, n):
        """``tau ~ Gamma(a + n/2, b + SSE_w/2)`` with ``SSE_w = sum_k w_k (Y_k - theta_k)^2``:
        the learned Gaussian noise's block given the weighted squared error."""
        return self._noise().sample_tau(key, sse, n)

    # ------------------------------------------------------------------ VB
    # q(tau) = Gamma(shape, rate) as LearnedNoise's (state {"shape", "rate"} (C,)); q(w) is
    # kept at its optimum given q(theta) and q(tau), so it is not stored.

    def _noise(self) -> LearnedNoise:
        return LearnedNoise(a=self.a, b=self.b)

    def vb_state(self, C, dtype):
        """``q(tau)`` starts at the prior ``Gamma(a, b)``."""
        return self._noise().vb_state(C, dtype)

    def vb_block_precision(self, q, tau):
        """``E_q[tau]`` (C,)."""
        return q["shape"] / q["rate"]

    def vb_weights(self, expected_sq, tau):
        """``E_q[w_k]`` (C, n) of the optimal ``q(w_k) = Gamma((nu + 1)/2, (nu + E[tau]
        E[(Y_k - theta_k)^2])/2)`` given ``expected_sq`` (C, n) and ``E[tau]`` (C,)."""
        return (self.nu + 1.0) / (self.nu + tau[:, None] * expected_sq)

    def vb_step(self, q, expected_sse, n):
        """``q(tau) = Gamma(a + n/2, b + sum_k E[w_k] E[(Y_k - theta_k)^2] / 2)`` given that
        weighted sum ``expected_sse`` (C,)."""
        return self._noise().vb_step(q, expected_sse, n)

    def vb_weighted_elbo_term(self, q, expected_sq):
        """The likelihood's part of the ELBO (C,) with ``q(w)`` at its optimum: per rating
        ``log int p(w) exp(E_q[log N(Y_k | theta_k, 1/(tau w))]) dw`` =
        ``E[log tau]/2 - log(2 pi)/2 + (nu/2) log(nu/2) - lgamma(nu/2) + lgamma(alpha) -
        alpha log beta_k`` with ``alpha = (nu + 1)/2``, ``beta_k = (nu + E[tau]
        E[(Y_k - theta_k)^2])/2``; plus ``E[log p(tau)] - E[log q(tau)]``."""
        from jax.scipy.special import digamma, gammaln

        s, r = q["shape"], q["rate"]
        Et, Elog = s / r, digamma(s) - jnp.log(r)
        half, alpha = 0.5 * self.nu, 0.5 * (self.nu + 1.0)
        beta = 0.5 * (self.nu + Et[:, None] * expected_sq)
        n = expected_sq.shape[1]
        const = half * np.log(half) - gammaln(half) + gammaln(alpha) - 0.5 * np.log(2.0 * np.pi)
        loglik = n * (0.5 * Elog + const) - alpha * jnp.sum(jnp.log(beta), axis=1)
        log_prior = self.a * jnp.log(self.b) - gammaln(self.a) + (self.a - 1.0) * Elog - self.b * Et
        log_q = s * jnp.log(r) - gammaln(s) + (s - 1.0) * Elog - r * Et
        return loglik + log_prior - log_q

    def vb_params(self, q):
        """``shape``, ``rate``, ``mean`` and ``inv_mean`` (``E[1/tau]``) of ``q(tau)``."""
        return self._noise().vb_params(q)

    # ------------------------------------------------------------------ outputs
    def noise_variance(self, inv_tau):
        """``Var[e] = nu / (nu - 2) E[1/tau]`` (infinite for ``nu <= 2``)."""
        return inv_tau * self.nu / (self.nu - 2.0) if self.nu > 2.0 else np.inf

    def log_density(self, y, mean, inv_tau):
        """``log t_nu(y | mean, sqrt(inv_tau))`` (numpy, float64, broadcasting)."""
        from scipy import stats

        return stats.t.logpdf(y, self.nu, loc=mean, scale=np.sqrt(inv_tau))

    def interval_half_width(self, sd, prob: float):
        """The central ``prob`` interval of the ``t_nu`` with the predictive sd ``sd`` (scale
        ``sd sqrt((nu - 2)/nu)``, its variance matched): exact where ``theta``'s posterior
        spread is small beside the noise's, for ``nu > 2`` (else infinite)."""
        from scipy import stats

        if self.nu <= 2.0:
            return np.full(np.shape(sd), np.inf)
        scale = np.asarray(sd) * np.sqrt((self.nu - 2.0) / self.nu)
        return stats.t.ppf(0.5 + 0.5 * prob, self.nu) * scale

    def noise_draws(self, rng: np.random.Generator, shape, inv_tau):
        """Noise draws ``sqrt(inv_tau) t_nu`` (numpy)."""
        return np.sqrt(inv_tau) * rng.standard_t(self.nu, size=shape)

    # ------------------------------------------------------------------ NumPyro
    def sample_params(self):
        """The global site ``tau ~ Gamma(a, rate b)`` (the learned Gaussian noise's)."""
        return self._noise().sample_params()

    def sample_obs(self, mean, n, obs, tau=None):
        """``obs ~ StudentT(nu, mean, 1/sqrt(tau))`` (inside the ``ratings`` plate)."""
        if tau is None:
            raise ValueError(
                "StudentT.sample_obs needs tau: sample it with sample_params() "
                "outside the ratings plate and pass it as tau="
            )
        return numpyro.sample("obs", dist.StudentT(self.nu, mean, 1.0 / jnp.sqrt(tau)), obs=obs)

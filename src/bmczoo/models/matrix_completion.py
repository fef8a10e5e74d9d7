"""The NumPyro model of Bayesian low-rank matrix completion with a tempered likelihood."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .._checks import check_K, check_prior, check_ratings, likelihood_precision
from ..data import RatingData
from ..priors import Prior

__all__ = ["matrix_completion"]


def matrix_completion(
    ratings: RatingData,
    K: int,
    prior: Prior,
    lam: float | None = None,
    noise_sd: float = 1.0,
    *,
    observed: bool = True,
):
    """NumPyro model: ``theta = M N^T`` with a prior on the column scales and a tempered
    Gaussian likelihood ``exp(-(lam/n) sum_k (Y_k - theta[i_k, j_k])^2)``.

    Sites, in order: ``"gamma"`` (K,), ``"M"`` (m1, K), ``"N"`` (m2, K), ``"obs"`` (n,).
    The likelihood is written as ``Normal(theta, 1/sqrt(tau))`` with ``tau = 2 lam / n``;
    it differs from the tempered likelihood by a constant only.

    Parameters
    ----------
    ratings : RatingData
        The observed entries (their positions are always used; their values only when
        ``observed=True``).
    K : int
        Latent dimension, ``1 <= K <= min(m1, m2)``.
    prior : bmczoo.priors.Prior
        Prior on ``gamma_h``.  The discrete prior is integrated out exactly (see
        :class:`bmczoo.priors.Discrete`), so NUTS and SVI apply to every prior.
    lam : float, optional
        Temperature; ``None`` means ``lam = n / (2 noise_sd^2)`` (ordinary posterior).
    noise_sd : float
        Noise standard deviation used when ``lam`` is None.
    observed : bool, keyword-only
        If False, ``"obs"`` is sampled (prior predictive; used by the Geweke tests).
    """
    ratings = check_ratings(ratings)
    prior = check_prior(prior)
    K = check_K(K, ratings.shape)
    tau = likelihood_precision(ratings.n, lam, noise_sd)
    m1, m2 = ratings.shape
    _, M, N = prior.sample_latents(m1, m2, K)
    rows = jnp.asarray(ratings.rows)
    cols = jnp.asarray(ratings.cols)
    mean = jnp.sum(M[rows] * N[cols], axis=-1)
    y = jnp.asarray(ratings.values) if observed else None
    numpyro.sample("obs", dist.Normal(mean, 1.0 / jnp.sqrt(tau)).to_event(1), obs=y)

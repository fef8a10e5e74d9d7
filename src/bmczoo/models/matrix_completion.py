"""The NumPyro model of Bayesian low-rank matrix completion with a tempered likelihood."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from .._checks import ArgumentTypeError, check_bool, check_K, check_positive_int, check_prior, check_ratings
from ..likelihoods import Likelihood, Tempered
from ..data import RatingData
from ..priors import Prior

__all__ = ["matrix_completion", "model_likelihood"]


def matrix_completion(
    ratings: RatingData,
    K: int,
    prior: Prior,
    lam: float | None = None,
    noise_sd: float = 1.0,
    *,
    likelihood=None,
    observed: bool = True,
    subsample_size: int | None = None,
    marginal: bool = False,
    biases=None,
):
    """NumPyro model: ``theta = M N^T`` with a prior on the column scales and a tempered
    Gaussian likelihood ``exp(-(lam/n) sum_k (Y_k - theta[i_k, j_k])^2)``.

    Sites: ``"gamma"`` (K,), ``"M"`` (m1, K), ``"N"`` (m2, K), ``"obs"`` (n,), in this order
    except for the discrete prior, whose ``"gamma"`` (and ``"gamma_slab_prob"``) are
    deterministic functions of ``M`` and ``N`` recorded after them (gamma is integrated out).
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
    likelihood : bmczoo.likelihoods.Likelihood, keyword-only, optional
        The observation component; default ``Tempered(lam, noise_sd)`` (then ``lam`` and
        ``noise_sd`` must be left at their defaults when it is given).
    observed : bool, keyword-only
        If False, ``"obs"`` is sampled (prior predictive; used by the Geweke tests).
    subsample_size : int, keyword-only, optional
        Minibatch size for SVI: the likelihood is a ``numpyro.plate("ratings", n,
        subsample_size=...)``, which rescales the minibatch's log-likelihood by ``n / b``.
    marginal : bool, keyword-only
        Integrate ``gamma`` out: ``M`` and ``N`` get the exact marginal column prior
        ``log p(M_h, N_h) = log int p(g) N(M_h, N_h | 0, g I) dg`` (a function of
        ``S_h`` only: the prior's ``vb_update(S, d).log_normalizer - (d/2) log 2 pi``) as a
        ``numpyro.factor`` over improper flat sites.  ``AutoDelta`` on this model gives the
        paper's MAP estimators (nuclear norm for the fixed prior, group lasso for the gamma
        prior).  There is no ``"gamma"`` site and no prior predictive in this mode.
    """
    if biases is not None:
        raise NotImplementedError("biases in the NumPyro model")
    ratings = check_ratings(ratings)
    prior = check_prior(prior)
    K = check_K(K, ratings.shape)
    likelihood = model_likelihood(likelihood, lam, noise_sd)
    check_bool("observed", observed)
    check_bool("marginal", marginal)
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if subsample_size > ratings.n:
            raise ValueError(f"subsample_size={subsample_size} exceeds the number of ratings {ratings.n}")
    m1, m2 = ratings.shape
    if marginal:
        flat = dist.ImproperUniform(dist.constraints.real_matrix, (), (m1, K))
        M = numpyro.sample("M", flat)
        N = numpyro.sample("N", dist.ImproperUniform(dist.constraints.real_matrix, (), (m2, K)))
        S = jnp.sum(M**2, axis=0) + jnp.sum(N**2, axis=0)
        d = m1 + m2
        log_marginal = prior.vb_update(S, d).log_normalizer - 0.5 * d * math.log(2.0 * math.pi)
        numpyro.factor("gamma_marginal", jnp.sum(log_marginal))
    else:
        _, M, N = prior.sample_latents(m1, m2, K)
    rows = jnp.asarray(ratings.rows)
    cols = jnp.asarray(ratings.cols)
    y = jnp.asarray(ratings.values) if observed else None
    with numpyro.plate("ratings", ratings.n, subsample_size=subsample_size) as idx:
        mean = jnp.sum(M[rows[idx]] * N[cols[idx]], axis=-1)
        likelihood.sample_obs(mean, ratings.n, None if y is None else y[idx])


def model_likelihood(likelihood, lam, noise_sd):
    """The likelihood component of the model's arguments: ``likelihood``, or the
    tempered likelihood of ``lam``/``noise_sd`` (which must then be left at their defaults)."""
    if likelihood is None:
        return Tempered(lam=lam, noise_sd=noise_sd)
    if not isinstance(likelihood, Likelihood):
        raise ArgumentTypeError(f"likelihood must be one of bmczoo.likelihoods, got {likelihood!r}")
    if lam is not None or noise_sd != 1.0:
        raise ValueError("give lam/noise_sd to the likelihood (e.g. bmc.likelihoods.Tempered(lam=...)), "
                         "not besides it")
    return likelihood

"""The NumPyro model of Bayesian low-rank matrix completion with a tempered likelihood."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .._checks import check_bool, check_K, check_positive_int, check_prior, check_ratings
from ..likelihoods import Likelihood, Tempered
from ..linalg import features_product
from ..data import RatingData
from ..offsets import Biases, Offset, get_biases
from ..priors import Prior

__all__ = ["matrix_completion", "model_likelihood", "sample_biases"]


def matrix_completion(
    ratings: RatingData,
    K: int,
    prior: Prior,
    lam: float | None = None,
    noise_sd: float = 1.0,
    *,
    likelihood=None,
    biases: Biases | None = None,
    offsets: tuple = (),
    observed: bool = True,
    subsample_size: int | None = None,
    marginal: bool = False,
):
    """NumPyro model: ``theta = M N^T`` with a prior on the column scales and a tempered
    Gaussian likelihood ``exp(-(lam/n) sum_k (Y_k - theta[i_k, j_k])^2)``.

    Sites: ``"gamma"`` (K,), ``"M"`` (m1, K), ``"N"`` (m2, K), ``"obs"`` (n,) (the discrete
    prior's ``"gamma"`` and ``"gamma_slab_prob"`` are deterministic, after ``M``, ``N``:
    gamma integrated out).  The likelihood ``Normal(theta, 1/sqrt(tau))``, ``tau = 2 lam /
    n``, differs from the tempered likelihood by a constant only.

    The components add sites: the prior's own (the Normal-Wishart prior:
    ``Lambda_M, mu_M, M, Lambda_N, mu_N, N`` and no gamma), the biases (``row_bias_var``,
    ``row_bias`` (m1,), ``col_bias_var``, ``col_bias`` (m2,), after ``N``; with features,
    ``row_bias_lam`` and ``row_bias_w`` (F,) before ``row_bias``, ``sample_biases``;
    the mean of ``obs`` becomes ``M_i . N_j + row_bias_i + col_bias_j``) and a learned likelihood's
    global sites (:class:`~bmczoo.likelihoods.LearnedNoise`: ``tau``, sampled outside the
    ``ratings`` plate, just before ``obs``).

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
    biases : bmczoo.offsets.Biases, keyword-only, optional
        Row and column biases (None: none; ``True`` means the default ``Biases()``).
    offsets : tuple of bmczoo.offsets.Offset, keyword-only
        Sampled offsets (:class:`~bmczoo.offsets.Context`: per-rating covariates): their
        sites (``Offset.sample``) after the biases, their sum added to
        the mean of ``obs``.
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
        prior).  No ``"gamma"`` site, no prior predictive.  The biases' variances, a
        learned ``tau`` and a prior without column scales (Normal-Wishart: ``Lambda``,
        ``mu``) stay sites: their joint density is bounded, so ``AutoDelta`` is their MAP.
    """
    ratings, prior, K, likelihood, biases, subsample_size = _check_arguments(
        ratings, K, prior, lam, noise_sd, likelihood, biases, observed, subsample_size, marginal
    )
    M, N = _factors(prior, ratings, K, marginal)
    m1, m2 = ratings.shape
    bias = None if biases is None else sample_biases(biases, m1, m2, ratings)
    if any(not isinstance(o, Offset) for o in offsets):
        raise TypeError(f"offsets must be bmczoo.offsets.Offset components, got {offsets!r}")
    shift = sum(o.sample(ratings) for o in offsets) if offsets else None
    _observe(likelihood, ratings, M, N, (bias, shift), observed, subsample_size)


def _factors(prior, ratings, K: int, marginal: bool):
    """The prior's sites and the factors ``M``, ``N`` (flat sites with the marginal column
    prior as a factor when ``marginal`` and the prior has column scales)."""
    m1, m2 = ratings.shape
    if marginal and prior.has_column_scales:
        return _marginal_factors(prior, m1, m2, K)
    # the data, not only its shape: a prior with a feature link reads the features
    _, M, N = (
        prior.sample_latents_for(ratings, K)
        if hasattr(prior, "sample_latents_for")
        else prior.sample_latents(m1, m2, K)
    )
    return M, N


def _observe(likelihood, ratings, M, N, offsets, observed: bool, subsample_size):
    """The likelihood's global sites, then ``"obs"`` in the ``ratings`` plate (subsampled
    for SVI when ``subsample_size`` is given); ``offsets``: the biases (or None) and the
    sampled offsets' sum at the ratings (or None)."""
    bias, shift = offsets
    if likelihood.all_pairs:  # every pair of the matrix (small matrices)
        if shift is not None or subsample_size is not None:
            raise ValueError(
                f"the {likelihood.name} likelihood's model takes no offsets or "
                "subsample_size: it observes every pair of the matrix"
            )
        theta = M @ N.T
        if bias is not None:  # b_i + c_j at every pair
            theta = theta + bias[0][:, None] + bias[1][None, :]
        return likelihood.sample_pairs(theta, ratings, observed)
    rows = jnp.asarray(ratings.rows)
    cols = jnp.asarray(ratings.cols)
    y = jnp.asarray(ratings.values) if observed else None
    # a learned likelihood's global sites (tau) come before, and outside, the ratings plate:
    # inside it they would be one per rating (and rescaled by n / b under subsampling)
    lik_params = likelihood.sample_params()
    with numpyro.plate("ratings", ratings.n, subsample_size=subsample_size) as idx:
        r, c = rows[idx], cols[idx]
        mean = jnp.sum(M[r] * N[c], axis=-1)
        if bias is not None:
            mean = mean + bias[0][r] + bias[1][c]
        if shift is not None:
            mean = mean + shift[idx]
        likelihood.sample_obs(mean, ratings.n, None if y is None else y[idx], **lik_params)


def _check_arguments(
    ratings, K, prior, lam, noise_sd, likelihood, biases, observed, subsample_size, marginal
):
    ratings = check_ratings(ratings)
    prior = check_prior(prior)
    K = check_K(K, ratings.shape)
    likelihood = model_likelihood(likelihood, lam, noise_sd)
    if likelihood is not None and likelihood.latent and not likelihood.bound:
        likelihood = likelihood.bind(ratings.values)
    check_bool("observed", observed)
    check_bool("marginal", marginal)
    biases = get_biases(biases)
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if subsample_size > ratings.n:
            raise ValueError(
                f"subsample_size={subsample_size} exceeds the number of ratings {ratings.n}"
            )
    return ratings, prior, K, likelihood, biases, subsample_size


def _marginal_factors(prior, m1: int, m2: int, K: int):
    """Flat sites ``M``, ``N`` with the exact marginal column prior (gamma integrated out)
    as a factor."""
    M = numpyro.sample("M", dist.ImproperUniform(dist.constraints.real_matrix, (), (m1, K)))
    N = numpyro.sample("N", dist.ImproperUniform(dist.constraints.real_matrix, (), (m2, K)))
    S = jnp.sum(M**2, axis=0) + jnp.sum(N**2, axis=0)
    d = m1 + m2
    log_marginal = prior.vb_update(S, d).log_normalizer - 0.5 * d * math.log(2.0 * math.pi)
    numpyro.factor("gamma_marginal", jnp.sum(log_marginal))
    return M, N


def sample_biases(biases: Biases, m1: int, m2: int, ratings=None):
    """Sample statements of the bias component: ``row_bias_var ~ InvGamma(a, b)`` (shape
    ``a``, scale ``b``), ``row_bias ~ N(0, row_bias_var I_m1)``, then ``col_bias_var`` and
    ``col_bias`` (m2,) the same way.  A side with features ``X`` (the biases'
    ``row_features=`` / ``col_features=`` / ``implicit=``, read from ``ratings``) has
    ``row_bias_lam ~ Gamma(a_w, b_w)`` and ``row_bias_w ~ N(0, (row_bias_var /
    row_bias_lam) I_F)`` after its variance, and ``row_bias ~ N(X row_bias_w, row_bias_var
    I_m1)``.  Returns ``(row_bias, col_bias)``."""
    from ..priors import macau

    out = []
    for (side, m), spec, axis in zip(
        (("row", m1), ("col", m2)), (biases.row_features, biases.col_features), ("rows", "cols")
    ):
        var = numpyro.sample(f"{side}_bias_var", dist.InverseGamma(biases.a, biases.b))
        loc = 0.0
        if axis in biases.linked_sides:
            if ratings is None:
                raise ValueError("Biases with features: sample_biases needs the ratings")
            X = macau.side_features(spec, biases.implicit, ratings, axis, owner="Biases")
            lam = numpyro.sample(f"{side}_bias_lam", dist.Gamma(biases.a_w, biases.b_w))
            w = numpyro.sample(
                f"{side}_bias_w",
                dist.Normal(0.0, jnp.sqrt(var / lam)).expand([X.n_features]).to_event(1),
            )
            loc = features_product(X, w)
        out.append(
            numpyro.sample(f"{side}_bias", dist.Normal(loc, jnp.sqrt(var)).expand([m]).to_event(1))
        )
    return tuple(out)


def model_likelihood(likelihood, lam, noise_sd):
    """The likelihood component of the model's arguments: ``likelihood``, or the
    tempered likelihood of ``lam``/``noise_sd`` (which must then be left at their defaults)."""
    if likelihood is None:
        return Tempered(lam=lam, noise_sd=noise_sd)
    if not isinstance(likelihood, Likelihood):
        raise TypeError(f"likelihood must be one of bmczoo.likelihoods, got {likelihood!r}")
    if lam is not None or noise_sd != 1.0:
        raise ValueError(
            "give lam/noise_sd to the likelihood (e.g. bmc.likelihoods.Tempered(lam=...)), "
            "not besides it"
        )
    return likelihood

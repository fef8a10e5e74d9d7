"""The NumPyro model of the CP factorisation of an N-way array (docs/algorithms.md,
"Tensors"), for NUTS on small problems and to check the Gibbs sampler against."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from .._checks import check_bool, check_int, check_positive_int, check_prior
from ..data import TensorData
from ..offsets import get_biases
from ..priors import Discrete
from ..priors.discrete import ColumnSpikeSlabNormal, _slab_logit
from .matrix_completion import model_likelihood

__all__ = ["tensor_completion"]


def _marginal_factors(prior, shape: tuple, K: int) -> list:
    """Flat sites ``U0``, ``U1``, ... (m_d, K) with the exact marginal column prior
    (``gamma`` integrated out: a function of ``S_h = sum_d |U_d[:, h]|^2``) as a factor,
    as :func:`bmczoo.models.matrix_completion`'s ``marginal=True``."""
    U = [
        numpyro.sample(f"U{d}", dist.ImproperUniform(dist.constraints.real_matrix, (), (m, K)))
        for d, m in enumerate(shape)
    ]
    S = sum(jnp.sum(F**2, axis=0) for F in U)
    n = sum(shape)
    log_marginal = prior.vb_update(S, n).log_normalizer - 0.5 * n * math.log(2.0 * math.pi)
    numpyro.factor("gamma_marginal", jnp.sum(log_marginal))
    return U


def _factors(prior, shape: tuple, K: int) -> list:
    """The prior's sites and the factors ``U0``, ``U1``, ... (m_d, K): with the discrete
    prior the column scales integrated out (each mode's columns a spike-and-slab mixture
    given the modes before it: the exact marginal, continuous sites only)."""
    if isinstance(prior, Discrete):
        U, S, seen = [], 0.0, 0
        for d, m in enumerate(shape):
            if d == 0:
                law = ColumnSpikeSlabNormal(m, jnp.full((K,), prior.p), prior.C, prior.eps)
            else:
                logit = _slab_logit(S, seen, prior.p, prior.C, prior.eps)
                law = ColumnSpikeSlabNormal(m, C=prior.C, eps=prior.eps, slab_logit=logit)
            F = numpyro.sample(f"U{d}", law)
            U.append(F)
            S, seen = S + jnp.sum(F**2, axis=0), seen + m
        q = numpyro.deterministic("gamma_slab_prob", jax.nn.sigmoid(prior.slab_logit(S, seen)))
        numpyro.deterministic("gamma", q * prior.C + (1.0 - q) * prior.eps)
        return U
    gamma = prior.sample_gamma(K, sum(shape))
    scale = jnp.sqrt(gamma)
    return [
        numpyro.sample(f"U{d}", dist.Normal(0.0, scale).expand([m, K]).to_event(2))
        for d, m in enumerate(shape)
    ]


def tensor_completion(
    data: TensorData,
    K: int,
    prior,
    *,
    likelihood=None,
    biases=None,
    observed: bool = True,
    subsample_size: int | None = None,
    marginal: bool = False,
):
    """NumPyro model: ``theta[i_1..i_D] = sum_h prod_d U_d[i_d, h]`` (plus ``sum_d
    b_d[i_d]`` with biases per mode), ``U_d[:, h] ~ N(0, gamma_h I)`` with a column-scale
    prior on ``gamma_h`` shared by the modes, and the likelihood's ``obs``.

    Sites: the prior's (``gamma``; the discrete prior integrated out: ``gamma_slab_prob``
    and ``gamma`` deterministic), ``U0``, ``U1``, ... (m_d, K), with biases ``bias{d}_var``
    and ``bias{d}`` (m_d,) per mode, a learned likelihood's ``tau``, and ``obs`` (n,).

    Parameters
    ----------
    data : TensorData
        The observed entries (their values only with ``observed``).
    K : int
        The number of columns.
    prior : bmczoo.priors.Prior
        A column-scale prior (fixed, inverse gamma, gamma, discrete).
    likelihood : bmczoo.likelihoods.Likelihood, optional
        ``Tempered`` (default) or ``LearnedNoise``.
    biases : bool or bmczoo.offsets.Biases, optional
        Biases per mode.
    observed : bool
        If False, ``obs`` is sampled (prior predictive).
    subsample_size : int, optional
        Minibatch size for SVI: the entries' plate is subsampled (the minibatch's
        log-likelihood rescaled by ``n / b``).
    marginal : bool
        Integrate ``gamma`` out: flat sites ``U0``, ``U1``, ... with the exact marginal
        column prior as a ``numpyro.factor`` (no ``gamma`` site, no prior predictive):
        ``AutoDelta`` on this model is the MAP of ``bmc.fit(..., method="map")``.
    """
    if not isinstance(data, TensorData):
        raise TypeError(f"data must be a TensorData, got {type(data).__name__}")
    prior = check_prior(prior)
    if not prior.has_column_scales:
        raise ValueError(f"the {prior.name} prior is not implemented in the tensor model yet")
    K = check_int("K", K, minimum=1)
    likelihood = model_likelihood(likelihood, None, 1.0)
    if likelihood.latent or likelihood.weighted or likelihood.all_pairs:
        raise ValueError(f"the {likelihood.name} likelihood is not implemented in the tensor model")
    biases = get_biases(biases)
    check_bool("marginal", marginal)
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if subsample_size > data.n:
            raise ValueError(
                f"subsample_size={subsample_size} exceeds the number of entries {data.n}"
            )
    U = (_marginal_factors if marginal else _factors)(prior, data.shape, K)
    idx = jnp.asarray(data.indices)
    bias = []
    if biases is not None:
        for d, m in enumerate(data.shape):
            var = numpyro.sample(f"bias{d}_var", dist.InverseGamma(biases.a, biases.b))
            bias.append(
                numpyro.sample(f"bias{d}", dist.Normal(0.0, jnp.sqrt(var)).expand([m]).to_event(1))
            )
    y = jnp.asarray(data.values) if observed else None
    params = likelihood.sample_params()
    with numpyro.plate("entries", data.n, subsample_size=subsample_size) as k:
        at = idx[k]
        rows = U[0][at[:, 0]]
        for d in range(1, len(U)):
            rows = rows * U[d][at[:, d]]
        mean = jnp.sum(rows, axis=-1)
        for d, b in enumerate(bias):
            mean = mean + b[at[:, d]]
        likelihood.sample_obs(mean, data.n, None if y is None else y[k], **params)

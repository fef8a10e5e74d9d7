"""The evidence lower bound of mean-field VB (:func:`elbo`), from the expectations the
CAVI updates share (:func:`~bmczoo.inference.vb.cavi.parts_of`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ...likelihoods import Tempered
from ...priors import Prior
from .. import sharding as sh
from ...linalg import CSR, row_ids
from . import all_pairs
from . import offsets as vbo
from .cavi import log_Z, parts_body, parts_of, rating_expected_sq
from .state import (
    Sharded,
    VBState,
    check_bias_links,
    check_links,
    cuts_of,
    one_run,
    prior_q,
    ratings_mean,
    split_links,
)

__all__ = ["elbo", "expected_sq_error", "all_pairs_loglik"]

_LOG_2PI = math.log(2.0 * math.pi)


def expected_sq_error(state: VBState, rows: CSR) -> jax.Array:
    """``sum_k E_q[(Y_k - theta_k)^2]`` for each run (one device; biases included)."""
    return parts_body(rows, state.m, state.V, state.n, state.W, state.bias, sh.LOCAL)["sq"]


def elbo(
    state: VBState,
    rows: CSR,
    prior: Prior,
    tau,
    *,
    likelihood=None,
    biases=None,
    sharded: Sharded | None = None,
    latent=None,
    links: dict | None = None,
    offsets: tuple = (),
) -> jax.Array:
    """The evidence lower bound of each run (C,).

    Exact for any q-state of the parts that store all their parameters (factors,
    Normal-Wishart, ``q(tau)``, biases); a column-scale prior's ``q(gamma)`` is taken at
    its optimum for the current ``E[S]`` (true right after :func:`~bmczoo.inference.vb.cavi.update`).

    The likelihood term is the likelihood component's
    :meth:`~bmczoo.likelihoods.base.Likelihood.vb_elbo_term` (default: the Gaussian
    ``N(Y | theta, 1/tau)``, normalising constant included, so that the ELBO is a bound
    on the log evidence of that Gaussian model; learned noise: tempered log-likelihood
    plus ``E[log p(tau)] - E[log q(tau)]``).  ``sharded``/``links``/``offsets`` as in
    :func:`~bmczoo.inference.vb.cavi.update`; the offsets add their terms
    (:meth:`~bmczoo.offsets.base.Offset.vb_elbo_term`) and their moments enter the
    likelihood's.
    """
    links, bias_links = split_links(links)
    prior = check_links(prior, links, sharded)
    biases = check_bias_links(biases, bias_links, sharded)
    lik = Tempered() if likelihood is None else likelihood
    moments, extra = None, 0.0
    if offsets:
        offs, arrays = tuple(o for o, _ in offsets), tuple(a for _, a in offsets)
        moments = vbo.moments(offs, state.offsets, arrays)
        extra = vbo.elbo_term(offs, state.offsets, arrays)
    if lik is not None and lik.latent:
        return _latent_elbo(state, rows, prior, lik, biases, latent, moments) + extra
    if lik.all_pairs:
        all_pairs.check_support(lik, biases=biases, sharded=sharded, offsets=offsets)
        loglik, parts = all_pairs_loglik(state, rows, lik, tau, prior)
        return _elbo_rest(state, parts, loglik, prior, biases, rows.shape)
    parts, n_obs = parts_of(state, rows, prior, sharded)
    if (
        lik.weighted
    ):  # q(w) at its optimum: the likelihood's term from each rating's E[(Y - theta)^2]
        shift = (None, None) if moments is None else moments
        loglik = lik.vb_weighted_elbo_term(
            state.noise, rating_expected_sq(state, rows, 4096, *shift)
        )
    else:
        sq = parts["sq"]
        if moments is not None:  # E[(Y - theta - s)^2] = E[(Y - E s - theta)^2] + Var s
            y = rows.values[None]
            sq = sq + vbo.sq_correction(y, ratings_mean(state, rows), moments[0])
            sq = sq + jnp.sum(moments[1], axis=1)
        loglik = lik.vb_elbo_term(state.noise, n_obs, sq, tau)
    return (
        _elbo_rest(
            state, parts, loglik, prior, biases, rows.shape if sharded is None else sharded.dims
        )
        + extra
    )


def _elbo_rest(state: VBState, parts: dict, loglik, prior: Prior, biases, dims):
    """The ELBO given the likelihood's term: the prior's, the Gaussian entropies, the biases'."""
    K = state.m.shape[-1]
    m1, m2 = dims
    d = m1 + m2
    prior_part = prior.vb_elbo_term(prior_q(state), parts["stats"][0], parts["stats"][1], m1, m2)
    out = loglik + prior_part + 0.5 * d * K * (1.0 + _LOG_2PI) + 0.5 * parts["logdet"]
    if state.bias:
        if biases is None:
            raise ValueError("the VB state has biases: pass biases= to elbo")
        out = out + biases.vb_elbo_term(state.bias, m1, m2, parts["bias"])
    return out


def all_pairs_loglik(state: VBState, rows: CSR, lik, tau, prior: Prior | None = None):
    """The expected log-likelihood ``E_q[log p(every pair | theta)]`` (C,) of an
    ``all_pairs`` likelihood (one device) and the Gaussian parts it reads.

    With targets ``t_k`` and weights ``w_k`` at the ratings (``gibbs_view``) and the weight
    ``u`` of the other pairs (targets 0), the expected weighted squared error over every
    pair is ``sum_k w_k t_k^2 - 2 sum_k w_k t_k E[theta_k] + sum_k (w_k - u) E[theta_k^2]
    + u sum_ij E[theta_ij^2]``: the third sum is the Gaussian parts' ``sq`` with zero values
    and the pattern's entries ``w_k - u`` (with biases: ``theta`` with them, each rating
    adding ``Var b_i + Var c_j``), the last ``tr(A B)`` plus the biases' terms
    (:func:`.all_pairs.all_pairs_second_moment`); the likelihood's
    ``vb_all_pairs_loglik`` turns it into its term.

    Parameters
    ----------
    state : VBState
        The q-state (one device; with or without biases).
    rows : CSR
        The ratings by rows (values: the data's values).
    lik : bmczoo.likelihoods.Likelihood
        An ``all_pairs`` likelihood.
    tau : float or jax.Array
        Its precision scale.
    prior : Prior, optional
        The prior (as :func:`~bmczoo.inference.vb.state.vb_prior` binds it): its factor
        statistics are added to the parts.

    Returns
    -------
    tuple
        ``(loglik (C,), parts)`` (:func:`~bmczoo.inference.vb.cavi.parts_body`'s dict).
    """
    t, w = lik.gibbs_view(rows.values, row_ids(rows), rows.index)
    u = lik.unrated_weight()
    gram = rows._replace(values=jnp.zeros_like(rows.values), ones=rows.ones * (w - u))
    parts, _ = parts_of(state, gram, prior, None)
    wt = rows.ones * w * t
    sq = (
        jnp.sum(wt * t)
        - 2.0 * jnp.sum(wt * ratings_mean(state, rows), axis=1)
        + parts["sq"]
        + u * all_pairs.all_pairs_second_moment(state.m, state.V, state.n, state.W, state.bias)
    )
    m1, m2 = rows.shape
    return lik.vb_all_pairs_loglik(w, m1 * m2, sq, tau), parts


def _latent_elbo(
    state: VBState, rows: CSR, prior: Prior, lik, biases, latent, moments=None
) -> jax.Array:
    """The ELBO of a latent likelihood (C,) (cut points at their point estimates, their
    log prior density included); ``moments``: the offsets' ``(E[s], Var[s])`` (C, n)."""
    levels, _ = latent
    C = state.m.shape[0]
    theta = ratings_mean(state, rows)
    mu = theta if moments is None else theta + moments[0]
    cuts = cuts_of(state, lik, C, mu.dtype)
    out = []
    for c in range(C):
        run = one_run(state, c)
        # with the ratings replaced by E_q[theta], sum_k E[(Y_k - theta_k)^2] = sum_k Var_q[theta_k]
        parts = parts_body(
            rows._replace(values=theta[c]),
            run.m,
            run.V,
            run.n,
            run.W,
            run.bias,
            sh.LOCAL,
            prior=prior,
        )
        sq = parts["sq"] if moments is None else parts["sq"] + jnp.sum(moments[1][c])
        loglik = log_Z(mu[c : c + 1], cuts[c : c + 1], levels) - 0.5 * sq
        if "cuts" in state.noise:
            loglik = loglik + lik.cut_log_prior(cuts[c])
        out.append(_elbo_rest(run, parts, loglik, prior, biases, rows.shape))
    return jnp.concatenate(out)

"""Closed-form mean-field variational Bayes (CAVI) for every model of the zoo.

``q = prod_i N(m_i, V_i) prod_j N(n_j, W_j) q(prior variables) [q(tau)] [q(biases)]``
(docs/algorithms.md, "Mean-field variational Bayes").  One iteration updates all
``q(M_i)`` (one batched Cholesky, the same sparse products as the Gibbs sweep, see
:mod:`bmczoo.inference.kernels`), then all ``q(N_j)``, then the biases' q (row biases,
column biases, their variances) when the model has biases, then the prior's q through
its VB hooks (:meth:`~bmczoo.priors.Prior.vb_state`, ``vb_row_priors``,
``vb_factor_stats``, ``vb_step``, ``vb_elbo_term``; column scales ``q(gamma)`` from
:meth:`~bmczoo.priors.Prior.vb_update` by default, Normal-Wishart ``q(mu, Lambda)``;
with feature links, ``links=`` the arrays of ``prior.gibbs_links``, also ``q(B)`` and
``q(lam_B)`` of each linked factor: :class:`bmczoo.priors.macau.VBLink`),
then ``q(tau)`` when the likelihood learns it (its ``vb_*`` methods).  The ELBO is
computed after every iteration; coordinate ascent never decreases it.

Like the Gibbs core, the functions carry a leading axis ``C`` (independent runs, e.g.
several initialisations) on the factor arrays.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .. import _rng
from ..likelihoods import Tempered
from ..priors import Prior
from . import sharding as sh
from .kernels import _row_ids
from .kernels import CSR, cholesky_rows, outer, pattern_product, row_precision, row_rhs, solve_rows

__all__ = [
    "VBState",
    "init",
    "update",
    "elbo",
    "expected_sq_error",
    "prior_q",
    "shard_state",
    "unshard_state",
    "vb_prior",
]

_LOG_2PI = math.log(2.0 * math.pi)


class VBState(NamedTuple):
    """Variational parameters of ``C`` independent runs.

    Parameters
    ----------
    m, V : jax.Array
        Means (C, m1, K) and covariances (C, m1, K, K) of ``q(M_i)``.
    n, W : jax.Array
        Means (C, m2, K) and covariances (C, m2, K, K) of ``q(N_j)``.
    inv_gamma : jax.Array or None
        (C, K) ``E_q[1/gamma_h]``: the column-scale priors' q-state; None for a prior of
        another family.
    ES : jax.Array
        (C, K) ``E_q[S_h]`` (every prior).
    prior : dict
        The q-state of a prior outside the column-scale family (its
        :meth:`~bmczoo.priors.Prior.vb_state`, e.g. Normal-Wishart's ``mu_M, beta_M, ...``).
    noise : dict
        ``q(tau)`` of a learned likelihood.
    bias : dict
        The q of the biases (``bmczoo.offsets.Biases.vb_state``); empty dicts when absent.
    """

    m: jax.Array
    V: jax.Array
    n: jax.Array
    W: jax.Array
    inv_gamma: jax.Array | None
    ES: jax.Array
    prior: dict = {}
    noise: dict = {}
    bias: dict = {}


def prior_q(state: VBState) -> dict:
    """The prior's q-state (the dict its VB hooks take) held by ``state``."""
    q = dict(state.prior)
    if state.inv_gamma is not None:
        q["inv_gamma"] = state.inv_gamma
    return q


def vb_prior(prior: Prior, links: dict | None):
    """The prior as the VB core sees it: ``prior`` itself, or with feature links (``links``
    non-empty: the arrays of :meth:`~bmczoo.priors.NormalWishart.gibbs_links`) a
    :class:`bmczoo.priors.macau.VBLink` that binds them.

    Parameters
    ----------
    prior : Prior
        The model's prior (or an already bound :class:`~bmczoo.priors.macau.VBLink`).
    links : dict or None
        The link arrays (None or empty: no links).

    Returns
    -------
    Prior or VBLink
        What the VB hooks are called on.
    """
    from ..priors.macau import VBLink

    if not links or isinstance(prior, VBLink):
        return prior
    return VBLink(prior, links)


def _is_linked(prior) -> bool:
    from ..priors.macau import VBLink

    return isinstance(prior, VBLink)


def _split_prior_q(q: dict):
    q = dict(q)
    return q.pop("inv_gamma", None), q


def _inverse_from_cholesky(L: jax.Array) -> jax.Array:
    K = L.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(K, dtype=L.dtype), L.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.swapaxes(Linv, -1, -2) @ Linv


def init(
    keys: jax.Array,
    shape: tuple[int, int],
    prior: Prior,
    K: int,
    dtype=jnp.float32,
    scale: float = 1.0,
    gamma: float | None = 1.0,
    *,
    likelihood=None,
    biases=None,
    links: dict | None = None,
) -> VBState:
    """Random means ``N(0, scale^2)`` (one key per run), zero covariances and the prior's
    starting q-state (:meth:`~bmczoo.priors.Prior.vb_state`; column scales:
    ``E[1/gamma_h] = 1/gamma``, ``gamma=None``: the prior's ``init_gamma``); the first
    update of ``q(M)`` only uses ``n``, ``W`` and the prior's, likelihood's and biases'
    q-states.  ``likelihood`` (learned: ``q(tau)`` starts at its prior) and ``biases``
    (zero means) add their q-states; ``links`` (a prior with feature links: the arrays of
    its ``gibbs_links``) adds ``q(B)`` and ``q(lam_B)`` (:func:`vb_prior`).

    A unit ``gamma`` rather than e.g. the inverse-gamma prior's mode ``b/(a+1)`` matters:
    starting from strong shrinkage, CAVI can settle on the all-zero fixed point."""
    m1, m2 = shape
    C = keys.shape[0]
    split = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    m = jax.vmap(lambda k: _rng.normal(k, (m1, K), dtype))(split[:, 0]) * scale
    n = jax.vmap(lambda k: _rng.normal(k, (m2, K), dtype))(split[:, 1]) * scale
    inv_gamma, qp = _split_prior_q(vb_prior(prior, links).vb_state(K, m1, m2, C, dtype, gamma))
    return VBState(
        m=m,
        V=jnp.zeros((C, m1, K, K), dtype),
        n=n,
        W=jnp.zeros((C, m2, K, K), dtype),
        inv_gamma=inv_gamma,
        ES=jnp.zeros((C, K), dtype),
        prior=qp,
        noise={} if likelihood is None or not likelihood.learned else likelihood.vb_state(C, dtype),
        bias={} if biases is None else biases.vb_state(m1, m2, C, dtype),
    )


def _bcast(tau, ndim: int):
    """A per-run precision (C,) as (C, 1, ...) of ``ndim`` axes; a scalar as it is."""
    if jnp.ndim(tau) == 0:
        return tau
    return jnp.reshape(tau, jnp.shape(tau) + (1,) * (ndim - 1))


def _product(csr: CSR, data, dense: jax.Array) -> jax.Array:
    """``A @ dense`` run by run for the pattern of ``csr`` with entries ``data``
    (``csr.values`` or ``csr.ones``): dense (C, m_other, P) -> (C, m, P), one sparse
    product with the runs stacked as columns."""
    C, mo, P = dense.shape
    d = jnp.transpose(dense, (1, 0, 2)).reshape(mo, C * P)
    r = pattern_product(csr, data, d)
    return jnp.transpose(r.reshape(csr.shape[0], C, P), (1, 0, 2))


def _resid_rhs(csr: CSR, mean_other, self_bias, other_bias):
    """``sum_{k in row i} (Y_k - E[b_i] - E[c_j]) E[N_j]`` (C, m, K) without building the
    residuals: ``A_Y n - E[b_i] A_1 n - A_1 (E[c] * n)``."""
    K = mean_other.shape[-1]
    yn = row_rhs(csr, mean_other, 1.0)
    P = _product(
        csr, csr.ones, jnp.concatenate([mean_other, other_bias[..., None] * mean_other], axis=-1)
    )
    return yn - self_bias[..., None] * P[..., :K] - P[..., K:]


def _counts(csr: CSR, dtype):
    return jnp.diff(csr.indptr).astype(dtype)


def _bias_resid_sum(csr: CSR, mean_other, mean_self, other_bias):
    """``sum_{k in row i} (Y_k - E[c_j] - m_i . n_j)`` (C, m) for the bias of row i."""
    K = mean_other.shape[-1]
    C, mo = other_bias.shape
    sumY = pattern_product(csr, csr.values, jnp.ones((mo, 1), csr.values.dtype))[:, 0]
    P = _product(csr, csr.ones, jnp.concatenate([mean_other, other_bias[..., None]], axis=-1))
    return sumY[None] - P[..., K] - jnp.sum(mean_self * P[..., :K], axis=-1)


def _update_factor(
    csr: CSR,
    mean_other,
    cov_other,
    prior_precision,
    tau,
    prior_shift=None,
    self_bias=None,
    other_bias=None,
):
    """The optimal ``q`` of every row; ``prior_shift`` is ``E[Lambda mu]`` (C, K) or, for
    rows with their own prior means (a feature link), ``E[Lambda mu_i]`` (C, m, K)."""
    P = row_precision(csr, cov_other + outer(mean_other), prior_precision, _bcast(tau, 4))
    L = cholesky_rows(P)
    if self_bias is None:
        rhs = row_rhs(csr, mean_other, _bcast(tau, 3))
    else:
        rhs = _bcast(tau, 3) * _resid_rhs(csr, mean_other, self_bias, other_bias)
    if prior_shift is not None:
        rhs = rhs + (prior_shift if prior_shift.ndim == 3 else prior_shift[:, None, :])
    return solve_rows(L, rhs), _inverse_from_cholesky(L)


def _expected_S(m, V, n, W):
    return (
        jnp.sum(m**2, axis=1)
        + jnp.sum(jnp.diagonal(V, axis1=-2, axis2=-1), axis=1)
        + jnp.sum(n**2, axis=1)
        + jnp.sum(jnp.diagonal(W, axis1=-2, axis2=-1), axis=1)
    )


def _factor_stats(prior: Prior, m, V, n, W, comm: sh.Comm):
    """The prior's statistics of ``q(M)`` and ``q(N)``, padding rows zeroed, psummed."""
    if _is_linked(prior):  # one device (update refuses a mesh)
        return prior.vb_side_stats(m, V, "M"), prior.vb_side_stats(n, W, "N")
    return (
        comm.psum(prior.vb_factor_stats(comm.mask(m, 0), comm.mask(V, 0))),
        comm.psum(prior.vb_factor_stats(comm.mask(n, 1), comm.mask(W, 1))),
    )


def _bias_sums(bias: dict, comm: sh.Comm) -> dict:
    """``sum_i E[b_i^2]``, ``sum_i log Var b_i`` and the same for ``c`` (C,) each, psummed."""
    out = {}
    for side, which in (("b", 0), ("c", 1)):
        mean, var = bias[f"{side}_mean"], bias[f"{side}_var"]
        out[f"{side}_sq"] = jnp.sum(comm.mask(mean**2 + var, which), axis=1)
        out[f"{side}_logvar"] = jnp.sum(comm.mask(jnp.log(var), which), axis=1)
    return comm.psum(out)


def _body(
    rows: CSR,
    cols: CSR,
    n,
    W,
    qp: dict,
    tau,
    bias: dict,
    comm: sh.Comm,
    *,
    prior: Prior,
    biases,
    dims,
):
    """The CAVI updates of q(M), q(N), the biases' q (when ``bias``) and the prior's
    statistics; ``comm`` says how rows are spread (identity on one device; all-gathers
    and a psum inside ``shard_map``).  ``tau`` is the block precision (scalar or (C,))."""
    (PM, sM), (PN, sN) = prior.vb_row_priors(qp)
    if not bias:
        m, V = _update_factor(rows, comm.gather(n), comm.gather(W), PM, tau, sM)
        n, W = _update_factor(cols, comm.gather(m), comm.gather(V), PN, tau, sN)
    else:
        Ec = comm.gather(bias["c_mean"])
        m, V = _update_factor(rows, comm.gather(n), comm.gather(W), PM, tau, sM, bias["b_mean"], Ec)
        m_all = comm.gather(m)
        n, W = _update_factor(
            cols, m_all, comm.gather(V), PN, tau, sN, bias["c_mean"], comm.gather(bias["b_mean"])
        )
        # q(b_i) given q(M), q(N), q(c), then q(c_j) given the new q(b); then q(s_b^2), q(s_c^2)
        dt = m.dtype
        b_mean, b_var = biases.vb_bias_update(
            _bias_resid_sum(rows, comm.gather(n), m, Ec),
            _counts(rows, dt)[None],
            tau,
            bias["sb_shape"],
            bias["sb_rate"],
        )
        c_mean, c_var = biases.vb_bias_update(
            _bias_resid_sum(cols, m_all, n, comm.gather(b_mean)),
            _counts(cols, dt)[None],
            tau,
            bias["sc_shape"],
            bias["sc_rate"],
        )
        bias = {**bias, "b_mean": b_mean, "b_var": b_var, "c_mean": c_mean, "c_var": c_var}
        sums = _bias_sums(bias, comm)
        bias["sb_shape"], bias["sb_rate"] = biases.vb_variance_update(sums["b_sq"], dims[0])
        bias["sc_shape"], bias["sc_rate"] = biases.vb_variance_update(sums["c_sq"], dims[1])
    ES = comm.psum(_expected_S(comm.mask(m, 0), comm.mask(V, 0), comm.mask(n, 1), comm.mask(W, 1)))
    stats = _factor_stats(prior, m, V, n, W, comm)
    return m, V, n, W, ES, bias, stats


def _parts_body(rows: CSR, m, V, n, W, bias: dict, comm: sh.Comm, *, prior: Prior | None = None):
    """What the ELBO needs of the factors and biases, psummed over devices:
    ``sq = sum_k E_q[(Y_k - theta_k)^2]`` (C,), ``logdet`` the sum of the covariances'
    log-determinants (C,), the biases' sums (with biases) and the prior's factor
    statistics (with ``prior``).

    ``sum_k E[(Y - M_i.N_j)^2] = sum_k Y^2 - 2 sum_i m_i . (sum_j Y n_j)
    + sum_i <V_i + m_i m_i^T, sum_j (W_j + n_j n_j^T)>``: the last sum is the sparse
    product of the precision computation, so no ``n x K x K`` array is built.  With biases
    ``Y_k`` becomes the residual ``R_k = Y_k - E[b_i] - E[c_j]`` (per-entry gathers of the
    bias vectors for ``sum_k R_k^2``, sparse products for ``sum_k R_k n_j``) and each
    rating adds ``Var b_i + Var c_j``.
    """
    C, _, K = m.shape
    n_all, W_all = comm.gather(n), comm.gather(W)
    G = row_precision(rows, W_all + outer(n_all), jnp.zeros((C, K), m.dtype), 1.0)
    if not bias:
        yn = row_rhs(rows, n_all, 1.0)
        sq = (
            jnp.sum(rows.values**2)
            - 2.0 * jnp.sum(m * yn, axis=(1, 2))
            + jnp.sum((V + outer(m)) * G, axis=(1, 2, 3))
        )
    else:
        Ec, Vc = comm.gather(bias["c_mean"]), comm.gather(bias["c_var"])
        nnz = rows.index.shape[0]
        counts = jnp.diff(rows.indptr)
        row_id = jnp.repeat(jnp.arange(counts.shape[0]), counts, total_repeat_length=nnz)
        R = rows.values[None] - bias["b_mean"][:, row_id] - Ec[:, rows.index]
        var = bias["b_var"][:, row_id] + Vc[:, rows.index]
        rn = _resid_rhs(rows, n_all, bias["b_mean"], Ec)
        sq = (
            jnp.sum(rows.ones[None] * (R**2 + var), axis=1)
            - 2.0 * jnp.sum(m * rn, axis=(1, 2))
            + jnp.sum((V + outer(m)) * G, axis=(1, 2, 3))
        )
    logdet = jnp.sum(comm.mask(jnp.linalg.slogdet(V)[1], 0), axis=1) + jnp.sum(
        comm.mask(jnp.linalg.slogdet(W)[1], 1), axis=1
    )
    out = {"sq": comm.psum(sq), "logdet": comm.psum(logdet)}
    if bias:
        out["bias"] = _bias_sums(bias, comm)
    if prior is not None:
        out["stats"] = _factor_stats(prior, m, V, n, W, comm)
    return out


def _parts(state: VBState, rows: CSR, prior, mesh, dims):
    """:func:`_parts_body` on one device or on the mesh, and ``n_obs``."""
    if mesh is None:
        return _parts_body(
            rows, state.m, state.V, state.n, state.W, state.bias, sh.LOCAL, prior=prior
        ), rows.values.shape[0]

    def body(rows, m_l, V_l, n_l, W_l, bias):
        return _parts_body(
            sh.local_csr(rows), m_l, V_l, n_l, W_l, bias, sh.sharded_comm(dims), prior=prior
        )

    parts = jax.shard_map(
        body,
        mesh=mesh,
        in_specs=(_CSR, _F, _F4, _F, _F4, _bias_specs(state.bias)),
        out_specs=_R,
        check_vma=False,
    )(rows, state.m, state.V, state.n, state.W, state.bias)
    return parts, jnp.sum(rows.ones)  # the padding entries of the blocks are zeros


def _check_links(prior, links, mesh):
    prior = vb_prior(prior, links)
    if _is_linked(prior) and mesh is not None:
        raise ValueError(
            f"{prior.name} with feature links runs on one device: its sharded VB update is not "
            "implemented (drop devices=)"
        )
    return prior


def update(
    state: VBState,
    rows: CSR,
    cols: CSR,
    prior: Prior,
    tau,
    *,
    likelihood=None,
    biases=None,
    mesh=None,
    dims=None,
    latent=None,
    links: dict | None = None,
) -> VBState:
    """One CAVI iteration: ``q(M)``, then ``q(N)``, then (with biases) ``q(b)``, ``q(c)``,
    ``q(s_b^2)``, ``q(s_c^2)``, then the prior's q (:meth:`~bmczoo.priors.Prior.vb_step`),
    then (learned likelihood) ``q(tau)``.  Each step is the exact optimum of its factor
    given the others, so the ELBO never decreases.

    ``tau`` is the fixed likelihood precision (the block precision of a learned
    likelihood comes from ``state.noise``).  With ``mesh`` (see :func:`shard_state`),
    ``rows``/``cols`` are the per-device blocks of
    :func:`bmczoo.inference.sharding.shard_csr` and ``dims`` the true ``(m1, m2)``; the
    same body runs on each device.  ``links``: the arrays of a prior's feature links
    (``prior.gibbs_links``; one device), updated as :class:`~bmczoo.priors.macau.VBLink`
    says.
    """
    prior = _check_links(prior, links, mesh)
    lik = Tempered() if likelihood is None else likelihood
    if bool(state.bias) != (biases is not None):
        raise ValueError(
            "the VB state and the biases argument disagree (biases on in one, off in the other)"
        )
    if lik is not None and lik.latent:
        return _latent_update(state, rows, cols, prior, lik, biases, latent)
    qp = prior_q(state)
    t = lik.vb_block_precision(state.noise, tau)
    kw = dict(prior=prior, biases=biases)
    if mesh is None:
        dims = rows.shape
        m, V, n, W, ES, bias, stats = _body(
            rows, cols, state.n, state.W, qp, t, state.bias, sh.LOCAL, dims=dims, **kw
        )
    else:

        def body(rows, cols, n_l, W_l, qp, t, bias):
            return _body(
                sh.local_csr(rows),
                sh.local_csr(cols),
                n_l,
                W_l,
                qp,
                t,
                bias,
                sh.sharded_comm(dims),
                dims=dims,
                **kw,
            )

        bspec = _bias_specs(state.bias)
        m, V, n, W, ES, bias, stats = jax.shard_map(
            body,
            mesh=mesh,
            in_specs=(_CSR, _CSR, _F, _F4, _R, _R, bspec),
            out_specs=(_F, _F4, _F, _F4, _R, bspec, _R),
            check_vma=False,
        )(rows, cols, state.n, state.W, qp, t, state.bias)
    if _is_linked(prior):  # q(B), q(lam_B) and q(mu, Lambda) need the current q
        step = prior.vb_step(stats[0], stats[1], dims[0], dims[1], m.dtype, q=qp)
    else:
        step = prior.vb_step(stats[0], stats[1], dims[0], dims[1], m.dtype)
    inv_gamma, rest = _split_prior_q(step)
    new = VBState(
        m=m, V=V, n=n, W=W, inv_gamma=inv_gamma, ES=ES, prior=rest, noise=state.noise, bias=bias
    )
    if lik.learned:
        parts, n_obs = _parts(new, rows, None, mesh, dims)
        new = new._replace(noise=lik.vb_step(state.noise, parts["sq"], n_obs))
    return new


def expected_sq_error(state: VBState, rows: CSR) -> jax.Array:
    """``sum_k E_q[(Y_k - theta_k)^2]`` for each run (one device; biases included)."""
    return _parts_body(rows, state.m, state.V, state.n, state.W, state.bias, sh.LOCAL)["sq"]


def elbo(
    state: VBState,
    rows: CSR,
    prior: Prior,
    tau,
    *,
    likelihood=None,
    biases=None,
    mesh=None,
    dims=None,
    latent=None,
    links: dict | None = None,
) -> jax.Array:
    """The evidence lower bound of each run (C,).

    Exact for any q-state of the parts that store all their parameters (factors,
    Normal-Wishart, ``q(tau)``, biases); a column-scale prior's ``q(gamma)`` is taken at
    its optimum for the current ``E[S]`` (true right after :func:`update`).

    The likelihood term is the likelihood component's
    :meth:`~bmczoo.likelihoods.base.Likelihood.vb_elbo_term` (default: the Gaussian
    ``N(Y | theta, 1/tau)``, normalising constant included, so that the ELBO is a bound
    on the log evidence of that Gaussian model; learned noise: tempered log-likelihood
    plus ``E[log p(tau)] - E[log q(tau)]``).  ``mesh``/``dims``/``links`` as in
    :func:`update`.
    """
    prior = _check_links(prior, links, mesh)
    lik = Tempered() if likelihood is None else likelihood
    if lik is not None and lik.latent:
        return _latent_elbo(state, rows, prior, lik, biases, latent)
    parts, n_obs = _parts(state, rows, prior, mesh, dims)
    loglik = lik.vb_elbo_term(state.noise, n_obs, parts["sq"], tau)
    return _elbo_rest(state, parts, loglik, prior, biases, rows.shape if mesh is None else dims)


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


# ---------------------------------------------------------------- latent likelihoods
# Probit and ordered probit (bmczoo.likelihoods.probit): q(z_k) is N(E_q[theta_k], 1)
# truncated to the level's interval (its optimum given q(theta)), the factor and bias
# updates are the Gaussian ones with tau = 1 and E_q[z] in place of the ratings, and
# learned cut points are point estimates (VB-EM: each iteration moves them uphill on
# sum_k log Z_k(c) + log p(c), the ELBO with q(z) optimal, accepting only increases).
# The likelihood's ELBO term: E[log p(z | theta)] + H[q(z)] = sum_k log Z_k - Var_q[theta_k] / 2,
# with Z_k = P(level interval) under N(E_q[theta_k], 1), plus log p(c).


def ratings_mean(state: VBState, rows: CSR) -> jax.Array:
    """``E_q[theta_k]`` (C, n) at every rating in row order (biases included)."""
    rid = _row_ids(rows)
    mu = jnp.einsum("cnk,cnk->cn", state.m[:, rid], state.n[:, rows.index])
    if state.bias:
        mu = mu + state.bias["b_mean"][:, rid] + state.bias["c_mean"][:, rows.index]
    return mu


def _cuts(state: VBState, lik, C: int, dtype) -> jax.Array:
    if "cuts" in state.noise:
        return state.noise["cuts"]
    return jnp.broadcast_to(jnp.asarray(lik.fixed_cuts(), dtype), (C, len(lik.fixed_cuts())))


def _log_Z(mu, cuts, levels):
    """``sum_k log P(level_k | mu_k, c)`` (C,) (one-sided end levels: finite gradients)."""
    from ..likelihoods.probit import level_log_probs

    logp = level_log_probs(mu, cuts[:, None, :])  # (C, n, L)
    return jnp.sum(
        jnp.take_along_axis(logp, jnp.broadcast_to(levels, mu.shape)[..., None], axis=-1)[..., 0],
        axis=-1,
    )


def _cut_step(lik, mu, cuts, levels, steps: int = 8):
    """VB-EM ascent of the cut points of each run: gradient steps on ``f(c) = sum_k log
    Z_k(c) + log p(c)`` with step halving, a step kept only when ``f`` increases (so the
    ELBO never decreases); ``steps`` trials per iteration."""

    def f(c, m):
        return _log_Z(m[None], c[None], levels)[0] + lik.cut_log_prior(c)

    def one_run(c, m):
        def body(carry, _):
            c, lr = carry
            val, g = jax.value_and_grad(f)(c, m)
            prop = c + lr * g
            ok = jnp.all(jnp.diff(prop) > 0)
            new_val = jnp.where(ok, f(jnp.where(ok, prop, c), m), -jnp.inf)
            better = new_val > val
            return (jnp.where(better, prop, c), jnp.where(better, lr * 1.5, lr * 0.25)), None

        lr0 = 1.0 / (levels.shape[0] + 1.0)
        (c, _), _ = lax.scan(body, (c, jnp.asarray(lr0, c.dtype)), None, length=steps)
        return c

    return jax.vmap(one_run)(cuts, mu)


def _per_run(rows: CSR, cols: CSR, values, col_perm, fn):
    """``fn(c, rows_c, cols_c)`` for each run ``c`` with its own values (C, n) (row order)
    in the CSRs; results stacked on the run axis."""
    outs = [
        fn(c, rows._replace(values=values[c]), cols._replace(values=values[c][col_perm]))
        for c in range(values.shape[0])
    ]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *outs)


def _run(state: VBState, c: int) -> VBState:
    return jax.tree.map(lambda x: x[c : c + 1], state)


def _latent_update(
    state: VBState, rows: CSR, cols: CSR, prior: Prior, lik, biases, latent
) -> VBState:
    """One CAVI iteration of a latent likelihood: the cut points (learned), ``q(z)``, then
    the Gaussian updates with ``E_q[z]`` as the ratings and ``tau = 1``."""
    from ..likelihoods import truncnorm

    if latent is None:
        raise ValueError("a latent likelihood's VB update needs latent=(levels, col_perm)")
    levels, col_perm = latent
    C = state.m.shape[0]
    mu = ratings_mean(state, rows)
    cuts = _cuts(state, lik, C, mu.dtype)
    noise = state.noise
    if "cuts" in noise:
        cuts = _cut_step(lik, mu, cuts, levels)
        noise = {**noise, "cuts": cuts}
    lo, hi = jax.vmap(lambda c: lik.latent_interval(c, levels, c.dtype))(cuts)  # (C, n) each
    Ez = truncnorm.moments(mu, lo, hi)[0]
    gauss = state._replace(noise={})
    new = _per_run(
        rows,
        cols,
        Ez,
        col_perm,
        lambda c, r, k: update(
            _run(gauss, c), r, k, prior, jnp.asarray(1.0, mu.dtype), biases=biases
        ),
    )
    return new._replace(noise=noise)


def _latent_elbo(state: VBState, rows: CSR, prior: Prior, lik, biases, latent) -> jax.Array:
    """The ELBO of a latent likelihood (C,) (cut points at their point estimates, their
    log prior density included)."""
    levels, _ = latent
    C = state.m.shape[0]
    mu = ratings_mean(state, rows)
    cuts = _cuts(state, lik, C, mu.dtype)
    out = []
    for c in range(C):
        run = _run(state, c)
        # with the ratings replaced by E_q[theta], sum_k E[(Y_k - theta_k)^2] = sum_k Var_q[theta_k]
        parts = _parts_body(
            rows._replace(values=mu[c]), run.m, run.V, run.n, run.W, run.bias, sh.LOCAL, prior=prior
        )
        loglik = _log_Z(mu[c : c + 1], cuts[c : c + 1], levels) - 0.5 * parts["sq"]
        if "cuts" in state.noise:
            loglik = loglik + lik.cut_log_prior(cuts[c])
        out.append(_elbo_rest(run, parts, loglik, prior, biases, rows.shape))
    return jnp.concatenate(out)


# ---------------------------------------------------------------- several devices
# The same iteration with the rows of q(M) / q(N) and the ratings split over the devices
# of a mesh (see bmczoo.inference.sharding): the arrays of the state have their rows
# padded to a multiple of the device count; padding rows have no ratings and are masked
# out of E[S] and of the ELBO.

_F = jax.sharding.PartitionSpec(None, sh.AXIS, None)
_F4 = jax.sharding.PartitionSpec(None, sh.AXIS, None, None)
_R = jax.sharding.PartitionSpec()
_CSR = jax.sharding.PartitionSpec(sh.AXIS)


_B = jax.sharding.PartitionSpec(None, sh.AXIS)

#: keys of the biases' q-state with a row axis (0: rows of M, 1: rows of N)
_BIAS_ROWS = {"b_mean": 0, "b_var": 0, "c_mean": 1, "c_var": 1}


def _bias_specs(bias: dict) -> dict:
    return {k: (_B if k in _BIAS_ROWS else _R) for k in bias}


def shard_state(state: VBState, mesh) -> VBState:
    """Pad the rows of ``state`` to a multiple of the device count and shard them."""
    D = mesh.devices.size

    def put(x, rows_axis=True):
        if not rows_axis:
            return sh.put(x, sh.replicated(mesh))
        pad = sh.padded_size(x.shape[1], D) - x.shape[1]
        x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
        spec = {2: _B, 3: _F, 4: _F4}[x.ndim]
        return sh.put(x, jax.sharding.NamedSharding(mesh, spec))

    rep = lambda d: {k: put(v, False) for k, v in d.items()}  # noqa: E731
    return VBState(
        m=put(state.m),
        V=put(state.V),
        n=put(state.n),
        W=put(state.W),
        inv_gamma=None if state.inv_gamma is None else put(state.inv_gamma, False),
        ES=put(state.ES, False),
        prior=rep(state.prior),
        noise=rep(state.noise),
        bias={k: put(v, k in _BIAS_ROWS) for k, v in state.bias.items()},
    )


def unshard_state(state: VBState, dims: tuple[int, int]) -> VBState:
    """Drop the padding rows of a sharded state."""
    m1, m2 = dims
    bias = {
        k: (v[:, : dims[_BIAS_ROWS[k]]] if k in _BIAS_ROWS else v) for k, v in state.bias.items()
    }
    return state._replace(
        m=state.m[:, :m1], V=state.V[:, :m1], n=state.n[:, :m2], W=state.W[:, :m2], bias=bias
    )


#: the parts of a :class:`VBState` that are dicts of arrays (the components' own parameters)
_DICT_PARTS = ("prior", "noise", "bias")


def state_arrays(state: VBState) -> dict:
    """The arrays of a (one-device) VB state by name: ``state/m``, ...,
    ``state/prior/mu_M``, ``state/noise/shape``, ``state/bias/b_mean`` (absent parts are
    not written); :func:`state_from_arrays` reads them back."""
    out = {}
    for f in VBState._fields:
        v = getattr(state, f)
        if isinstance(v, dict):
            out.update({f"state/{f}/{k}": sh.to_host(x) for k, x in v.items()})
        elif v is not None:
            out[f"state/{f}"] = sh.to_host(v)
    return out


def state_from_arrays(arrays: dict, template: VBState | None = None) -> VBState:
    """Inverse of :func:`state_arrays`.  With ``template`` (a run's starting state, as when
    a checkpoint is resumed) the parts and keys are the template's, as device arrays, and a
    missing one raises ``ValueError``; without, whatever ``arrays`` holds (a saved fit)."""
    fields = {}
    for f in VBState._fields:
        pre = f"state/{f}/"
        if template is not None:
            t = getattr(template, f)
            try:
                if isinstance(t, dict):
                    fields[f] = {k: jnp.asarray(arrays[pre + k]) for k in t}
                else:
                    fields[f] = None if t is None else jnp.asarray(arrays[f"state/{f}"])
            except KeyError as err:
                raise ValueError(
                    f"the checkpoint has no VB state array {err.args[0]!r} for this model"
                ) from None
        elif f"state/{f}" in arrays:
            fields[f] = arrays[f"state/{f}"]
        else:
            sub = {k[len(pre) :]: v for k, v in arrays.items() if k.startswith(pre)}
            fields[f] = sub if f in _DICT_PARTS else None
    return VBState(**fields)

"""The CAVI updates of mean-field VB for every model of the zoo.

``q = prod_i N(m_i, V_i) prod_j N(n_j, W_j) q(prior variables) [q(tau)] [q(biases)]``
(docs/algorithms.md, "Mean-field variational Bayes").  One iteration updates all
``q(M_i)`` (one batched Cholesky, the same sparse products as the Gibbs sweep, see
:mod:`bmczoo.linalg`), then all ``q(N_j)``, then the biases' q (row biases,
column biases, their variances) when the model has biases, then the prior's q through
its VB hooks (:meth:`~bmczoo.priors.Prior.vb_state`, ``vb_row_priors``,
``vb_factor_stats``, ``vb_step``, ``vb_elbo_term``; column scales ``q(gamma)`` from
:meth:`~bmczoo.priors.Prior.vb_update` by default, Normal-Wishart ``q(mu, Lambda)``;
with feature links, ``links=`` the arrays of ``prior.gibbs_links``, also ``q(B)`` and
``q(lam_B)`` of each linked factor: :class:`bmczoo.priors.macau.VBLink`),
then ``q(tau)`` when the likelihood learns it (its ``vb_*`` methods).  The ELBO
(:mod:`.elbo`) reads the same expectations (:func:`parts_of`); coordinate ascent never
decreases it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ...likelihoods import Tempered
from ...priors import Prior
from .. import sharding as sh
from ...linalg import (
    CSR,
    cholesky_rows,
    outer,
    pattern_product,
    row_ids,
    row_precision,
    row_rhs,
    solve_rows,
)
from . import all_pairs
from .state import (
    BLOCKS,
    COVARIANCES,
    FACTORS,
    REPLICATED,
    Sharded,
    VBState,
    bias_specs,
    check_bias_links,
    check_links,
    cuts_of,
    split_links,
    is_linked,
    one_run,
    prior_q,
    ratings_mean,
    split_prior_q,
)

__all__ = ["update", "parts_of", "parts_body", "log_Z", "rating_expected_sq"]


def _inverse_from_cholesky(L: jax.Array) -> jax.Array:
    K = L.shape[-1]
    eye = jnp.broadcast_to(jnp.eye(K, dtype=L.dtype), L.shape)
    Linv = lax.linalg.triangular_solve(L, eye, left_side=True, lower=True)
    return jnp.swapaxes(Linv, -1, -2) @ Linv


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
    """The rows' sums of the pattern's entries ``csr.ones`` (their numbers of ratings, or
    of weights in a weighted update; padding entries are zeros)."""
    counts = jnp.diff(csr.indptr)
    nnz = csr.index.shape[0]
    row_id = jnp.repeat(jnp.arange(counts.shape[0]), counts, total_repeat_length=nnz)
    return jax.ops.segment_sum(csr.ones, row_id, num_segments=counts.shape[0]).astype(dtype)


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
    shared=None,
    dense=None,
):
    """The optimal ``q`` of every row; ``prior_shift`` is ``E[Lambda mu]`` (C, K) or, for
    rows with their own prior means (a feature link), ``E[Lambda mu_i]`` (C, m, K);
    ``shared`` (C, K, K) a term added to every row's precision (an ``all_pairs``
    likelihood's unrated pairs: :func:`_shared_gram`), ``dense`` their
    :class:`~bmczoo.inference.vb.all_pairs.DenseSums` (with biases: the unrated pairs'
    targets 0 minus the biases, ``-u (E[b_i] sum_j E[F_j] + sum_j E[c_j] E[F_j])`` in the
    right-hand sides)."""
    P = row_precision(csr, cov_other + outer(mean_other), prior_precision, _bcast(tau, 4))
    if shared is not None:
        P = P + shared[:, None]
    L = cholesky_rows(P)
    if self_bias is None:
        rhs = row_rhs(csr, mean_other, _bcast(tau, 3))
    else:
        resid = _resid_rhs(csr, mean_other, self_bias, other_bias)
        if dense is not None:
            resid = resid - self_bias[..., None] * dense.F1[:, None] - dense.Fc[:, None]
        rhs = _bcast(tau, 3) * resid
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
    if is_linked(prior):  # one device (update refuses a mesh)
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


class _Model(NamedTuple):
    """What an update's body reads besides arrays: the prior (as :func:`vb_prior` binds
    it), the biases component (or None), the true ``(m1, m2)`` and an ``all_pairs``
    likelihood's unrated pairs' weight (None: the ratings alone)."""

    prior: Prior
    biases: Any
    dims: tuple[int, int]
    unrated: float | None = None


def _shared_gram(model: _Model, mean_other, cov_other, tau):
    """``tau u sum_j E[F_j F_j^T] = tau u (F^T F + sum_j S_j)`` (C, K, K) over every row of
    the other factor (means ``mean_other``, covariances ``cov_other``, all rows): the
    unrated pairs' term of every row's precision, one matrix shared by the rows (None
    without an ``all_pairs`` likelihood)."""
    if model.unrated is None:
        return None
    G = all_pairs.second_moments(mean_other, cov_other)
    return (_bcast(tau, 3) * model.unrated) * G


def _dense(model: _Model, mean_other, other_bias):
    """The unrated pairs' :class:`~bmczoo.inference.vb.all_pairs.DenseSums` of the other
    side (None without an ``all_pairs`` likelihood)."""
    if model.unrated is None:
        return None
    return all_pairs.dense_sums(model.unrated, mean_other, other_bias)


def _bias_sums_of(csr: CSR, mean_other, mean_self, other_bias, dense):
    """A side's biases' residual sums (C, m) and counts ((1, m) or (C, m)) for
    ``vb_bias_update``: over the ratings (:func:`_bias_resid_sum`, :func:`_counts`), and
    with ``dense`` (an ``all_pairs`` likelihood) over every pair: ``- u sum_j E[c_j] - u
    m_i . sum_j E[F_j]`` and ``+ u m`` (the ratings' entries weigh ``w_k - u``)."""
    resid = _bias_resid_sum(csr, mean_other, mean_self, other_bias)
    counts = _counts(csr, mean_self.dtype)[None]
    if dense is None:
        return resid, counts
    resid = resid - dense.c1[:, None] - jnp.sum(mean_self * dense.F1[:, None], axis=-1)
    return resid, counts + dense.count


def _body(rows: CSR, cols: CSR, n, W, qp: dict, tau, bias: dict, comm: sh.Comm, model: _Model):
    """The CAVI updates of q(M), q(N), the biases' q (when ``bias``) and the prior's
    statistics; ``comm`` says how rows are spread (identity on one device; all-gathers
    and a psum inside ``shard_map``).  ``tau`` is the block precision (scalar or (C,))."""
    prior, biases, dims = model.prior, model.biases, model.dims
    (PM, sM), (PN, sN) = prior.vb_row_priors(qp)
    if not bias:
        n_all, W_all = comm.gather(n), comm.gather(W)
        shared = _shared_gram(model, n_all, W_all, tau)
        m, V = _update_factor(rows, n_all, W_all, PM, tau, sM, shared=shared)
        m_all, V_all = comm.gather(m), comm.gather(V)
        shared = _shared_gram(model, m_all, V_all, tau)
        n, W = _update_factor(cols, m_all, V_all, PN, tau, sN, shared=shared)
    else:
        Ec, Eb = comm.gather(bias["c_mean"]), comm.gather(bias["b_mean"])
        n_all, W_all = comm.gather(n), comm.gather(W)
        shared, dense = _shared_gram(model, n_all, W_all, tau), _dense(model, n_all, Ec)
        m, V = _update_factor(rows, n_all, W_all, PM, tau, sM, bias["b_mean"], Ec, shared, dense)
        m_all, V_all = comm.gather(m), comm.gather(V)
        shared, dense = _shared_gram(model, m_all, V_all, tau), _dense(model, m_all, Eb)
        n, W = _update_factor(cols, m_all, V_all, PN, tau, sN, bias["c_mean"], Eb, shared, dense)
        # q(b_i) given q(M), q(N), q(c), then q(c_j) given the new q(b); then q(s_b^2), q(s_c^2)
        # (with features first q(w), q(lam_w) of each linked side: bmczoo.offsets.bias_link_vb)
        mb, mc = biases.vb_prior_means(bias)
        n_all = comm.gather(n)
        resid, counts = _bias_sums_of(rows, n_all, m, Ec, _dense(model, n_all, Ec))
        b_mean, b_var = biases.vb_bias_update(
            resid, counts, tau, bias["sb_shape"], bias["sb_rate"], mb
        )
        Eb = comm.gather(b_mean)
        resid, counts = _bias_sums_of(cols, m_all, n, Eb, _dense(model, m_all, Eb))
        c_mean, c_var = biases.vb_bias_update(
            resid, counts, tau, bias["sc_shape"], bias["sc_rate"], mc
        )
        bias = {**bias, "b_mean": b_mean, "b_var": b_var, "c_mean": c_mean, "c_var": c_var}
        bias.update(biases.vb_variances(bias, _bias_sums(bias, comm), dims))
    ES = comm.psum(_expected_S(comm.mask(m, 0), comm.mask(V, 0), comm.mask(n, 1), comm.mask(W, 1)))
    stats = _factor_stats(prior, m, V, n, W, comm)
    return m, V, n, W, ES, bias, stats


def parts_body(rows: CSR, m, V, n, W, bias: dict, comm: sh.Comm, *, prior: Prior | None = None):
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


def parts_of(state: VBState, rows: CSR, prior, sharded: Sharded | None):
    """:func:`parts_body` on one device or on the mesh of ``sharded``, and ``n_obs``."""
    if sharded is None:
        return parts_body(
            rows, state.m, state.V, state.n, state.W, state.bias, sh.LOCAL, prior=prior
        ), rows.values.shape[0]

    def body(rows, m_l, V_l, n_l, W_l, bias):
        return parts_body(
            sh.local_csr(rows), m_l, V_l, n_l, W_l, bias, sh.sharded_comm(sharded.dims), prior=prior
        )

    parts = jax.shard_map(
        body,
        mesh=sharded.mesh,
        in_specs=(BLOCKS, FACTORS, COVARIANCES, FACTORS, COVARIANCES, bias_specs(state.bias)),
        out_specs=REPLICATED,
        check_vma=False,
    )(rows, state.m, state.V, state.n, state.W, state.bias)
    return parts, jnp.sum(rows.ones)  # the padding entries of the blocks are zeros


def update(
    state: VBState,
    rows: CSR,
    cols: CSR,
    prior: Prior,
    tau,
    *,
    likelihood=None,
    biases=None,
    sharded: Sharded | None = None,
    latent=None,
    links: dict | None = None,
    offsets: tuple = (),
) -> VBState:
    """One CAVI iteration: ``q(M)``, then ``q(N)``, then (with biases) ``q(b)``, ``q(c)``,
    ``q(s_b^2)``, ``q(s_c^2)``, then the prior's q (:meth:`~bmczoo.priors.Prior.vb_step`),
    then (sampled offsets) each offset's q, then (learned likelihood) ``q(tau)``.  Each
    step is the exact optimum of its factor given the others, so the ELBO never decreases.
    An ``all_pairs`` likelihood (one-class) observes every pair: its rows fit the targets
    of its ``gibbs_view`` at the ratings and 0 elsewhere (:mod:`.all_pairs`).

    ``tau`` is the fixed likelihood precision (the block precision of a learned
    likelihood comes from ``state.noise``).  With ``sharded`` (a state of
    :func:`~bmczoo.inference.vb.state.shard_state` on ``sharded.mesh``), ``rows``/``cols``
    are the per-device blocks of :func:`bmczoo.inference.sharding.shard_csr`; the same body
    runs on each device.  ``links``: the arrays of a prior's feature links
    (``prior.gibbs_links``; one device), updated as :class:`~bmczoo.priors.macau.VBLink`
    says, and those of feature-driven biases under ``biases/``
    (``bmczoo.offsets.bias_link_vb.VBBiasLink``).  ``offsets``: pairs ``(offset, its
    arrays at the ratings in row order)`` of the sampled offsets (one device; ``latent``
    gives ``col_perm``), their q in ``state.offsets``.
    """
    links, bias_links = split_links(links)
    prior = check_links(prior, links, sharded)
    biases = check_bias_links(biases, bias_links, sharded)
    lik = Tempered() if likelihood is None else likelihood
    if bool(state.bias) != (biases is not None):
        raise ValueError(
            "the VB state and the biases argument disagree (biases on in one, off in the other)"
        )
    all_pairs.check_support(lik, biases=biases, sharded=sharded, offsets=offsets)
    if offsets:
        if sharded is not None or latent is None:
            raise ValueError("sampled offsets run on one device and need latent=(levels, col_perm)")
        return _offsets_update(state, rows, cols, prior, tau, lik, biases, latent, offsets)
    if lik is not None and lik.latent:
        return _latent_update(state, rows, cols, prior, lik, biases, latent)
    if lik is not None and lik.weighted:
        return _weighted_update(state, rows, cols, prior, lik, biases, latent, tau)
    qp = prior_q(state)
    t = lik.vb_block_precision(state.noise, tau)
    dims = rows.shape if sharded is None else sharded.dims
    model = _Model(prior, biases, dims)
    if lik.all_pairs:  # every pair observed: the ratings' view and the unrated pairs' weight
        rows, cols = all_pairs.views(lik, rows, cols)
        model = model._replace(unrated=lik.unrated_weight())
    if sharded is None:
        m, V, n, W, ES, bias, stats = _body(
            rows, cols, state.n, state.W, qp, t, state.bias, sh.LOCAL, model
        )
    else:
        m, V, n, W, ES, bias, stats = _sharded_body(rows, cols, state, qp, t, sharded, model)
    if is_linked(prior):  # q(B), q(lam_B) and q(mu, Lambda) need the current q
        step = prior.vb_step(stats[0], stats[1], dims[0], dims[1], m.dtype, q=qp)
    else:
        step = prior.vb_step(stats[0], stats[1], dims[0], dims[1], m.dtype)
    inv_gamma, rest = split_prior_q(step)
    new = VBState(
        m=m, V=V, n=n, W=W, inv_gamma=inv_gamma, ES=ES, prior=rest, noise=state.noise, bias=bias
    )
    if lik.learned:
        parts, n_obs = parts_of(new, rows, None, sharded)
        new = new._replace(noise=lik.vb_step(state.noise, parts["sq"], n_obs))
    return new


def _sharded_body(rows: CSR, cols: CSR, state: VBState, qp, t, sharded: Sharded, model: _Model):
    """:func:`_body` on the mesh of ``sharded`` (the same body on each device's rows)."""
    dims = sharded.dims

    def body(rows, cols, n_l, W_l, qp, t, bias):
        local = (sh.local_csr(rows), sh.local_csr(cols))
        return _body(*local, n_l, W_l, qp, t, bias, sh.sharded_comm(dims), model)

    bspec = bias_specs(state.bias)
    return jax.shard_map(
        body,
        mesh=sharded.mesh,
        in_specs=(BLOCKS, BLOCKS, FACTORS, COVARIANCES, REPLICATED, REPLICATED, bspec),
        out_specs=(FACTORS, COVARIANCES, FACTORS, COVARIANCES, REPLICATED, bspec, REPLICATED),
        check_vma=False,
    )(rows, cols, state.n, state.W, qp, t, state.bias)


# ---------------------------------------------------------------- latent likelihoods
# Probit and ordered probit (bmczoo.likelihoods.probit): q(z_k) is N(E_q[theta_k], 1)
# truncated to the level's interval (its optimum given q(theta)), the factor and bias
# updates are the Gaussian ones with tau = 1 and E_q[z] in place of the ratings, and
# learned cut points are point estimates (VB-EM: each iteration moves them uphill on
# sum_k log Z_k(c) + log p(c), the ELBO with q(z) optimal, accepting only increases).
# The likelihood's ELBO term: E[log p(z | theta)] + H[q(z)] = sum_k log Z_k - Var_q[theta_k] / 2,
# with Z_k = P(level interval) under N(E_q[theta_k], 1), plus log p(c).


def log_Z(mu, cuts, levels):
    """``sum_k log P(level_k | mu_k, c)`` (C,) (one-sided end levels: finite gradients)."""
    from ...likelihoods.probit import level_log_probs

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
        return log_Z(m[None], c[None], levels)[0] + lik.cut_log_prior(c)

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


def rating_expected_sq(
    state: VBState, rows: CSR, chunk: int = 4096, shift=None, shift_var=None
) -> jax.Array:
    """``E_q[(Y_k - theta_k)^2]`` (C, n) at every rating in row order (one device; biases
    included): the squared residual of ``E_q[theta_k]`` plus ``Var_q[theta_k] =
    tr(V_i W_j) + m_i^T W_j m_i + n_j^T V_i n_j (+ Var b_i + Var c_j)``, over chunks of
    ``chunk`` ratings (no (n, K, K) array).  With the offsets' moments ``shift``,
    ``shift_var`` (C, n): ``E_q[(Y_k - theta_k - s_k)^2]``."""
    rid, col = row_ids(rows), rows.index
    n = col.shape[0]
    B = max(1, min(chunk, n))
    idx = jnp.minimum(jnp.arange(-(-n // B) * B), n - 1).reshape(-1, B)

    def var_chunk(k):
        i, j = rid[k], col[k]
        Vi, Wj, mi, nj = state.V[:, i], state.W[:, j], state.m[:, i], state.n[:, j]
        return (
            jnp.sum(Vi * Wj, axis=(-2, -1))
            + jnp.einsum("cbk,cbkl,cbl->cb", mi, Wj, mi)
            + jnp.einsum("cbk,cbkl,cbl->cb", nj, Vi, nj)
        )

    var = jnp.moveaxis(lax.map(var_chunk, idx), 0, 1).reshape(state.m.shape[0], -1)[:, :n]
    if state.bias:
        var = var + state.bias["b_var"][:, rid] + state.bias["c_var"][:, col]
    if shift is not None:
        return (rows.values[None] - ratings_mean(state, rows) - shift) ** 2 + var + shift_var
    return (rows.values[None] - ratings_mean(state, rows)) ** 2 + var


def _weighted_update(
    state: VBState, rows: CSR, cols: CSR, prior: Prior, lik, biases, latent, tau
) -> VBState:
    """One CAVI iteration of a weighted likelihood (Student-t): ``q(w)`` given ``q(theta)``
    and ``q(tau)`` (its mean ``E[w]`` from the likelihood's ``vb_weights``), then the
    Gaussian updates with rating ``k``'s precision ``E[tau] E[w_k]`` (each run's pattern
    holding its weights), then ``q(tau)`` given the weighted expected squared error."""
    if latent is None:
        raise ValueError("a weighted likelihood's VB update needs latent=(levels, col_perm)")
    new, w, _ = _weighted_factors(state, rows, cols, prior, lik, biases, latent[1], tau)
    if not lik.learned:
        return new
    sse = jnp.sum(w * rating_expected_sq(new, rows), axis=1)
    return new._replace(noise=lik.vb_step(state.noise, sse, rows.values.shape[0]))


def _weighted_factors(
    state: VBState, rows: CSR, cols: CSR, prior, lik, biases, col_perm, tau, moments=None
):
    """``q(w)`` and the Gaussian updates of a weighted likelihood (``q(tau)`` not updated):
    ``(new state, E[w] (C, n), E[tau] (C,))``; ``moments``: the offsets' ``(E[s], Var[s])``
    (C, n) each, the factors then fitting ``Y - E[s]``."""
    C = state.m.shape[0]
    tau = jnp.broadcast_to(lik.vb_block_precision(state.noise, tau), (C,))  # E_q[tau]
    shift = (None, None) if moments is None else moments
    w = lik.vb_weights(rating_expected_sq(state, rows, 4096, *shift), tau)
    y = rows.values[None]

    def run(c, r, k):
        v = y[0] if moments is None else y[0] - shift[0][c]
        r = r._replace(values=w[c] * v, ones=w[c])
        k = k._replace(values=(w[c] * v)[col_perm], ones=w[c][col_perm])
        return update(one_run(gauss, c), r, k, prior, tau[c : c + 1], biases=biases)

    gauss = state._replace(noise={})
    return _per_run(rows, cols, w, col_perm, run)._replace(noise=state.noise), w, tau


def _latent_update(
    state: VBState, rows: CSR, cols: CSR, prior: Prior, lik, biases, latent
) -> VBState:
    """One CAVI iteration of a latent likelihood: the cut points (learned), ``q(z)``, then
    the Gaussian updates with ``E_q[z]`` as the ratings and ``tau = 1``."""
    if latent is None:
        raise ValueError("a latent likelihood's VB update needs latent=(levels, col_perm)")
    return _latent_factors(state, rows, cols, prior, lik, biases, latent)[0]


def _latent_factors(state: VBState, rows: CSR, cols: CSR, prior, lik, biases, latent, shift=None):
    """The cut points, ``q(z)`` and the Gaussian updates of a latent likelihood: ``(new
    state, E[z] (C, n))``; ``shift``: the offsets' means ``E[s]`` (C, n), added to
    ``E[theta]`` in ``q(z)`` and taken from ``E[z]`` in the factor updates."""
    from ...likelihoods import truncnorm

    levels, col_perm = latent
    C = state.m.shape[0]
    mu = ratings_mean(state, rows)
    if shift is not None:
        mu = mu + shift
    cuts = cuts_of(state, lik, C, mu.dtype)
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
        Ez if shift is None else Ez - shift,
        col_perm,
        lambda c, r, k: update(
            one_run(gauss, c), r, k, prior, jnp.asarray(1.0, mu.dtype), biases=biases
        ),
    )
    return new._replace(noise=noise), Ez


def _offsets_update(
    state: VBState, rows: CSR, cols: CSR, prior: Prior, tau, lik, biases, latent, offsets
) -> VBState:
    """One CAVI iteration with sampled offsets: the likelihood's updates with the factors
    fitting the ratings (``E[z]``) minus ``E_q[s]``, then each offset's q given the
    ratings minus the new ``E_q[theta]``, then a learned ``q(tau)`` given the expected
    squared error, ``sum_k Var_q[s_k]`` included."""
    from . import offsets as vbo

    offs, arrays = tuple(o for o, _ in offsets), tuple(a for _, a in offsets)
    C = state.m.shape[0]
    es, vs = vbo.moments(offs, state.offsets, arrays)
    base = state._replace(offsets={})
    y = jnp.broadcast_to(rows.values[None], es.shape)
    if lik.latent:
        new, values = _latent_factors(base, rows, cols, prior, lik, biases, latent, es)
        precision = jnp.ones_like(es)
    elif lik.weighted:
        new, w, t = _weighted_factors(
            base, rows, cols, prior, lik, biases, latent[1], tau, (es, vs)
        )
        values, precision = y, t[:, None] * w
    else:
        t = jnp.broadcast_to(lik.vb_block_precision(state.noise, tau), (C,))
        gauss = base._replace(noise={})
        new = _per_run(
            rows,
            cols,
            y - es,
            latent[1],
            lambda c, r, k: update(one_run(gauss, c), r, k, prior, t[c : c + 1], biases=biases),
        )._replace(noise=state.noise)
        values, precision = y, jnp.broadcast_to(t[:, None], es.shape)
    q = vbo.block(offs, state.offsets, arrays, values - ratings_mean(new, rows), precision)
    new = new._replace(offsets=q)
    if not lik.learned or lik.latent:
        return new
    es, vs = vbo.moments(offs, q, arrays)
    if lik.weighted:
        sse = jnp.sum(w * rating_expected_sq(new, rows, 4096, es, vs), axis=1)
    else:
        sse = (
            parts_of(new, rows, None, None)[0]["sq"]
            + vbo.sq_correction(y, ratings_mean(new, rows), es)
            + jnp.sum(vs, axis=1)
        )
    return new._replace(noise=lik.vb_step(state.noise, sse, rows.values.shape[0]))

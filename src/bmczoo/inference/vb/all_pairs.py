"""A likelihood that observes every pair of the matrix (``all_pairs``: the one-class
likelihood of implicit feedback) in mean-field VB (docs/algorithms.md, "One-class
likelihood in VB").

The likelihood gives, through the hooks the Gibbs sweep reads, a target ``t_k`` and a
weight ``w_k`` at each rating (:meth:`~bmczoo.likelihoods.Likelihood.gibbs_view`) and the
weight ``u`` of every other pair, observed as 0
(:meth:`~bmczoo.likelihoods.Likelihood.unrated_weight`): pair ``(i, j)`` is Gaussian with
mean ``theta_ij`` and precision ``tau w_ij``.  The CAVI row update of ``q(M_i)`` is then
that of a weighted Gaussian likelihood at the ratings, with the pattern's entries ``w_k -
u`` in the precision and ``w_k t_k`` in the right-hand side (:func:`views`), plus one
``K x K`` matrix ``tau u sum_j E[N_j N_j^T]`` shared by every row
(``cavi._shared_gram``); no ``m1 x m2`` array is built.  With biases ``theta_ij = M_i.N_j
+ b_i + c_j`` the right-hand sides and the biases' updates also read the unrated pairs'
sums ``u sum_j E[N_j]``, ``u sum_j E[c_j] E[N_j]``, ``u sum_j E[c_j]`` and ``u m``, shared
by the rows (:func:`dense_sums`).  The ELBO's expected log-likelihood reads ``sum_ij
E[theta_ij^2]`` (``tr(sum_i E[M_i M_i^T] sum_j E[N_j N_j^T])`` plus the biases' terms,
:func:`all_pairs_second_moment`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from typing import NamedTuple

from ...linalg import CSR, row_ids

__all__ = [
    "check_support",
    "views",
    "DenseSums",
    "dense_sums",
    "second_moments",
    "all_pairs_second_moment",
]


def check_support(lik, *, biases=None, sharded=None, offsets=()) -> None:
    """A clear error where an ``all_pairs`` likelihood's VB update meets what it does not
    implement (sampled offsets, several devices: their updates would need sums over every
    pair of their rows; a learned noise or a per-rating block: no such likelihood).  The
    biases are implemented (:func:`dense_sums`).

    Parameters
    ----------
    lik : bmczoo.likelihoods.Likelihood
        The likelihood (nothing is checked unless it is ``all_pairs``).
    biases : object, optional
        The biases component of the fit (None: no biases); accepted.
    sharded : object, optional
        The mesh the rows are spread over (None: one device).
    offsets : tuple
        The sampled offsets.
    """
    if not lik.all_pairs:
        return
    what = {
        "sampled offsets (context=)": bool(offsets),
        "several devices (devices=)": sharded is not None,
        "a learned noise precision": lik.learned,
        "a per-rating block": lik.latent or lik.weighted,
    }
    bad = [name for name, given in what.items() if given]
    if bad:
        raise ValueError(
            f"the {lik.name} likelihood's VB update does not implement {bad[0]}: its "
            "updates would need sums over every pair of the matrix (drop it)"
        )


def _side(lik, csr: CSR, rows, cols) -> CSR:
    """``csr`` with the entries ``w_k t_k`` (values) and ``w_k - u`` (pattern)."""
    t, w = lik.gibbs_view(csr.values, rows, cols)
    u = lik.unrated_weight()
    return csr._replace(values=csr.ones * (w * t), ones=csr.ones * (w - u))


def views(lik, rows: CSR, cols: CSR) -> tuple[CSR, CSR]:
    """The ratings by rows and by columns as an ``all_pairs`` likelihood's VB update reads
    them: values ``w_k t_k`` (the right-hand sides ``tau sum_j w t E[N_j]``; the unrated
    pairs' targets are 0) and pattern entries ``w_k - u`` (the precisions' sparse part; the
    unrated weight ``u`` of every pair is added apart, once, by the shared term).

    Parameters
    ----------
    lik : bmczoo.likelihoods.Likelihood
        An ``all_pairs`` likelihood.
    rows, cols : CSR
        The ratings grouped by rows and by columns (values: the data's values).

    Returns
    -------
    tuple of CSR
        The two views, same patterns.
    """
    return (
        _side(lik, rows, row_ids(rows), rows.index),
        _side(lik, cols, cols.index, row_ids(cols)),
    )


class DenseSums(NamedTuple):
    """The unrated pairs' sums over every row ``j`` of the other side that a row's bias
    and right-hand side read, shared by the rows: ``F1 = u sum_j E[F_j]`` (C, K), ``Fc =
    u sum_j E[c_j] E[F_j]`` (C, K), ``c1 = u sum_j E[c_j]`` (C,) and ``count = u m``."""

    F1: jax.Array
    Fc: jax.Array
    c1: jax.Array
    count: float


def dense_sums(unrated: float, mean_other, other_bias) -> DenseSums:
    """The :class:`DenseSums` of the other side's means (all rows, one device).

    Parameters
    ----------
    unrated : float
        The unrated pairs' weight ``u``.
    mean_other : jax.Array, shape (C, m_other, K)
        ``E[F_j]`` of the other factor.
    other_bias : jax.Array, shape (C, m_other)
        ``E[c_j]`` of the other side's biases.
    """
    return DenseSums(
        unrated * jnp.sum(mean_other, axis=1),
        unrated * jnp.einsum("cj,cjk->ck", other_bias, mean_other),
        unrated * jnp.sum(other_bias, axis=1),
        unrated * mean_other.shape[1],
    )


def second_moments(mean, cov) -> jax.Array:
    """``sum_j E_q[F_j F_j^T] = F^T F + sum_j S_j`` (C, K, K) of Gaussian rows with means
    ``mean`` (C, m, K) and covariances ``cov`` (C, m, K, K).

    Parameters
    ----------
    mean : jax.Array
        The rows' means (C, m, K).
    cov : jax.Array
        Their covariances (C, m, K, K).
    """
    return jnp.einsum("cjk,cjl->ckl", mean, mean) + jnp.sum(cov, axis=1)


def all_pairs_second_moment(m, V, n, W, bias: dict | None = None) -> jax.Array:
    """``sum_{i,j} E_q[theta_ij^2]`` (C,) over every pair, ``theta_ij = M_i . N_j`` (+
    ``b_i + c_j`` with biases) with independent Gaussian rows and biases: ``tr(A B)`` with
    ``A = sum_i (V_i + m_i m_i^T)`` and ``B = sum_j (W_j + n_j n_j^T)`` (K x K each), and
    with biases ``m2 sum_i E[b_i^2] + m1 sum_j E[c_j^2] + 2 (sum_i E b_i)(sum_j E c_j) + 2
    sum_i E[b_i] m_i . sum_j n_j + 2 (sum_i m_i) . sum_j E[c_j] n_j``.

    Parameters
    ----------
    m, V : jax.Array
        Means (C, m1, K) and covariances (C, m1, K, K) of ``q(M_i)``.
    n, W : jax.Array
        Means (C, m2, K) and covariances (C, m2, K, K) of ``q(N_j)``.
    bias : dict, optional
        The biases' q-state (``b_mean``, ``b_var``, ``c_mean``, ``c_var``); None or empty:
        no biases.
    """
    out = jnp.sum(second_moments(m, V) * second_moments(n, W), axis=(-2, -1))
    if not bias:
        return out
    b, c = bias["b_mean"], bias["c_mean"]
    m1, m2 = b.shape[1], c.shape[1]
    out = out + m2 * jnp.sum(b**2 + bias["b_var"], axis=1)
    out = out + m1 * jnp.sum(c**2 + bias["c_var"], axis=1)
    out = out + 2.0 * jnp.sum(b, axis=1) * jnp.sum(c, axis=1)
    out = out + 2.0 * jnp.einsum("ci,cik,ck->c", b, m, jnp.sum(n, axis=1))
    return out + 2.0 * jnp.einsum("ck,ck->c", jnp.sum(m, axis=1), jnp.einsum("cj,cjk->ck", c, n))

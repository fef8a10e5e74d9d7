"""The Macau feature link of the Normal-Wishart row prior (Simm et al. 2017; DESIGN.md
section 11): rows ``M_i ~ N(mu + B^T x_i, Lambda^{-1})`` with ``x_i`` the row's features
(side information, implicit feedback or both), ``B`` (F x K) matrix normal with rows
``B_f ~ N(0, (lam_B Lambda)^{-1})`` and ``lam_B ~ Gamma(a_B, b_B)``.

The pieces here are used by :class:`~bmczoo.priors.NormalWishart` when it is given
``row_features=`` / ``col_features=`` / ``implicit=``:

* :func:`side_features` turns the prior's specification into a
  :class:`~bmczoo.data.Features` table for one side of the data;
* :func:`link_arrays` prepares its device arrays once: ``X`` and ``X^T`` as sparse
  matrices of the Gibbs hot path (``X B`` and ``X^T M`` in O(nnz K)) and the eigendecomposition ``X^T X = V diag(d) V^T``
  (float64 on the host), so that ``A = X^T X + lam_B I`` is diagonal in the basis ``V``
  whatever ``lam_B`` is: no factorisation per sweep;
* :func:`link_block` draws ``B``, then ``lam_B``, then ``(mu, Lambda)`` given the rows
  (one chain), each from its exact conditional.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _rng

__all__ = ["FeatureTable", "side_features", "link_arrays", "x_times", "xt_times", "link_mean", "b_draw",
           "lam_conditional", "nw_link_conditional", "link_block"]


class FeatureTable:
    """A :class:`~bmczoo.data.Features` held by a prior (hashed and compared by identity,
    so the prior stays a valid static argument of jitted functions; the table's arrays
    never enter traced code through the prior)."""

    __slots__ = ("features",)

    def __init__(self, features):
        self.features = features

    def __hash__(self) -> int:
        return id(self.features)

    def __eq__(self, other) -> bool:
        return isinstance(other, FeatureTable) and other.features is self.features

    def __repr__(self) -> str:
        return repr(self.features)


def check_spec(owner: str, name: str, value):
    """A side's feature specification: None/False (no features), True (the data's), or a
    :class:`~bmczoo.data.Features` (kept as a :class:`FeatureTable`)."""
    from ..data import Features

    if value is None or value is False or value is True:
        return None if value is False else value
    if isinstance(value, FeatureTable):
        return value
    if isinstance(value, Features):
        return FeatureTable(value)
    raise ValueError(f"{owner}: {name} must be None, True (the data's {name}) or a bmczoo.data.Features, "
                     f"got {type(value).__name__}")


def check_implicit(owner: str, value):
    """``implicit``: False, True (both sides), ``"rows"`` or ``"cols"``."""
    if value is False or value is None:
        return False
    if value is True or value in ("rows", "cols"):
        return value
    raise ValueError(f"{owner}: implicit must be False, True, 'rows' or 'cols', got {value!r}")


def side_features(spec, implicit, ratings, axis: str):
    """The feature table of one side (``axis`` ``"rows"`` for ``M``, ``"cols"`` for
    ``N``) of ``ratings``: the explicit features of ``spec`` (True: the data's), then the
    implicit-feedback features of the pairs of ``ratings`` when ``implicit`` covers this
    side (:func:`bmczoo.data.implicit_features`); None when the side has none."""
    from ..data import hstack_features, implicit_features

    name = "row_features" if axis == "rows" else "col_features"
    m = ratings.shape[0 if axis == "rows" else 1]
    parts = []
    if spec is True:
        X = getattr(ratings, name, None)
        if X is None:
            raise ValueError(f"NormalWishart({name}=True): the data has no {name} (the MovieLens loaders attach "
                             f"the side files found beside the ratings; or pass a bmczoo.data.Features)")
        parts.append(X)
    elif isinstance(spec, FeatureTable):
        parts.append(spec.features)
    for X in parts:
        if X.n_rows != m:
            raise ValueError(f"NormalWishart: {name} has {X.n_rows} rows, the data has {m} {axis}")
    if implicit is True or implicit == axis:
        parts.append(implicit_features(ratings, axis))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else hstack_features(*parts)


def _csr(indptr, index, values, shape, dtype):
    """A device CSR of the Gibbs hot path (:mod:`bmczoo.inference.kernels`) for a sparse
    table given by rows."""
    from types import SimpleNamespace

    from ..inference.kernels import csr_from_view

    return csr_from_view(SimpleNamespace(indptr=indptr, index=index, values=values), shape, dtype)


def link_arrays(X, dtype) -> dict:
    """The device arrays of a feature table ``X`` (m x F): ``X`` and ``X^T`` as CSR
    matrices of the Gibbs hot path (for ``X B`` and ``X^T M`` in O(nnz K), all chains in
    one product), the eigenvectors ``V`` (F, F) and eigenvalues ``d`` (F,) of ``X^T X``
    (float64 on the host; rounding below zero clipped) and ``u = V^T X^T 1`` (F,)."""
    if X.n_features == 0:
        raise ValueError("NormalWishart: a feature table with no features")
    m, F = X.shape
    G = X.gram()
    d, V = np.linalg.eigh(G)
    d = np.maximum(d, 0.0)
    u = V.T @ X.tdot(np.ones(m))
    order = np.argsort(X.indices, kind="stable")  # the entries grouped by feature: X^T by rows
    t_indptr = np.zeros(F + 1, np.int64)
    np.cumsum(np.bincount(X.indices, minlength=F), out=t_indptr[1:])
    return {"X": _csr(X.indptr, X.indices, X.values, (m, F), dtype),
            "Xt": _csr(t_indptr, X.row_ids()[order], X.values[order], (F, m), dtype),
            "V": jnp.asarray(V, dtype), "d": jnp.asarray(d, dtype), "u": jnp.asarray(u, dtype)}


def _product(csr, dense: jax.Array) -> jax.Array:
    """``A @ dense[c]`` for each chain: dense (C, m_other, K) -> (C, m, K), the chains
    stacked as columns of one sparse product."""
    from ..inference.kernels import pattern_product

    C, m_other, K = dense.shape
    out = pattern_product(csr, csr.values, jnp.transpose(dense, (1, 0, 2)).reshape(m_other, C * K))
    return jnp.transpose(out.reshape(csr.shape[0], C, K), (1, 0, 2))


def x_times(link: dict, B: jax.Array) -> jax.Array:
    """``X B`` (C, m, K) for ``B`` (C, F, K)."""
    return _product(link["X"], B)


def xt_times(link: dict, E: jax.Array) -> jax.Array:
    """``X^T E`` (C, F, K) for ``E`` (C, m, K)."""
    return _product(link["Xt"], E)


def link_mean(link: dict, mu: jax.Array, B: jax.Array) -> jax.Array:
    """The rows' prior means ``mu + B^T x_i`` (C, m, K) for ``mu`` (C, K), ``B`` (C, F, K)."""
    return mu[:, None, :] + x_times(link, B)


def b_draw(link: dict, mu, Lam, lam_B, Gt, Z):
    """``Bt = V^T B`` drawn from ``B | mu, Lambda, lam_B, M`` given standard normals ``Z``
    (F, K) (one chain, one side): ``Bt_f = (Gt_f - u_f mu) / a_f + (Z Lc^{-1})_f /
    sqrt(a_f)``, ``a = d + lam_B``, ``Lambda = Lc Lc^T`` (rows of ``Z Lc^{-1}`` have
    covariance ``Lambda^{-1}``); linear in ``Z``, so its mean and covariance are checked
    exactly against the dense formula."""
    a = link["d"] + lam_B
    mean = (Gt - link["u"][:, None] * mu[None, :]) / a[:, None]
    Lc = lax.linalg.cholesky(Lam, symmetrize_input=False)
    noise = lax.linalg.triangular_solve(Lc, Z, left_side=False, lower=True)
    return mean + noise * lax.rsqrt(a)[:, None]


def lam_conditional(Bt, Lam, a_B: float, b_B: float):
    """Shape and rate of ``lam_B | B, Lambda``: ``a_B + F K / 2``, ``b_B + tr(B Lambda
    B^T) / 2`` (``tr(B Lambda B^T) = tr(Bt Lambda Bt^T)``, ``V`` orthogonal)."""
    F, K = Bt.shape
    return a_B + 0.5 * F * K, b_B + 0.5 * jnp.sum((Bt @ Lam) * Bt)


def nw_link_conditional(link: dict, Bt, lam_B, s1, s2, Gt, m: int, beta0: float, nu0: float, W0_inv):
    """``(mu*, beta*, nu*, W*^{-1})`` of ``(mu, Lambda) | M, B, lam_B``: the Normal-Wishart
    update of :func:`~bmczoo.priors.normal_wishart.nw_posterior` with the residuals
    ``e_i = M_i - B^T x_i`` as data (``sum_i e_i = s1 - Bt^T u``, ``sum_i e_i e_i^T = s2 -
    Gt^T Bt - Bt^T Gt + Bt^T diag(d) Bt``), then ``F`` added to the degrees of freedom and
    ``lam_B B^T B = lam_B Bt^T Bt`` to the inverse scale (``B``'s prior)."""
    from .normal_wishart import nw_posterior

    d, u = link["d"], link["u"]
    BtG = Bt.T @ Gt
    s1e = s1 - Bt.T @ u
    s2e = s2 - BtG - BtG.T + Bt.T @ (d[:, None] * Bt)
    mu_star, beta_star, nu_star, Winv = nw_posterior(s1e, s2e, m, beta0, nu0, W0_inv)
    Winv = Winv + lam_B * (Bt.T @ Bt)
    return mu_star, beta_star, nu_star + d.shape[0], 0.5 * (Winv + Winv.T)


def link_block(key, link: dict, mu, Lam, lam_B, s1, s2, Gt, m: int, *, beta0: float, nu0: float, W0_inv,
               a_B: float, b_B: float):
    """The link's blocks for one chain and one side, each an exact conditional draw:

    1. ``B | mu, Lambda, lam_B, M``: ``MN(A^{-1} X^T E, A^{-1}, Lambda^{-1})`` with ``A =
       X^T X + lam_B I``, ``E = M - 1 mu^T``.  In the basis ``V`` (``X^T X = V diag(d)
       V^T``) ``A`` is diagonal, so the rows of ``Bt = V^T B`` are independent:
       ``Bt_f ~ N((V^T X^T E)_f / (d_f + lam_B), Lambda^{-1} / (d_f + lam_B))``
       (:func:`b_draw`); ``B = V Bt``.  O(F^2 K) per draw, whatever ``lam_B``.
    2. ``lam_B | B, Lambda ~ Gamma(a_B + F K / 2, b_B + tr(B Lambda B^T) / 2)``
       (:func:`lam_conditional`).
    3. ``(mu, Lambda) | M, B, lam_B``: Normal-Wishart with the residuals ``M_i - B^T x_i``
       as data; ``B``'s prior adds ``F`` to the Wishart degrees of freedom and ``lam_B
       B^T B`` to the inverse scale (:func:`nw_link_conditional`).

    ``s1 = sum_i M_i`` (K,), ``s2 = M^T M`` (K, K) and ``Gt = V^T X^T M`` (F, K) are the
    rows' sums (:meth:`~bmczoo.priors.NormalWishart.link_factor_stats`).  Returns
    ``(mu, Lambda, B, lam_B)``.
    """
    from .normal_wishart import wishart_draw

    dt = mu.dtype
    F, K = Gt.shape
    kB, kl, kw = jax.random.split(key, 3)
    Bt = b_draw(link, mu, Lam, lam_B, Gt, _rng.normal(kB, (F, K), dt))
    shape, rate = lam_conditional(Bt, Lam, a_B, b_B)
    lam_B = jax.random.gamma(kl, jnp.asarray(shape, dt), dtype=dt) / rate
    mu_star, beta_star, nu_star, Winv = nw_link_conditional(link, Bt, lam_B, s1, s2, Gt, m, beta0, nu0, W0_inv)
    mu_new, Lam_new = wishart_draw(kw, Winv, nu_star, beta_star, mu_star)
    return mu_new, Lam_new, link["V"] @ Bt, lam_B

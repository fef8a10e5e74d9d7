"""The Macau feature link of the Normal-Wishart row prior (Simm et al. 2017; docs/algorithms.md,
"Feature links (side information)"): rows ``M_i ~ N(mu + B^T x_i, Lambda^{-1})`` with
``x_i`` the row's features (side information, implicit feedback or both), ``B`` (F x K)
matrix normal with rows ``B_f ~ N(0, (lam_B Lambda)^{-1})`` and ``lam_B ~ Gamma(a_B, b_B)``.

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
from ._wishart import (
    _chol_inverse,
    _expected_lambda,
    _multidigamma,
    nw_posterior,
    nw_vb_term,
    wishart_draw,
)

__all__ = [
    "FeatureTable",
    "side_features",
    "link_arrays",
    "coords_mean",
    "coords_stats",
    "stored_links",
    "x_times",
    "xt_times",
    "b_draw",
    "lam_conditional",
    "nw_link_conditional",
    "link_block",
]


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
    raise ValueError(
        f"{owner}: {name} must be None, True (the data's {name}) or a bmczoo.data.Features, "
        f"got {type(value).__name__}"
    )


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
            raise ValueError(
                f"NormalWishart({name}=True): the data has no {name} (the MovieLens loaders attach "
                f"the side files found beside the ratings; or pass a bmczoo.data.Features)"
            )
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
    (float64 on the host, ascending; those at or below ``F eps max(d)`` set to zero: the
    null space of ``X``) and ``u = V^T X^T 1`` (F,; zero on the null space).

    ``Vr`` (F, r) holds the eigenvectors of the ``r`` nonzero eigenvalues (the last ``r``
    columns of ``V``): ``X V`` vanishes on the others, so ``X B = (X Vr) Bt[F - r:]`` and
    ``V^T X^T E`` is zero in its first ``F - r`` rows.  When ``X`` has fewer rows than
    features (implicit feedback of the rows: ``m`` users, ``F`` items), ``XV = X Vr`` (m, r)
    is kept too and both products cost O(m r K) instead of O(F r K)
    (:func:`coords_mean`, :func:`coords_stats`)."""
    if X.n_features == 0:
        raise ValueError("NormalWishart: a feature table with no features")
    m, F = X.shape
    G = X.gram()
    d, V = np.linalg.eigh(G)
    d = np.maximum(d, 0.0)
    null = int(np.sum(d <= F * np.finfo(np.float64).eps * d.max(initial=0.0)))
    d[:null] = 0.0
    u = V.T @ X.tdot(np.ones(m))
    u[:null] = 0.0
    order = np.argsort(X.indices, kind="stable")  # the entries grouped by feature: X^T by rows
    t_indptr = np.zeros(F + 1, np.int64)
    np.cumsum(np.bincount(X.indices, minlength=F), out=t_indptr[1:])
    out = {
        "X": _csr(X.indptr, X.indices, X.values, (m, F), dtype),
        "Xt": _csr(t_indptr, X.row_ids()[order], X.values[order], (F, m), dtype),
        "V": jnp.asarray(V, dtype),
        "d": jnp.asarray(d, dtype),
        "u": jnp.asarray(u, dtype),
        "Vr": jnp.asarray(V[:, null:], dtype),
    }
    if m < F:
        out["XV"] = jnp.asarray(X.to_scipy() @ V[:, null:], dtype)
    return out


def coords_mean(link: dict, Bt: jax.Array) -> jax.Array:
    """``X B`` (C, m, K) for ``B = V Bt`` given its coordinates ``Bt`` (C, F, K) in the
    eigenbasis: ``(X Vr) Bt_r`` (only the range of ``X^T`` counts)."""
    F, r = link["Vr"].shape
    Btr = Bt[:, F - r :]
    if "XV" in link:
        return jnp.einsum("mr,crk->cmk", link["XV"], Btr)
    return x_times(link, jnp.einsum("fr,crk->cfk", link["Vr"], Btr))


def coords_stats(link: dict, E: jax.Array) -> jax.Array:
    """``V^T X^T E`` (C, F, K) for ``E`` (C, m, K): zero on the null space of ``X``."""
    F, r = link["Vr"].shape
    if "XV" in link:
        Gr = jnp.einsum("mr,cmk->crk", link["XV"], E)
    else:
        Gr = jnp.einsum("fr,cfk->crk", link["Vr"], xt_times(link, E))
    return jnp.pad(Gr, ((0, 0), (F - r, 0), (0, 0)))


def stored_links(prior_state: dict, links: dict) -> dict:
    """The links' ``B_F = V Bt_F`` (C, F, K) of a Gibbs state's coordinates ``Bt_F``
    (for the draws kept with the factors)."""
    return {
        f"B_{key[3:]}": jnp.einsum("fg,cgk->cfk", links[f"{key[3:]}/V"], value)
        for key, value in prior_state.items()
        if key.startswith("Bt_")
    }


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


def _b_mean(link: dict, mu, lam, Gt):
    """``(Bt_bar, a)``: the mean ``(Gt_f - u_f mu) / a_f`` (F, K) of ``Bt`` given the rows
    and ``a = d + lam`` (F,) (Gibbs: the drawn ``lam_B``; VB: ``E[lam_B]``, ``E[mu] = mu*``)."""
    a = link["d"] + lam
    return (Gt - link["u"][:, None] * mu[None, :]) / a[:, None], a


def _residual_sums(link: dict, Bt, s1, s2, Gt, BDB):
    """``sum_i e_i = s1 - Bt^T u`` and ``sum_i e_i e_i^T = s2 - Bt^T Gt - Gt^T Bt + BDB``
    of the residuals ``e_i = M_i - B^T x_i``, ``BDB`` the (expected) ``B^T X^T X B``."""
    BtG = Bt.T @ Gt
    return s1 - Bt.T @ link["u"], s2 - BtG - BtG.T + BDB


def _nw_with_link(s1e, s2e, BB, lam, F: int, m: int, beta0: float, nu0: float, W0_inv):
    """:func:`~bmczoo.priors.normal_wishart.nw_posterior` of the residual sums, then
    ``B``'s prior: ``F`` added to the degrees of freedom and ``lam (B^T B)`` to the inverse
    scale (Gibbs: the draws; VB: ``E[lam_B] E[B^T B]``)."""
    mu_star, beta_star, nu_star, Winv = nw_posterior(s1e, s2e, m, beta0, nu0, W0_inv)
    Winv = Winv + lam * BB
    return mu_star, beta_star, nu_star + F, 0.5 * (Winv + Winv.T)


def b_draw(link: dict, mu, Lam, lam_B, Gt, Z):
    """``Bt = V^T B`` drawn from ``B | mu, Lambda, lam_B, M`` given standard normals ``Z``
    (F, K) (one chain, one side): ``Bt_f = (Gt_f - u_f mu) / a_f + (Z Lc^{-1})_f /
    sqrt(a_f)``, ``a = d + lam_B``, ``Lambda = Lc Lc^T`` (rows of ``Z Lc^{-1}`` have
    covariance ``Lambda^{-1}``); linear in ``Z``, so its mean and covariance are checked
    exactly against the dense formula."""
    mean, a = _b_mean(link, mu, lam_B, Gt)
    Lc = lax.linalg.cholesky(Lam, symmetrize_input=False)
    # Z Lc^{-1} as a product with the K x K inverse: XLA's CPU triangular solve from the
    # right with F rows costs about 300 times the product at F = 1,700, K = 10
    Lc_inv = lax.linalg.triangular_solve(
        Lc, jnp.eye(Lam.shape[-1], dtype=Lam.dtype), left_side=True, lower=True
    )
    return mean + (Z @ Lc_inv) * lax.rsqrt(a)[:, None]


def lam_conditional(Bt, Lam, a_B: float, b_B: float):
    """Shape and rate of ``lam_B | B, Lambda``: ``a_B + F K / 2``, ``b_B + tr(B Lambda
    B^T) / 2`` (``tr(B Lambda B^T) = tr(Bt Lambda Bt^T)``, ``V`` orthogonal)."""
    F, K = Bt.shape
    return a_B + 0.5 * F * K, b_B + 0.5 * jnp.sum((Bt @ Lam) * Bt)


def nw_link_conditional(
    link: dict, Bt, lam_B, s1, s2, Gt, m: int, beta0: float, nu0: float, W0_inv
):
    """``(mu*, beta*, nu*, W*^{-1})`` of ``(mu, Lambda) | M, B, lam_B``: the Normal-Wishart
    update of :func:`~bmczoo.priors.normal_wishart.nw_posterior` with the residuals
    ``e_i = M_i - B^T x_i`` as data (``sum_i e_i = s1 - Bt^T u``, ``sum_i e_i e_i^T = s2 -
    Gt^T Bt - Bt^T Gt + Bt^T diag(d) Bt``), then ``F`` added to the degrees of freedom and
    ``lam_B B^T B = lam_B Bt^T Bt`` to the inverse scale (``B``'s prior)."""
    d = link["d"]
    s1e, s2e = _residual_sums(link, Bt, s1, s2, Gt, Bt.T @ (d[:, None] * Bt))
    return _nw_with_link(s1e, s2e, Bt.T @ Bt, lam_B, d.shape[0], m, beta0, nu0, W0_inv)


def link_block(
    key,
    link: dict,
    mu,
    Lam,
    lam_B,
    s1,
    s2,
    Gt,
    m: int,
    *,
    beta0: float,
    nu0: float,
    W0_inv,
    a_B: float,
    b_B: float,
):
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
    ``(mu, Lambda, Bt, lam_B)``: the link in the eigenbasis (``B = V Bt``).
    """
    dt = mu.dtype
    F, K = Gt.shape
    kB, kl, kw = jax.random.split(key, 3)
    Bt = b_draw(link, mu, Lam, lam_B, Gt, _rng.normal(kB, (F, K), dt))
    shape, rate = lam_conditional(Bt, Lam, a_B, b_B)
    lam_B = jax.random.gamma(kl, jnp.asarray(shape, dt), dtype=dt) / rate
    mu_star, beta_star, nu_star, Winv = nw_link_conditional(
        link, Bt, lam_B, s1, s2, Gt, m, beta0, nu0, W0_inv
    )
    mu_new, Lam_new = wishart_draw(kw, Winv, nu_star, beta_star, mu_star)
    return mu_new, Lam_new, Bt, lam_B


# ---------------------------------------------------------------------------- VB
# Mean-field VB of the link (one linked factor; the other factor's rows are the same with
# their own features).  q = prod_i q(M_i) q(mu, Lambda) q(B) q(lam_B) with
#
#   q(mu, Lambda) = NW(mu*, beta*, W*, nu*),  q(lam_B) = Gamma(alpha, rho),
#   q(B) = MN(Bbar, A^{-1}, U):  in the basis V of X^T X = V diag(d) V^T the rows of
#          Bt = V^T B are independent, Bt_f ~ N(Bt_bar_f, U / a_f).
#
# Stored per linked factor F in the prior's q-state (leading run axis C):
#   Bt_F (C, F, K) = V^T Bbar,  Ba_F (C, F) = a,  BU_F (C, K, K) = U,
#   lam_shape_F, lam_rate_F (C,) = alpha, rho.
#
# Expectations used below (E[Lambda] = nu* W*, E[Lambda mu] = E[Lambda] mu*,
# lam = E[lam_B] = alpha / rho, E[log lam_B] = psi(alpha) - log rho):
#   E[B^T B]           = Bt_bar^T Bt_bar + (sum_f 1/a_f) U
#   E[B^T X^T X B]     = Bt_bar^T diag(d) Bt_bar + (sum_f d_f/a_f) U
#   E[tr(Lambda B^T B)] = tr(E[Lambda] E[B^T B])


def _vb_b_moments(link: dict, Bt, a, U):
    """``(E[B^T B], E[B^T X^T X B])`` (K, K) each of ``q(B)`` (one run)."""
    d = link["d"]
    EBB = Bt.T @ Bt + jnp.sum(1.0 / a) * U
    EBDB = Bt.T @ (d[:, None] * Bt) + jnp.sum(d / a) * U
    return EBB, EBDB


def vb_b_update(link: dict, mu, E_Lam, lam_mean, Gt):
    """The optimal ``q(B)`` given ``q(M)``, ``q(mu, Lambda)``, ``q(lam_B)`` (one run, one side).

    ``log q(B) = E[log p(M | mu, Lambda, B)] + E[log p(B | Lambda, lam_B)] + const`` is, with
    ``E[Lambda mu] = E[Lambda] mu*``,
    ``tr(E[Lambda] B^T X^T (E[M] - 1 mu*^T)) - tr(E[Lambda] B^T (X^T X + E[lam_B] I) B) / 2``:
    the matrix normal ``MN(A^{-1} X^T (E[M] - 1 mu*^T), A^{-1}, E[Lambda]^{-1})`` with
    ``A = X^T X + E[lam_B] I``.  In the basis ``V``: ``Bt_bar_f = (Gt_f - u_f mu*) / a_f``,
    ``a = d + E[lam_B]``, ``U = E[Lambda]^{-1}``.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    mu : jax.Array
        ``mu*`` (K,) of ``q(mu, Lambda)``.
    E_Lam : jax.Array
        ``E[Lambda] = nu* W*`` (K, K).
    lam_mean : jax.Array
        ``E[lam_B]`` (scalar).
    Gt : jax.Array
        ``V^T X^T E[M]`` (F, K).

    Returns
    -------
    tuple of jax.Array
        ``(Bt_bar, a, U)``: (F, K), (F,), (K, K).
    """
    Bt, a = _b_mean(link, mu, lam_mean, Gt)
    U = jnp.linalg.inv(E_Lam)
    return Bt, a, 0.5 * (U + U.T)


def vb_lam_update(link: dict, Bt, a, U, E_Lam, a_B: float, b_B: float):
    """The optimal ``q(lam_B) = Gamma(a_B + F K / 2, b_B + tr(E[Lambda] E[B^T B]) / 2)`` given
    ``q(B)`` and ``q(mu, Lambda)`` (one run, one side).

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    Bt, a, U : jax.Array
        ``q(B)`` (:func:`vb_b_update`).
    E_Lam : jax.Array
        ``E[Lambda]`` (K, K).
    a_B, b_B : float
        The prior's shape and rate of ``lam_B``.

    Returns
    -------
    tuple of jax.Array
        Shape and rate (scalars).
    """
    F, K = Bt.shape
    EBB, _ = _vb_b_moments(link, Bt, a, U)
    return jnp.asarray(a_B + 0.5 * F * K, Bt.dtype), b_B + 0.5 * jnp.sum(E_Lam * EBB)


def vb_residual_stats(link: dict, Bt, a, U, s1, s2, Gt):
    """The expected sums of the residuals ``e_i = M_i - B^T x_i`` under ``q(M) q(B)``:
    ``sum_i E[e_i] = s1 - Bt_bar^T u`` and ``sum_i E[e_i e_i^T] = s2 - Bt_bar^T Gt - Gt^T
    Bt_bar + E[B^T X^T X B]`` (one run, one side).

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    Bt, a, U : jax.Array
        ``q(B)`` (:func:`vb_b_update`).
    s1, s2 : jax.Array
        ``sum_i E[M_i]`` (K,) and ``sum_i E[M_i M_i^T]`` (K, K).
    Gt : jax.Array
        ``V^T X^T E[M]`` (F, K).

    Returns
    -------
    tuple of jax.Array
        ``(s1e, s2e)``: (K,), (K, K).
    """
    _, EBDB = _vb_b_moments(link, Bt, a, U)
    s1e, s2e = _residual_sums(link, Bt, s1, s2, Gt, EBDB)
    return s1e, 0.5 * (s2e + s2e.T)


def vb_nw_link_update(
    link: dict, Bt, a, U, lam_mean, s1, s2, Gt, m: int, beta0: float, nu0: float, W0_inv
):
    """The optimal ``q(mu, Lambda)`` given ``q(M)``, ``q(B)``, ``q(lam_B)`` (one run, one side):
    :func:`~bmczoo.priors.normal_wishart.nw_posterior` of the expected residual sums
    (:func:`vb_residual_stats`), then ``B``'s prior ``sum_f log N(B_f | 0, (lam_B
    Lambda)^{-1})`` adds ``F`` to the degrees of freedom and ``E[lam_B] E[B^T B]`` to the
    inverse scale.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    Bt, a, U : jax.Array
        ``q(B)`` (:func:`vb_b_update`).
    lam_mean : jax.Array
        ``E[lam_B]``.
    s1, s2, Gt : jax.Array
        The rows' expected statistics (see :func:`vb_residual_stats`).
    m : int
        Number of rows.
    beta0, nu0 : float
        The Normal-Wishart prior's ``beta0`` and ``nu0``.
    W0_inv : jax.Array
        ``W0^{-1}`` (K, K).

    Returns
    -------
    tuple
        ``(mu*, beta*, nu*, W*^{-1})``.
    """
    s1e, s2e = vb_residual_stats(link, Bt, a, U, s1, s2, Gt)
    EBB, _ = _vb_b_moments(link, Bt, a, U)
    return _nw_with_link(s1e, s2e, EBB, lam_mean, Bt.shape[0], m, beta0, nu0, W0_inv)


def vb_link_elbo_term(
    link: dict,
    mu,
    beta,
    nu,
    Winv,
    Bt,
    a,
    U,
    shape,
    rate,
    s1,
    s2,
    Gt,
    m: int,
    *,
    beta0: float,
    nu0: float,
    W0_scale: float,
    a_B: float,
    b_B: float,
):
    """The ELBO part of one linked factor (one run): ``E[log p(M | mu, Lambda, B)] +
    E[log NW(mu, Lambda)] - E[log q(mu, Lambda)] + E[log p(B | Lambda, lam_B)] + E[log
    p(lam_B)] - E[log q(B)] - E[log q(lam_B)]``, at any stored q.

    The first three are :func:`~bmczoo.priors.normal_wishart.nw_vb_term` with the
    residuals' expected sums (:func:`vb_residual_stats`: the rows' term depends on ``q(M)
    q(B)`` only through them).  With ``E[log|Lambda|] = psi_K(nu/2) + K log 2 + log|W*|``
    and ``E[log lam_B] = psi(alpha) - log rho``:

    * ``E[log p(B)] = (F K / 2)(E[log lam_B] - log 2 pi) + (F / 2) E[log|Lambda|] -
      E[lam_B] tr(E[Lambda] E[B^T B]) / 2``;
    * ``E[log p(lam_B)] = a_B log b_B - log Gamma(a_B) + (a_B - 1) E[log lam_B] - b_B E[lam_B]``;
    * ``-E[log q(B)] = (F K / 2)(1 + log 2 pi) + (F log|U| - K sum_f log a_f) / 2``;
    * ``-E[log q(lam_B)] = alpha - log rho + log Gamma(alpha) + (1 - alpha) psi(alpha)``.

    Parameters
    ----------
    link : dict
        The side's arrays (:func:`link_arrays`).
    mu, beta, nu, Winv : jax.Array
        ``q(mu, Lambda) = NW(mu*, beta*, W*, nu*)`` with ``Winv = W*^{-1}``.
    Bt, a, U : jax.Array
        ``q(B)`` (:func:`vb_b_update`).
    shape, rate : jax.Array
        ``q(lam_B)``.
    s1, s2, Gt : jax.Array
        The rows' expected statistics (see :func:`vb_residual_stats`).
    m : int
        Number of rows.
    beta0, nu0, W0_scale, a_B, b_B : float
        The prior's hyper-parameters (``nu0`` resolved for ``K``).

    Returns
    -------
    jax.Array
        The scalar ELBO part.
    """
    from jax.scipy.special import digamma, gammaln

    F, K = Bt.shape
    dt = Bt.dtype
    log2pi = jnp.log(2.0 * jnp.pi).astype(dt)
    s1e, s2e = vb_residual_stats(link, Bt, a, U, s1, s2, Gt)
    out = nw_vb_term(mu, beta, nu, Winv, s1e, s2e, m, beta0, nu0, W0_scale)
    W, logdet_W = _chol_inverse(Winv)
    ElogL = _multidigamma(0.5 * nu, K) + K * jnp.log(2.0) + logdet_W
    lam, Eloglam = shape / rate, digamma(shape) - jnp.log(rate)
    EBB, _ = _vb_b_moments(link, Bt, a, U)
    log_pB = 0.5 * F * K * (Eloglam - log2pi) + 0.5 * F * ElogL - 0.5 * lam * jnp.sum(nu * W * EBB)
    log_plam = a_B * jnp.log(b_B) - gammaln(a_B) + (a_B - 1.0) * Eloglam - b_B * lam
    logdet_U = jnp.linalg.slogdet(U)[1]
    H_B = 0.5 * F * K * (1.0 + log2pi) + 0.5 * (F * logdet_U - K * jnp.sum(jnp.log(a)))
    H_lam = shape - jnp.log(rate) + gammaln(shape) + (1.0 - shape) * digamma(shape)
    return out + log_pB + log_plam + H_B + H_lam


def unlinked(prior):
    """``prior`` without its feature links (the same hyper-parameters)."""
    import dataclasses

    return dataclasses.replace(prior, row_features=None, col_features=None, implicit=False)


class VBLink:
    """A Normal-Wishart prior with feature links seen through the VB hooks of
    :mod:`bmczoo.inference.vb` (``vb_state``, ``vb_row_priors``, ``vb_factor_stats``,
    ``vb_step``, ``vb_elbo_term``, ``vb_params``), with the links' arrays
    (:meth:`~bmczoo.priors.NormalWishart.gibbs_links`) bound.  An unlinked factor keeps
    the plain Normal-Wishart updates; a linked one gets, in this order, the optimal
    :func:`vb_b_update`, :func:`vb_lam_update` and :func:`vb_nw_link_update` (each the
    exact optimum of its factor given the others: the ELBO never decreases), and its rows'
    prior means in the factor update are ``mu* + Bbar^T x_i``.

    Parameters
    ----------
    prior : NormalWishart
        The prior with its links.
    links : dict
        Its link arrays (``"M/X"``, ``"M/V"``, ... as built by ``gibbs_links``).
    """

    has_column_scales = False

    def __init__(self, prior, links: dict):
        self.prior, self.links = prior, links
        self.base = unlinked(prior)
        self.name = prior.name
        self.sides = {side: prior._side_link(links, side) for side in ("M", "N")}

    def _hyper(self, K: int):
        return dict(
            beta0=self.prior.beta0,
            nu0=self.prior.degrees(K),
            W0_scale=self.prior.W0_scale,
            a_B=self.prior.a_B,
            b_B=self.prior.b_B,
        )

    def vb_state(self, K, m1, m2, C, dtype=jnp.float32, gamma=1.0):
        """The plain Normal-Wishart start, and for each linked factor ``q(B)`` at zero mean
        with ``a = d + 1``, ``U = I`` and ``q(lam_B)`` with mean 1 (only read by the first
        factor update through ``Bbar = 0``).

        Parameters
        ----------
        K, m1, m2, C : int
            Rank, the factors' row counts, number of runs.
        dtype : dtype
            Floating dtype.
        gamma : float
            Not used.

        Returns
        -------
        dict
            The q-state.
        """
        q = self.base.vb_state(K, m1, m2, C, dtype, gamma)
        for side, link in self.sides.items():
            if link is None:
                continue
            F = link["d"].shape[0]
            shape = self.prior.a_B + 0.5 * F * K
            q[f"Bt_{side}"] = jnp.zeros((C, F, K), dtype)
            q[f"Ba_{side}"] = jnp.broadcast_to(link["d"].astype(dtype) + 1.0, (C, F))
            q[f"BU_{side}"] = jnp.broadcast_to(jnp.eye(K, dtype=dtype), (C, K, K))
            q[f"lam_shape_{side}"] = jnp.full((C,), shape, dtype)
            q[f"lam_rate_{side}"] = jnp.full((C,), shape, dtype)
        return q

    def vb_row_priors(self, q):
        """``(E[Lambda], E[Lambda] (mu* + Bbar^T x_i))`` per factor; the shift is (C, m, K)
        for a linked factor, (C, K) otherwise.

        Parameters
        ----------
        q : dict
            The q-state.

        Returns
        -------
        tuple
            ``((P_M, shift_M), (P_N, shift_N))``.
        """
        out = []
        for side, link in self.sides.items():
            EL = _expected_lambda(q[f"Winv_{side}"], q[f"nu_{side}"])
            mean = q[f"mu_{side}"]
            if link is not None:
                mean = mean[:, None, :] + coords_mean(link, q[f"Bt_{side}"])
                out.append((EL, jnp.einsum("ckl,cil->cik", EL, mean)))
            else:
                out.append((EL, jnp.einsum("ckl,cl->ck", EL, mean)))
        return tuple(out)

    def vb_side_stats(self, m, V, side: str):
        """``(sum_i m_i, sum_i V_i + m_i m_i^T)`` and, for a linked factor, ``V^T X^T m``
        (C, F, K).

        Parameters
        ----------
        m, V : jax.Array
            Means (C, rows, K) and covariances (C, rows, K, K) of the factor's q.
        side : str
            ``"M"`` or ``"N"``.

        Returns
        -------
        tuple of jax.Array
            The statistics.
        """
        stats = self.base.vb_factor_stats(m, V)
        link = self.sides[side]
        if link is None:
            return stats
        return stats + (coords_stats(link, m),)

    def vb_factor_stats(self, m, V):
        """The plain statistics (no side known; :meth:`vb_side_stats` is what the VB core
        uses).

        Parameters
        ----------
        m, V : jax.Array
            Means and covariances of a factor's q.

        Returns
        -------
        tuple of jax.Array
            ``(sum_i m_i, sum_i V_i + m_i m_i^T)``.
        """
        return self.base.vb_factor_stats(m, V)

    def _side_step(self, q: dict, side: str, stats, m: int, K: int, dtype):
        link = self.sides[side]
        h = self._hyper(K)
        W0_inv = jnp.eye(K, dtype=stats[0].dtype) / h["W0_scale"]

        def one(mu, nu, Winv, shape, rate, s1, s2, Gt):
            EL = _expected_lambda(Winv, nu)
            Bt, a, U = vb_b_update(link, mu, EL, shape / rate, Gt)
            shape, rate = vb_lam_update(link, Bt, a, U, EL, h["a_B"], h["b_B"])
            mu, beta, nu, Winv = vb_nw_link_update(
                link, Bt, a, U, shape / rate, s1, s2, Gt, m, h["beta0"], h["nu0"], W0_inv
            )
            return (
                mu,
                jnp.asarray(beta, mu.dtype),
                jnp.asarray(nu, mu.dtype),
                Winv,
                Bt,
                a,
                U,
                shape,
                rate,
            )

        s1, s2, Gt = stats
        res = jax.vmap(one)(
            q[f"mu_{side}"],
            q[f"nu_{side}"],
            q[f"Winv_{side}"],
            q[f"lam_shape_{side}"],
            q[f"lam_rate_{side}"],
            s1,
            s2,
            Gt,
        )
        names = ("mu", "beta", "nu", "Winv", "Bt", "Ba", "BU", "lam_shape", "lam_rate")
        return {f"{n}_{side}": v.astype(dtype) for n, v in zip(names, res)}

    def vb_step(self, stats_M, stats_N, m1, m2, dtype=None, q=None):
        """The prior's CAVI step: the plain Normal-Wishart update for an unlinked factor;
        for a linked one ``q(B)``, ``q(lam_B)``, then ``q(mu, Lambda)`` (they need the
        current ``q``).

        Parameters
        ----------
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (:meth:`vb_side_stats`).
        m1, m2 : int
            Row counts.
        dtype : dtype, optional
            Dtype of the new q (default: the statistics').
        q : dict
            The current q-state (required).

        Returns
        -------
        dict
            The new q-state.
        """
        if q is None:
            raise ValueError("VBLink.vb_step needs the current q-state (q=)")
        K = stats_M[0].shape[-1]
        dt = stats_M[0].dtype if dtype is None else dtype
        plain = self.base.vb_step(stats_M[:2], stats_N[:2], m1, m2, dt)
        out = dict(q)
        for side, stats, m in (("M", stats_M, m1), ("N", stats_N, m2)):
            if self.sides[side] is None:
                out.update({k: v for k, v in plain.items() if k.endswith(f"_{side}")})
            else:
                out.update(self._side_step(q, side, stats, m, K, dt))
        return out

    def vb_elbo_term(self, q, stats_M, stats_N, m1, m2):
        """The prior's ELBO part (C,): :func:`~bmczoo.priors.normal_wishart.nw_vb_term` for an
        unlinked factor, :func:`vb_link_elbo_term` for a linked one.

        Parameters
        ----------
        q : dict
            The q-state.
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (:meth:`vb_side_stats`).
        m1, m2 : int
            Row counts.

        Returns
        -------
        jax.Array
            (C,).
        """
        K = stats_M[0].shape[-1]
        h = self._hyper(K)
        total = 0.0
        for side, stats, m in (("M", stats_M, m1), ("N", stats_N, m2)):
            link = self.sides[side]
            args = [q[f"{n}_{side}"] for n in ("mu", "beta", "nu", "Winv")]
            if link is None:
                total = total + nw_vb_term(
                    *args, stats[0], stats[1], m, h["beta0"], h["nu0"], h["W0_scale"]
                )
                continue
            args += [q[f"{n}_{side}"] for n in ("Bt", "Ba", "BU", "lam_shape", "lam_rate")]
            total = total + jax.vmap(lambda *a: vb_link_elbo_term(link, *a, m, **h))(*args, *stats)
        return total

    def vb_params(self, q, stats_M, stats_N, m1, m2):
        """The Normal-Wishart q parameters (:meth:`~bmczoo.priors.NormalWishart.vb_params`)
        and, per linked factor, ``B_F`` (the mean of ``q(B)`` in the features' basis, (C, F,
        K)), ``lam_B_shape_F``, ``lam_B_rate_F`` and ``E_lam_B_F``.

        Parameters
        ----------
        q : dict
            The q-state.
        stats_M, stats_N : tuple of jax.Array
            The factors' statistics (only their first two parts are read).
        m1, m2 : int
            Row counts.

        Returns
        -------
        dict
            The parameters.
        """
        out = self.base.vb_params(q, stats_M[:2], stats_N[:2], m1, m2)
        for side, link in self.sides.items():
            if link is not None:
                out[f"B_{side}"] = jnp.einsum("fg,cgk->cfk", link["V"], q[f"Bt_{side}"])
                out[f"lam_B_shape_{side}"] = q[f"lam_shape_{side}"]
                out[f"lam_B_rate_{side}"] = q[f"lam_rate_{side}"]
                out[f"E_lam_B_{side}"] = q[f"lam_shape_{side}"] / q[f"lam_rate_{side}"]
        return out

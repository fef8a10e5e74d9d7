"""The device arrays of a feature table and the products with them: ``X B`` and ``X^T E``
(sparse, all chains at once), the coordinates in the eigenbasis of ``X^T X`` and ``B``
recovered from them (with its null-space part drawn afresh in the kept draws when the
basis is not formed: :mod:`.eigen`)."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from ... import _rng
from ...linalg import csr_from_view, pattern_product
from . import eigen

#: the key stream of the null-space part of the kept draws of ``B`` (row-side decomposition)
LINK_STREAM = 0x6C6E6B  # "lnk"


def _csr(indptr, index, values, shape, dtype):
    """A device CSR of the Gibbs hot path (:mod:`bmczoo.linalg`) for a sparse
    table given by rows."""
    return csr_from_view(SimpleNamespace(indptr=indptr, index=index, values=values), shape, dtype)


class _Shared(threading.local):
    cache: dict | None = None


_SHARED = _Shared()


@contextlib.contextmanager
def shared_link_arrays():
    """Inside the block, :func:`link_arrays` of equal tables (the same entries, dtype and
    decomposition) is computed once: a fit whose prior and biases link the same table
    (the users' implicit feedback, say) decomposes it once.  The arrays are kept only
    until the outermost block ends."""
    if _SHARED.cache is not None:
        yield
        return
    _SHARED.cache = {}
    try:
        yield
    finally:
        _SHARED.cache = None


def _fingerprint(X) -> tuple:
    """What identifies a feature table's link arrays: its shape and a hash of its entries."""
    h = hashlib.blake2b(digest_size=16)
    for a in (X.indptr, X.indices, X.values):
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode())
        h.update(a.data)
    return X.shape, h.hexdigest()


def link_arrays(X, dtype, *, side: str = "rows", gram: bool | None = None) -> dict:
    """The device arrays of a feature table ``X`` (m x F): ``X`` and ``X^T`` as CSR
    matrices of the Gibbs hot path (for ``X B`` and ``X^T M`` in O(nnz K), all chains in
    one product), the eigenvalues ``d`` (F,) of ``X^T X`` (float64 on the host, ascending;
    those at or below ``F eps max(d)`` set to zero: the null space of ``X``) and ``u = V^T
    X^T 1`` (F,; zero on the null space), ``V`` its eigenvectors.

    Two decompositions give these (:mod:`.eigen`; :func:`~.eigen.use_gram` chooses):

    * on the features (``X^T X``, F x F): ``V`` (F, F) and ``Vr`` (F, r), the eigenvectors
      of the ``r`` nonzero eigenvalues (the last ``r`` columns of ``V``) are kept; ``X V``
      vanishes on the others, so ``X B = (X Vr) Bt[F - r:]`` and ``V^T X^T E`` is zero in
      its first ``F - r`` rows.  When ``X`` has fewer rows than features ``XV = X Vr``
      (m, r) is kept too and both products cost O(m r K) instead of O(F r K);
    * on the rows (``X X^T = U diag(s) U^T``, m x m, for many more features than rows):
      the same ``d`` and ``u`` on the range, ``XV = U_r diag(sqrt(s_r))`` (m, r), and no
      ``V``: the sweep needs only these (:func:`coords_mean`, :func:`coords_stats`), and
      ``B`` is recovered from its coordinates by sparse products (:func:`links_of`).

    Parameters
    ----------
    X : bmczoo.data.Features
        The table.
    dtype : dtype
        The device arrays' floating dtype.
    side : str
        ``"rows"`` or ``"cols"``: the side the table belongs to (named by the size guard).
    gram : bool, optional
        Force the decomposition on the rows (True) or on the features (False); by default
        :func:`~.eigen.use_gram`.

    Raises
    ------
    ValueError
        When the decomposition would need more memory than the size guard allows
        (:func:`~.eigen.check_size`), before anything is allocated.
    """
    if X.n_features == 0:
        raise ValueError("NormalWishart: a feature table with no features")
    m, F = X.shape
    gram = eigen.use_gram(m, F) if gram is None else bool(gram)
    eigen.check_size(m, F, gram, side)
    if _SHARED.cache is None:
        return _link_arrays(X, dtype, gram)
    key = (_fingerprint(X), np.dtype(dtype).name, gram)
    if key not in _SHARED.cache:
        _SHARED.cache[key] = _link_arrays(X, dtype, gram)
    return dict(_SHARED.cache[key])


def _link_arrays(X, dtype, gram: bool) -> dict:
    m, F = X.shape
    order = np.argsort(X.indices, kind="stable")  # the entries grouped by feature: X^T by rows
    t_indptr = np.zeros(F + 1, np.int64)
    np.cumsum(np.bincount(X.indices, minlength=F), out=t_indptr[1:])
    out = {
        "X": _csr(X.indptr, X.indices, X.values, (m, F), dtype),
        "Xt": _csr(t_indptr, X.row_ids()[order], X.values[order], (F, m), dtype),
    }
    if gram:
        d, u, XV = eigen.gram_eigen(X)
        out.update(d=jnp.asarray(d, dtype), u=jnp.asarray(u, dtype), XV=jnp.asarray(XV, dtype))
        return out
    V, d, u, null = eigen.feature_eigen(X)
    out.update(
        V=jnp.asarray(V, dtype),
        d=jnp.asarray(d, dtype),
        u=jnp.asarray(u, dtype),
        Vr=jnp.asarray(V[:, null:], dtype),
    )
    if m < F:
        out["XV"] = jnp.asarray(X.to_scipy() @ V[:, null:], dtype)
    return out


def _rank(link: dict) -> tuple[int, int]:
    """``(F, r)``: the number of features and the rank of ``X``."""
    return link["d"].shape[0], (link["Vr"] if "Vr" in link else link["XV"]).shape[1]


def coords_mean(link: dict, Bt: jax.Array) -> jax.Array:
    """``X B`` (C, m, K) for ``B = V Bt`` given its coordinates ``Bt`` (C, F, K) in the
    eigenbasis: ``(X Vr) Bt_r`` (only the range of ``X^T`` counts)."""
    F, r = _rank(link)
    Btr = Bt[:, F - r :]
    if "XV" in link:
        return jnp.einsum("mr,crk->cmk", link["XV"], Btr)
    return x_times(link, jnp.einsum("fr,crk->cfk", link["Vr"], Btr))


def coords_stats(link: dict, E: jax.Array) -> jax.Array:
    """``V^T X^T E`` (C, F, K) for ``E`` (C, m, K): zero on the null space of ``X``."""
    F, r = _rank(link)
    if "XV" in link:
        Gr = jnp.einsum("mr,cmk->crk", link["XV"], E)
    else:
        Gr = jnp.einsum("fr,cfk->crk", link["Vr"], xt_times(link, E))
    return jnp.pad(Gr, ((0, 0), (F - r, 0), (0, 0)))


def _range_weights(link: dict) -> jax.Array:
    """``W = U_r diag(s_r^{-1/2}) = XV diag(1 / d_r)`` (m, r) of the row-side
    decomposition: ``V_r = X^T W``."""
    F, r = _rank(link)
    return link["XV"] / link["d"][F - r :]


def links_of(link: dict, Bt: jax.Array) -> jax.Array:
    """``V Bt`` (C, F, K) for coordinates ``Bt`` (C, F, K) when the link holds ``V``;
    with the row-side decomposition (no ``V``), the range part ``V_r Bt_r = X^T (W Bt_r)``
    (:func:`_range_weights`, sparse products: no F x r array), i.e. ``V Bt`` with the
    null-space coordinates taken as zero: exact for a mean whose null part is zero (VB's
    ``q(B)``).  ``V_r`` is applied as ``X^T W``, so the rounding along the ``j``-th
    eigenvector is about ``eps sqrt(s_max / s_j)`` relative: at most ``sqrt(eps_64 / F)``
    in float64 (``s_j > F eps_64 s_max``), but up to percents in float32 along the nearly
    dependent directions of an ill-conditioned ``X`` (the sweep's own arrays are exact to
    float32: they are formed in float64 on the host)."""
    if "V" in link:
        return jnp.einsum("fg,cgk->cfk", link["V"], Bt)
    F, r = _rank(link)
    return xt_times(link, jnp.einsum("mr,crk->cmk", _range_weights(link), Bt[:, F - r :]))


def null_part(link: dict, Z: jax.Array, Lam: jax.Array, lam_B: jax.Array) -> jax.Array:
    """``(I - P) Y`` (C, F, K) with ``Y = Z Lc^{-1} / sqrt(lam_B)`` per chain (``Lambda =
    Lc Lc^T``; ``Z`` (C, F, K) standard normals, so the rows of ``Y`` are iid ``N(0,
    (lam_B Lambda)^{-1})``) and ``P = V_r V_r^T`` the projection on the row space of ``X``:
    a draw of ``B``'s null-space part ``V_null Bt_null`` given ``lam_B`` (C,) and ``Lambda``
    (C, K, K) (the same matrix normal ``MN(0, I - P, (lam_B Lambda)^{-1})``) without a
    basis of the null space: ``P Y = X^T W (W^T (X Y))`` (:func:`_range_weights`)."""
    K = Lam.shape[-1]
    Lc = jax.lax.linalg.cholesky(Lam, symmetrize_input=False)
    eye = jnp.broadcast_to(jnp.eye(K, dtype=Lam.dtype), Lam.shape)
    Lc_inv = jax.lax.linalg.triangular_solve(Lc, eye, left_side=True, lower=True)
    Y = jnp.einsum("cfk,ckl->cfl", Z, Lc_inv) * jax.lax.rsqrt(lam_B)[:, None, None]
    W = _range_weights(link)
    coef = jnp.einsum("mr,cmk->crk", W, x_times(link, Y))
    return Y - xt_times(link, jnp.einsum("mr,crk->cmk", W, coef))


def stored_links(prior_state: dict, links: dict, keys: jax.Array | None = None) -> dict:
    """The links' ``B_F`` (C, F, K) of a Gibbs state's coordinates ``Bt_F`` (for the draws
    kept with the factors).

    With the feature-side decomposition ``B_F = V Bt_F``.  With the row-side one (no ``V``:
    :func:`link_arrays`), ``B_F`` is its range part ``V_r Bt_r`` (:func:`links_of`) plus a
    fresh draw of its null-space part from its conditional given the state's ``lam_B_F``
    and ``Lambda_F`` (:func:`null_part`, from ``keys`` (C,), the chains' keys, on their
    own stream).  That conditional is the null part's full conditional (the data do not
    see it, and given ``lam_B`` and ``Lambda`` it is independent of the rest), so the kept
    ``(B, lam_B, mu, Lambda, M, N)`` is still a draw of the posterior; it is not the
    sweep's own null-space coordinates, which have no basis."""
    out = {}
    for key, value in prior_state.items():
        if not key.startswith("Bt_"):
            continue
        side = key[3:]
        link = {k[len(side) + 1 :]: v for k, v in links.items() if k.startswith(f"{side}/")}
        B = links_of(link, value)
        if "V" not in link:
            if keys is None:
                raise ValueError(
                    "stored_links: the row-side decomposition draws B's null-space part: pass "
                    "the chains' keys"
                )
            sub = jax.vmap(lambda k: jax.random.fold_in(k, LINK_STREAM + ord(side)))(keys)
            Z = jax.vmap(lambda k: _rng.normal(k, value.shape[1:], value.dtype))(sub)
            lam, Lam = prior_state[f"lam_B_{side}"], prior_state[f"Lambda_{side}"]
            B = B + null_part(link, Z, Lam, lam)
        out[f"B_{side}"] = B
    return out


def _product(csr, dense: jax.Array) -> jax.Array:
    """``A @ dense[c]`` for each chain: dense (C, m_other, K) -> (C, m, K), the chains
    stacked as columns of one sparse product."""
    C, m_other, K = dense.shape
    out = pattern_product(csr, csr.values, jnp.transpose(dense, (1, 0, 2)).reshape(m_other, C * K))
    return jnp.transpose(out.reshape(csr.shape[0], C, K), (1, 0, 2))


def x_times(link: dict, B: jax.Array) -> jax.Array:
    """``X B`` (C, m, K) for ``B`` (C, F, K)."""
    return _product(link["X"], B)


def xt_times(link: dict, E: jax.Array) -> jax.Array:
    """``X^T E`` (C, F, K) for ``E`` (C, m, K)."""
    return _product(link["Xt"], E)

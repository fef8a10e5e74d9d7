"""The device arrays of a feature table and the products with them: ``X B`` and ``X^T E``
(sparse, all chains at once) and the coordinates in the eigenbasis of ``X^T X``."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from ...linalg import csr_from_view, pattern_product


def _csr(indptr, index, values, shape, dtype):
    """A device CSR of the Gibbs hot path (:mod:`bmczoo.linalg`) for a sparse
    table given by rows."""
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
    C, m_other, K = dense.shape
    out = pattern_product(csr, csr.values, jnp.transpose(dense, (1, 0, 2)).reshape(m_other, C * K))
    return jnp.transpose(out.reshape(csr.shape[0], C, K), (1, 0, 2))


def x_times(link: dict, B: jax.Array) -> jax.Array:
    """``X B`` (C, m, K) for ``B`` (C, F, K)."""
    return _product(link["X"], B)


def xt_times(link: dict, E: jax.Array) -> jax.Array:
    """``X^T E`` (C, F, K) for ``E`` (C, m, K)."""
    return _product(link["Xt"], E)

"""The compiled CPU kernel (``bmczoo._native``, ``src/bmczoo/_gram.cc``): the per-row Gram
matrices and weighted sums of a rating pattern against the dense float64 formulas and
against the sparse-product path (``bmczoo.linalg.pattern_gram``), with rows and columns
without ratings, K in {1, 3, 10, 33}, 1 and 3 chains, 0 to 3 weights; float32 within a
rounding bound; bad input is an error of the call, not a crash; the hot-path resolution.

CI builds the kernel and sets ``BMCZOO_NATIVE=1`` (required): there a kernel that failed
to build is a failure, not a skip."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo import _native
from bmczoo import linalg as kr

needs_kernel = pytest.mark.skipif(
    not _native.available(), reason="bmczoo's compiled Gram kernel is not built"
)


def test_kernel_is_built_where_required():
    if _native.mode() != "required":
        pytest.skip("BMCZOO_NATIVE=1 is not set (CI sets it)")
    assert _native.available(), "the compiled Gram kernel did not build or load"


@pytest.mark.parametrize(
    "word, expected",
    [("", "auto"), ("auto", "auto"), ("0", "off"), ("OFF", "off"), ("1", "required")],
)
def test_native_setting_words(monkeypatch, word, expected):
    monkeypatch.setenv("BMCZOO_NATIVE", word)
    assert _native.mode() == expected


def test_native_setting_rejects_other_words(monkeypatch):
    monkeypatch.setenv("BMCZOO_NATIVE", "maybe")
    with pytest.raises(ValueError, match="BMCZOO_NATIVE='maybe'"):
        _native.mode()


def test_setup_reads_the_same_setting():
    """setup.py cannot import the package it builds: its copy of the words is the same."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parents[1] / "setup.py").read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "_MODES"]
    assert ast.literal_eval(node.value) == _native.MODES


def test_required_kernel_that_does_not_load_is_an_error(monkeypatch):
    monkeypatch.setattr(_native, "status", lambda: (False, "not built (test)"))
    monkeypatch.setenv("BMCZOO_NATIVE", "1")
    with pytest.raises(RuntimeError, match=r"required \(BMCZOO_NATIVE=1\) but not built"):
        _native.available()
    monkeypatch.setenv("BMCZOO_NATIVE", "auto")
    assert _native.available() is False


def test_fallback_is_said_where_the_kernel_should_be(monkeypatch, caplog):
    """Without the kernel a CPU run says so (once per process: ``note_fallback`` is cached;
    its undecorated body is called here); not when turned off or when loaded."""
    note = _native.note_fallback.__wrapped__
    monkeypatch.setattr(_native, "status", lambda: (False, "not built (test)"))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("BMCZOO_NATIVE", "auto")
    with caplog.at_level("WARNING", logger="bmczoo"):
        note()
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "not built (test)" in message and "BMCZOO_NATIVE=0" in message
    caplog.clear()
    monkeypatch.setenv("BMCZOO_NATIVE", "0")
    note()
    monkeypatch.setenv("BMCZOO_NATIVE", "auto")
    monkeypatch.setattr(_native, "status", lambda: (True, "/some/path"))
    note()
    assert not caplog.records


def _pattern(seed, m=23, m_other=17, n=120, empty_rows=(0, 9), empty_cols=(4,)):
    rng = np.random.default_rng(seed)
    allowed = [
        (i, j)
        for i in range(m)
        for j in range(m_other)
        if i not in empty_rows and j not in empty_cols
    ]
    pick = np.array(allowed)[rng.choice(len(allowed), size=n, replace=False)]
    data = bmc.RatingData(pick[:, 0], pick[:, 1], rng.normal(size=n), (m, m_other))
    A = np.zeros((m, m_other))
    A[data.rows, data.cols] = 1.0
    return data, A, rng


def _dense_sums(A, F, w):
    G = np.einsum("ij,cjk,cjl->cikl", A, F, F)
    S = np.einsum("ij,cjq,cjk->ciqk", A, w, F)
    Sw = np.einsum("ij,cjq->ciq", A, w)
    return G, S, Sw


@needs_kernel
@pytest.mark.parametrize("Q", [0, 1, 3])
@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("K", [1, 3, 10, 33])
def test_gram_kernel_equals_dense_and_product_float64(x64, K, C, Q):
    data, A, rng = _pattern(seed=K * 7 + C + Q)
    F = rng.normal(size=(C, data.shape[1], K))
    w = rng.normal(size=(C, data.shape[1], Q))
    refs = _dense_sums(A, F, w)
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64, hot_path="gram")
    run = jax.jit(lambda F, w: kr.pattern_gram(csr, F, w, packed=True))
    got = run(jnp.asarray(F), jnp.asarray(w))
    bcsr = kr.pattern_gram(csr, jnp.asarray(F), jnp.asarray(w), packed=True, path="bcsr")
    Gp_ref = np.asarray(kr.pack_upper(jnp.asarray(refs[0])))
    np.testing.assert_allclose(np.asarray(got.Gp), Gp_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(bcsr.Gp), Gp_ref, rtol=1e-12, atol=1e-12)
    got, bcsr = (got.G, got.S, got.Sw), (bcsr.G, bcsr.S, bcsr.Sw)
    for name, a, b, ref in zip(("G", "S", "Sw"), got, bcsr, refs):
        assert a.dtype == jnp.float64 and a.shape == ref.shape, name
        # float64: only the order of the sums differs
        np.testing.assert_allclose(np.asarray(a), ref, rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    G = np.asarray(got[0])
    np.testing.assert_array_equal(G, np.swapaxes(G, -1, -2))  # both triangles written
    assert not G[:, [0, 9]].any()  # rows without ratings: zero
    # without weights or packing: G alone, the same
    alone = kr.pattern_gram(csr, jnp.asarray(F))
    assert alone.Gp is None and alone.S is None and alone.Sw is None
    np.testing.assert_array_equal(np.asarray(alone.G), G)


@pytest.mark.parametrize("C, Q", [(1, 0), (3, 2)])
@pytest.mark.parametrize("K", [3, 13, 33])
def test_rating_weights_equal_dense_on_both_paths(x64, K, C, Q):
    """Per-rating weights ``r`` (C, n) in the pattern's order multiply every term of their
    rating: the kernel (when built) and the sparse-product path against the dense sums."""
    data, _, rng = _pattern(seed=K + C)
    F = rng.normal(size=(C, data.shape[1], K))
    w = rng.normal(size=(C, data.shape[1], Q))
    r = rng.gamma(2.0, size=(C, data.n))  # in row order (the pattern's)
    order = np.asarray(data.row_view.order)
    A = np.zeros((C,) + data.shape)
    A[:, np.asarray(data.rows)[order], np.asarray(data.cols)[order]] = r
    G = np.einsum("cij,cjk,cjl->cikl", A, F, F)
    S = np.einsum("cij,cjq,cjk->ciqk", A, w, F)
    Sw = np.einsum("cij,cjq->ciq", A, w)
    paths = ["bcsr"] + (["gram"] if _native.available() else [])
    for path in paths:
        csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64, hot_path=path)
        got = jax.jit(lambda F, w, r: kr.pattern_gram(csr, F, w, packed=True, rating_weights=r))(
            *(jnp.asarray(x) for x in (F, w, r))
        )
        Gp = np.asarray(kr.pack_upper(jnp.asarray(G)))
        np.testing.assert_allclose(np.asarray(got.Gp), Gp, rtol=1e-12, atol=1e-12, err_msg=path)
        for name, a, ref in zip(("G", "S", "Sw"), (got.G, got.S, got.Sw), (G, S, Sw)):
            np.testing.assert_allclose(
                np.asarray(a), ref, rtol=1e-12, atol=1e-12, err_msg=f"{path} {name}"
            )


@needs_kernel
@pytest.mark.parametrize("K", [3, 10, 33])
def test_gram_kernel_float32_within_rounding(x64, K):
    """float32: each entry is a sum of a row's products, so its error is bounded by about
    (degree + 2) eps times the sum of the products' absolute values."""
    data, A, rng = _pattern(seed=K)
    F = rng.normal(size=(2, data.shape[1], K)).astype(np.float32)
    w = rng.normal(size=(2, data.shape[1], 2)).astype(np.float32)
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float32, hot_path="gram")
    G, _, S, Sw = kr.pattern_gram(csr, jnp.asarray(F), jnp.asarray(w))
    assert G.dtype == S.dtype == Sw.dtype == jnp.float32
    F64, w64 = F.astype(np.float64), w.astype(np.float64)
    eps = np.finfo(np.float32).eps
    deg = A.sum(1)[None, :, None, None]
    ref = _dense_sums(A, F64, w64)
    bound = _dense_sums(A, np.abs(F64), np.abs(w64))
    for name, a, r, b in zip(("G", "S", "Sw"), (G, S, Sw), ref, bound):
        d = deg if a.ndim == 4 else deg[..., 0]
        err = np.abs(np.asarray(a, np.float64) - r)
        assert np.all(err <= (d + 2) * eps * b + 1e-30), name


@needs_kernel
def test_gram_kernel_large_degree_and_vmap(x64):
    """Rows with more ratings than the kernel's gathered buffer holds (it sums them pass
    by pass), and a vmap over a leading batch (one call per element)."""
    rng = np.random.default_rng(3)
    m, m_other, K = 3, 5000, 5
    rows = np.repeat(np.arange(m), [4000, 1, 2500])
    cols = np.concatenate([rng.choice(m_other, 4000, replace=False), [7], np.arange(2500)])
    data = bmc.RatingData(rows, cols, np.zeros(rows.size), (m, m_other))
    A = np.zeros((m, m_other))
    A[rows, cols] = 1.0
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64, hot_path="gram")
    F = rng.normal(size=(4, 1, m_other, K))
    out = jax.vmap(lambda F: kr.pattern_gram(csr, F).G)(jnp.asarray(F))
    ref = np.einsum("ij,bcjk,bcjl->bcikl", A, F, F)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-11, atol=1e-10)


@needs_kernel
def test_gram_kernel_rejects_bad_input():
    data, _, rng = _pattern(seed=1)
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float32, hot_path="gram")
    F = jnp.asarray(rng.normal(size=(1, data.shape[1], 4)), jnp.float32)
    bad = csr._replace(index=csr.index.at[5].set(data.shape[1]))  # one past the last column
    with pytest.raises(Exception, match="column index is out of range"):
        jax.block_until_ready(_native.gram(bad.indptr, bad.index, F))
    neg = csr._replace(index=csr.index.at[0].set(-1))
    with pytest.raises(Exception, match="column index is out of range"):
        jax.block_until_ready(_native.gram(neg.indptr, neg.index, F))
    short = csr._replace(indptr=csr.indptr.at[-1].set(csr.index.shape[0] + 1))
    with pytest.raises(Exception, match="indptr"):
        jax.block_until_ready(_native.gram(short.indptr, short.index, F))
    with pytest.raises(Exception, match="float32 or float64"):
        jax.block_until_ready(_native.gram(csr.indptr, csr.index, F.astype(jnp.bfloat16)))
    short_weights = jnp.ones((1, data.n - 1), jnp.float32)
    with pytest.raises(Exception, match="rating weights must be"):
        jax.block_until_ready(_native.gram(csr.indptr, csr.index, F, rating_weights=short_weights))
    # the process is still usable, and the right input still gives the right answer
    G = _native.gram(csr.indptr, csr.index, F)[0]
    assert np.all(np.isfinite(np.asarray(G)))


def test_hot_path_gram_resolution():
    if _native.available():
        assert kr.resolve_hot_path("auto", "cpu") == "gram"
        assert kr.resolve_hot_path("gram", "cpu") == "gram"
    else:
        assert kr.resolve_hot_path("auto", "cpu") == "bcsr"
        with pytest.raises(ValueError, match="not built"):
            kr.resolve_hot_path("gram", "cpu")
    with pytest.raises(ValueError, match="CPU only"):
        kr.resolve_hot_path("gram", "gpu")
    assert kr.resolve_hot_path("auto", "gpu") == "segment"
    data, _, _ = _pattern(seed=2)
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float32, hot_path="bcsr")
    # the kernel only on the "gram" path, and there from GRAM_MIN_K columns on
    assert not kr.uses_gram_kernel(csr, 64)
    if _native.available():
        gram = csr.with_hot_path("gram")
        assert kr.uses_gram_kernel(gram, kr.GRAM_MIN_K)
        assert not kr.uses_gram_kernel(gram, kr.GRAM_MIN_K - 1)


def test_native_off_by_environment():
    """``BMCZOO_NATIVE=0``: the kernel is not loaded and "auto" is BCSR on the CPU."""
    code = (
        "from bmczoo import _native, linalg as kr; "
        "print(_native.available(), kr.resolve_hot_path('auto', 'cpu'))"
    )
    env = dict(os.environ, BMCZOO_NATIVE="0", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "bcsr"]


@needs_kernel
def test_gram_kernel_edge_shapes(x64):
    """K = 0 (only the weights' sums), no chains, no ratings at all, no rows."""
    data, A, rng = _pattern(seed=5)
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float64, hot_path="gram")
    w = rng.normal(size=(2, data.shape[1], 2))
    G, Gp, S, Sw = _native.gram(
        csr.indptr, csr.index, jnp.zeros((2, data.shape[1], 0)), w, packed=True
    )
    assert G.shape == (2, data.shape[0], 0, 0) and S.shape == (2, data.shape[0], 2, 0)
    assert Gp.shape == (2, data.shape[0], 0)
    np.testing.assert_allclose(np.asarray(Sw), np.einsum("ij,cjq->ciq", A, w), rtol=1e-12)
    G = _native.gram(csr.indptr, csr.index, jnp.zeros((0, data.shape[1], 3)))[0]
    assert G.shape == (0, data.shape[0], 3, 3)
    no_index = jnp.zeros(0, jnp.int32)  # a pattern without ratings, 4 rows
    G = _native.gram(jnp.zeros(5, jnp.int32), no_index, jnp.ones((1, 6, 3)))[0]
    np.testing.assert_array_equal(np.asarray(G), np.zeros((1, 4, 3, 3)))
    G = _native.gram(jnp.zeros(1, jnp.int32), no_index, jnp.ones((1, 6, 3)))[0]  # no rows
    assert G.shape == (1, 0, 3, 3)

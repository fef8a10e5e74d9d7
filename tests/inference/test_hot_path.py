"""The hot paths of the sparse products (``bmczoo.linalg.pattern_product``): the BCSR
product, the sorted segment sum (the default on other platforms than the CPU) and the
compiled Gram kernel (the CPU default where it is built; ``tests/test_native.py`` checks
the kernel itself) give the same sums up to float rounding, in float64, for the kernels,
the Gibbs-side products, whole Gibbs sweeps and VB iterations; with rows and columns
without ratings, K in {1, 3, 10, 33}, 1 and 3 chains, and with the segment sums
chunked."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bmczoo as bmc
from bmczoo.inference.gibbs.rows import _pattern_product
from bmczoo import _native
from bmczoo import linalg as kr

from ._devices import run_four_devices

RTOL = 1e-12  # float64: only the summation order differs


def _ratings(seed=0, m1=11, m2=9, n=40, empty_rows=(0, 6), empty_cols=(3,)):
    rng = np.random.default_rng(seed)
    allowed = np.array(
        [
            (i, j)
            for i in range(m1)
            for j in range(m2)
            if i not in empty_rows and j not in empty_cols
        ]
    )
    pick = allowed[rng.choice(len(allowed), size=n, replace=False)]
    return bmc.RatingData(pick[:, 0], pick[:, 1], rng.normal(size=n), (m1, m2)), rng


def _dense(data: bmc.RatingData):
    Y = np.zeros(data.shape)
    A = np.zeros(data.shape)
    Y[data.rows, data.cols] = data.values
    A[data.rows, data.cols] = 1.0
    return Y, A


def _both(view, shape, dtype=jnp.float64):
    return {p: kr.csr_from_view(view, shape, dtype, hot_path=p) for p in ("bcsr", "segment")}


def test_hot_path_setting_and_resolution():
    assert kr.get_hot_path() == "auto"
    assert kr.resolve_hot_path("auto", "cpu") == ("gram" if _native.available() else "bcsr")
    assert kr.resolve_hot_path("auto", "gpu") == "segment"
    assert kr.resolve_hot_path("auto", "tpu") == "segment"
    assert kr.resolve_hot_path("segment", "cpu") == "segment"
    with kr.use_hot_path("segment"):
        assert kr.get_hot_path() == "segment"
        data, _ = _ratings()
        assert kr.csr_from_view(data.row_view, data.shape, jnp.float32).hot_path == "segment"
    assert kr.get_hot_path() == "auto"
    data, _ = _ratings()
    csr = kr.csr_from_view(data.row_view, data.shape, jnp.float32)
    assert csr.hot_path == kr.resolve_hot_path("auto", jax.devices()[0].platform)
    assert csr.with_hot_path("segment").hot_path == "segment"
    with pytest.raises(ValueError, match="hot path must be one of"):
        kr.set_hot_path("cusparse")
    # the path is static pytree metadata: a jitted function retraces when it changes
    leaves, tree = jax.tree_util.tree_flatten(csr.with_hot_path("segment"))
    assert jax.tree_util.tree_unflatten(tree, leaves).hot_path == "segment"
    assert tree != jax.tree_util.tree_flatten(csr.with_hot_path("bcsr"))[1]


@pytest.mark.parametrize("chunk", [None, 64, 1])
@pytest.mark.parametrize("cols", [1, 5, 8, 33])
def test_pattern_product_paths_equal_dense(x64, cols, chunk):
    data, rng = _ratings(seed=cols)
    Y, A = _dense(data)
    D = rng.normal(size=(data.shape[1], cols))
    for path, csr in _both(data.row_view, data.shape).items():
        for entries, ref in ((csr.values, Y @ D), (csr.ones, A @ D)):
            out = kr.pattern_product(csr, entries, jnp.asarray(D), chunk_bytes=chunk)
            np.testing.assert_allclose(np.asarray(out), ref, rtol=RTOL, atol=1e-13, err_msg=path)
    # a 1-D operand, and the CSR of the transpose
    csr = _both(data.col_view, data.shape[::-1])["segment"]
    v = rng.normal(size=data.shape[0])
    np.testing.assert_allclose(
        np.asarray(kr.pattern_product(csr, csr.values, jnp.asarray(v), chunk_bytes=chunk)),
        Y.T @ v,
        rtol=RTOL,
        atol=1e-13,
    )


def test_segment_path_without_row_ids_and_with_dropped_entries(x64):
    """A CSR built by hand (no row_ids) gets them from indptr; row ids out of range (the
    padding entries of a sharded block) contribute nothing."""
    data, rng = _ratings(seed=4)
    Y, _ = _dense(data)
    csr = _both(data.row_view, data.shape)["segment"]
    D = rng.normal(size=(data.shape[1], 3))
    bare = csr._replace(row_ids=None)
    np.testing.assert_allclose(
        np.asarray(kr.pattern_product(bare, bare.values, jnp.asarray(D))), Y @ D, rtol=RTOL
    )
    n = csr.index.shape[0]
    ids = jnp.concatenate([csr.row_ids, jnp.full(5, data.shape[0], jnp.int32)])
    idx = jnp.concatenate([csr.index, jnp.zeros(5, jnp.int32)])
    val = jnp.concatenate([csr.values, jnp.full(5, 7.0)])  # non-zero on purpose
    for chunk in (None, 16):
        out = kr.segment_matmul(ids, idx, val, data.shape[0], jnp.asarray(D), chunk)
        np.testing.assert_allclose(np.asarray(out), Y @ D, rtol=RTOL, atol=1e-13)
    assert n == data.n


@pytest.mark.parametrize("C", [1, 3])
@pytest.mark.parametrize("K", [1, 3, 10, 33])
def test_row_precision_and_rhs_paths_equal(x64, K, C):
    data, rng = _ratings(seed=K + C, m1=13, m2=40, n=150)
    A = rng.normal(size=(C, data.shape[1], K, K))
    S = A @ np.swapaxes(A, -1, -2)
    F = rng.normal(size=(C, data.shape[1], K))
    w = rng.uniform(0.5, 2.0, size=(C, K))
    out = {}
    for path, csr in _both(data.row_view, data.shape).items():
        P = kr.row_precision(csr, jnp.asarray(S), jnp.asarray(w), 0.7)
        r = kr.row_rhs(csr, jnp.asarray(F), 0.7, prior_shift=jnp.asarray(w))
        out[path] = (np.asarray(P), np.asarray(r))
    # and the segment path with small chunks
    csr = _both(data.row_view, data.shape)["segment"]
    old = kr.SEGMENT_CHUNK_BYTES
    kr.SEGMENT_CHUNK_BYTES = 512
    try:
        out["chunked"] = (
            np.asarray(kr.row_precision(csr, jnp.asarray(S), jnp.asarray(w), 0.7)),
            np.asarray(kr.row_rhs(csr, jnp.asarray(F), 0.7, prior_shift=jnp.asarray(w))),
        )
    finally:
        kr.SEGMENT_CHUNK_BYTES = old
    for path in ("segment", "chunked"):
        for a, b in zip(out[path], out["bcsr"]):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-12, err_msg=path)
    # the empty rows get the prior precision only
    np.testing.assert_allclose(out["segment"][0][:, 0], w[:, :, None] * np.eye(K), rtol=RTOL)


@pytest.mark.parametrize("C, K", [(1, 3), (3, 10)])
def test_gibbs_side_products_paths_equal(x64, C, K):
    data, rng = _ratings(seed=7, m1=12, m2=15, n=70)
    other = jnp.asarray(rng.normal(size=(C, data.shape[1], K)))
    dense = jnp.concatenate([kr.pack_upper(kr.outer(other)), other], -1)
    csrs = _both(data.row_view, data.shape)
    a = _pattern_product(csrs["bcsr"], csrs["bcsr"].ones, dense)
    b = _pattern_product(csrs["segment"], csrs["segment"].ones, dense)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=RTOL, atol=1e-12)
    a = _pattern_product(csrs["bcsr"], csrs["bcsr"].values, other)
    b = _pattern_product(csrs["segment"], csrs["segment"].values, other)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("K", [1, 3, 10, 33])
def test_chains_stacked_or_one_product_each_are_equal(x64, monkeypatch, dtype, K):
    """On the CPU the chains' sparse products are one product with the chains as columns
    or, above ``STACK_MAX_BYTES``, one per chain: the same values bit for bit (each output
    column sums the same terms in the same order), with empty rows and columns."""
    from bmczoo.inference.gibbs import rows

    C = 3
    data, rng = _ratings(seed=5, m1=14, m2=12, n=60)
    csr = kr.csr_from_view(data.row_view, data.shape, dtype, hot_path="bcsr")
    other = jnp.asarray(rng.normal(size=(C, data.shape[1], K)), dtype)
    dense = jnp.concatenate([kr.pack_upper(kr.outer(other)), other], -1)

    def product(data_):
        f = jax.jit(lambda d: rows._pattern_product(csr, data_, d))
        n_calls = f.lower(dense).as_text().count("cpu_csr_sparse_dense")
        return np.asarray(f(dense)), n_calls

    for entries in (csr.ones, csr.values):
        stacked, n_stacked = product(entries)
        monkeypatch.setattr(rows, "STACK_MAX_BYTES", 0)
        each, n_each = product(entries)
        monkeypatch.undo()
        assert (n_stacked, n_each) == (1, C)  # the two layouts were compiled
        np.testing.assert_array_equal(each, stacked)


def _fit_both(train, paths=("bcsr", "segment"), **kw):
    out = {}
    for path in paths:
        with kr.use_hot_path(path):
            out[path] = bmc.fit(train, progress_bar=False, dtype=jnp.float64, **kw)
    return out[paths[0]], out[paths[1]]


def _assert_same_samples(a, b):
    assert a.samples.keys() == b.samples.keys()
    for k in a.samples:
        np.testing.assert_allclose(
            b.samples[k], a.samples[k], rtol=SWEEP_TOL, atol=SWEEP_TOL, err_msg=k
        )


def _short_run(K, C, seed):
    """A short Gibbs run that keeps the factors (``bmc.fit`` arguments)."""
    kw = dict(num_warmup=3, num_samples=6, thinning=2, store_factors=True)
    return dict(kw, K=K, num_chains=C, seed=seed)


# Gibbs chains driven by the same normals: the two paths differ by float64 rounding,
# carried through the chain (a few 1e-13 after ~10 sweeps)
SWEEP_TOL = 1e-9


# K = 33 is in the default suite through the products (test_row_precision_and_rhs_paths_equal)
@pytest.mark.parametrize(
    "C, K, biases",
    [
        (1, 1, False),
        (3, 3, True),
        (1, 10, False),
        pytest.param(3, 33, False, marks=pytest.mark.slow),
    ],
)
def test_gibbs_sweeps_paths_equal(C, K, biases):
    sim = bmc.datasets.simulate_paper(40, seed=2)
    # a row and a column without ratings
    keep = (sim.train.rows != 5) & (sim.train.cols != 7)
    train = bmc.RatingData(
        sim.train.rows[keep], sim.train.cols[keep], sim.train.values[keep], sim.train.shape
    )
    a, b = _fit_both(
        train, **_short_run(K, C, seed=1), biases=biases, prior=bmc.priors.InverseGamma()
    )
    _assert_same_samples(a, b)


@pytest.mark.skipif(not _native.available(), reason="the compiled Gram kernel is not built")
@pytest.mark.parametrize(
    "C, K, member, min_k",
    [
        (2, 14, "recommended", None),  # Normal-Wishart rows, learned noise, biases
        (1, 13, "inverse-gamma", None),  # the paper's prior with its fused column moves
        (3, 3, "recommended", 1),  # the kernel below GRAM_MIN_K too
    ],
)
def test_gibbs_sweeps_gram_kernel_equals_bcsr(monkeypatch, C, K, member, min_k):
    """Whole Gibbs runs on the "gram" path (the Gram matrices, the biases' sums and the
    learned noise's quadratic forms from the compiled kernel) and on the BCSR path, driven
    by the same normals: equal up to float64 rounding."""
    if min_k is not None:
        monkeypatch.setattr(kr, "GRAM_MIN_K", min_k)
        jax.clear_caches()  # the threshold is read when a sweep is traced
    sim = bmc.datasets.simulate_paper(40, seed=4)
    keep = (sim.train.rows != 3) & (sim.train.cols != 8)
    train = sim.train.subset(np.flatnonzero(keep))
    kw = _short_run(K, C, seed=2)
    if member == "recommended":
        kw.update(
            prior=bmc.priors.NormalWishart(),
            likelihood=bmc.likelihoods.LearnedNoise(),
            biases=True,
        )
    else:
        kw.update(prior=bmc.priors.InverseGamma())
    _assert_same_samples(*_fit_both(train, paths=("bcsr", "gram"), **kw))
    if min_k is not None:
        jax.clear_caches()


@pytest.mark.parametrize("C, K, biases", [(1, 3, False), (3, 10, True)])
def test_vb_iterations_paths_equal(C, K, biases):
    sim = bmc.datasets.simulate_paper(40, seed=3)
    keep = (sim.train.rows != 2) & (sim.train.cols != 9)
    train = bmc.RatingData(
        sim.train.rows[keep], sim.train.cols[keep], sim.train.values[keep], sim.train.shape
    )
    a, b = _fit_both(
        train,
        K=K,
        method="vb",
        max_iter=8,
        tol=0.0,
        num_chains=C,
        seed=2,
        biases=biases,
        prior=bmc.priors.InverseGamma(),
    )
    for f in ("m", "n", "V_diag", "W_diag", "elbo"):
        np.testing.assert_allclose(
            getattr(b, f), getattr(a, f), rtol=SWEEP_TOL, atol=SWEEP_TOL, err_msg=f
        )


@pytest.mark.slow  # a 4-device child process; the paths' equality is in the default suite on one device
def test_sharded_segment_path_equals_one_device_bcsr():
    """Four CPU devices (a child process), segment sums over the padded per-device blocks,
    against the one-device BCSR run: equal up to float64 rounding."""
    diffs = run_four_devices("hot-paths", timeout=600)
    assert diffs.pop("devices") == 4
    assert diffs and all(v <= SWEEP_TOL for v in diffs.values()), diffs

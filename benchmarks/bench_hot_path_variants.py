"""Side-by-side timings of the variants of the Gibbs/VB hot path (one process, one run).

    python benchmarks/bench_hot_path_variants.py --sizes 100k,1m [--K 10] [--chains 4]

For the rows of ``M`` (``m1`` rows, dense operand from the ``m2`` items) and the rows of
``N`` (``m2`` rows, operand from the ``m1`` users) of synthetic MovieLens-shaped data:

precision ``sum_j N_j N_j^T`` per row
  * ``bcsr-full``      BCSR @ (m_other x C K^2), the original kernel
  * ``bcsr-full-pad``  same, dense operand padded to a multiple of 8 columns
  * ``bcsr-tri``       only the K(K+1)/2 upper-triangle entries (symmetry)
  * ``bcsr-tri-pad``   triangle + padding to a multiple of 8 columns (what kernels.py does)
  * ``segsum-tri``     ``segment_sum`` over the ratings of an n x K(K+1)/2 array
  * ``buckets-gemm``   rows grouped by degree (``(2^k, 2^(k+1)]``), each group's rated
                       factor rows gathered into a padded (B, D, K) block and multiplied
                       by a batched GEMM ``g^T g`` (reads n K floats instead of n K(K+1)/2)
  * ``gram-kernel``    the compiled kernel (``bmczoo._native``, when built): each row's
                       factor rows gathered into an L1 buffer, their Gram matrix
                       accumulated in registers (the Gibbs sweep's at K >= GRAM_MIN_K)
  * ``bcsr-prec+rhs``  precision and rhs in ONE sparse product: the rhs needs the rating
                       values and the precision the pattern, so the sparse matrix is
                       ``[A_1 | A_Y]`` (2n non-zeros) against a block-diagonal operand
right-hand side ``sum_j Y_ij N_j``: ``bcsr`` (C K columns) / ``bcsr-pad`` / ``segsum``
Cholesky: ``jnp.linalg.cholesky`` / ``lax.linalg.cholesky(symmetrize_input=False)`` /
  ``unrolled`` (element-wise over the batch, K <= 16; compile time reported)
solves: ``lax.linalg.triangular_solve`` x2 / unrolled
chains: ``C`` chains stacked as extra dense columns of one sparse product vs ``jax.vmap``
  of the single-chain computation (precision + rhs, and a whole ``gibbs.step``)
dtype: float32 vs float64 for the precision product

Every variant is checked against ``bmczoo.linalg`` (max relative difference).
Timings: median and best of ``--repeats`` calls of the jitted function; the machine may
be shared (load average printed), the best is the least disturbed estimate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic import SIZES, parse_sizes, synthetic_ratings  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="100k,1m")
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument(
        "--chains", type=int, default=4, help="chains for the stacked-vs-vmap comparison"
    )
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--segsum-max-mb",
        type=float,
        default=1500.0,
        help="skip segment_sum variants whose n x K(K+1)/2 temporary exceeds this",
    )
    args = ap.parse_args(argv)

    import jax
    import jax.experimental.sparse
    import jax.numpy as jnp

    import bmczoo as bmc
    from bmczoo.inference import gibbs
    from bmczoo import _native
    from bmczoo import linalg as kr
    from bmczoo.priors import InverseGamma

    K = args.K
    T = K * (K + 1) // 2
    iu, ju = np.triu_indices(K)
    repeats = args.repeats

    def timeit(fn, *a):
        t0 = time.perf_counter()
        comp = jax.jit(fn).lower(*a).compile()
        tc = time.perf_counter() - t0
        out = jax.block_until_ready(comp(*a))
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(comp(*a))
            ts.append(time.perf_counter() - t0)
        return out, float(np.median(ts)), float(np.min(ts)), tc

    def rel(a, b):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))

    rows_out = []

    def report(size, side, what, variant, med, best, tc, err, note=""):
        rows_out.append((size, side, what, variant, med, best, tc, err, note))
        e = "" if err is None else f"{err:9.1e}"
        print(
            f"{size:5s} {side:5s} {what:10s} {variant:16s} {med * 1e3:10.2f} {best * 1e3:10.2f} {tc:8.2f} {e:>9s} {note}",
            flush=True,
        )

    print(
        f"hot-path variants, K={K}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
        f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(
        f"{'size':5s} {'side':5s} {'what':10s} {'variant':16s} {'median ms':>10s} {'best ms':>10s} {'compile':>8s} {'rel.err':>9s}"
    )

    for size in parse_sizes(args.sizes):
        m1, m2, n = SIZES[size]
        r, c, v = synthetic_ratings(m1, m2, n, seed=args.seed)
        data, _ = bmc.RatingData(r, c, v, (m1, m2)).centered()
        del r, c, v
        for side, view, m, mo in (("rows", data.row_view, m1, m2), ("cols", data.col_view, m2, m1)):
            csr = kr.csr_from_view(view, (m, mo), jnp.float32)
            rowid = jnp.asarray(np.repeat(np.arange(m, dtype=np.int32), np.diff(view.indptr)))
            F = jax.random.normal(jax.random.key(1), (1, mo, K), jnp.float32)
            g = jnp.ones((1, K), jnp.float32)

            # ---------------- precision (C = 1), the reference is kernels.row_precision
            ref, med, best, tc = timeit(
                lambda F, csr: kr.row_precision(csr, kr.outer(F), g, 1.0), F, csr
            )
            report(size, side, "precision", "kernels (chosen)", med, best, tc, None)

            def bcsr_full(F, csr, pad):
                dense = kr.outer(F)[0].reshape(mo, K * K)
                if pad:
                    dense = jnp.pad(dense, ((0, 0), (0, (-K * K) % 8)))
                a = jax.experimental.sparse.BCSR(
                    (csr.ones, csr.index, csr.indptr),
                    shape=csr.shape,
                    indices_sorted=True,
                    unique_indices=True,
                )
                G = (a @ dense)[:, : K * K]
                return G.reshape(1, m, K, K) + g[:, None, :, None] * jnp.eye(K)

            def bcsr_tri(F, csr, pad):
                dense = F[0][:, iu] * F[0][:, ju]
                if pad:
                    dense = jnp.pad(dense, ((0, 0), (0, (-T) % 8)))
                a = jax.experimental.sparse.BCSR(
                    (csr.ones, csr.index, csr.indptr),
                    shape=csr.shape,
                    indices_sorted=True,
                    unique_indices=True,
                )
                G = (a @ dense)[None, :, :T]
                return kr.unpack_upper(G, K) + g[:, None, :, None] * jnp.eye(K)

            def segsum_tri(F, csr, rowid):
                X = F[0][csr.index]
                S = X[:, iu] * X[:, ju]
                G = jax.ops.segment_sum(S, rowid, num_segments=m, indices_are_sorted=True)[None]
                return kr.unpack_upper(G, K) + g[:, None, :, None] * jnp.eye(K)

            def gram_kernel(F, csr):  # the compiled kernel (the Gibbs sweep's at K >= GRAM_MIN_K)
                G = kr.pattern_gram(csr.with_hot_path("gram"), F).G
                return G + g[:, None, :, None] * jnp.eye(K)

            variants = [
                ("bcsr-full", lambda F, c: bcsr_full(F, c, False)),
                ("bcsr-full-pad", lambda F, c: bcsr_full(F, c, True)),
                ("bcsr-tri", lambda F, c: bcsr_tri(F, c, False)),
                ("bcsr-tri-pad", lambda F, c: bcsr_tri(F, c, True)),
            ]
            if _native.available():
                variants.append(("gram-kernel", gram_kernel))
            for name, fn in variants:
                out, med, best, tc = timeit(fn, F, csr)
                report(size, side, "precision", name, med, best, tc, rel(out, ref))
            buckets = _degree_buckets(np.asarray(view.indptr), np.asarray(view.index), mo)
            back = jnp.asarray(np.argsort(np.concatenate([r for _, r in buckets])))
            blocks = [jnp.asarray(idx) for idx, _ in buckets]

            def buckets_gemm(F, blocks):
                Fp = jnp.concatenate([F[0], jnp.zeros((1, K), F.dtype)])  # the padding row
                parts = []
                for idx in blocks:
                    x = Fp[idx]  # (B, D, K)
                    parts.append(jnp.einsum("bdk,bdl->bkl", x, x))
                G = jnp.concatenate(parts)[back][None]
                return G + g[:, None, :, None] * jnp.eye(K)

            out, med, best, tc = timeit(buckets_gemm, F, blocks)
            padded = sum(b.size for b in blocks) / n
            report(
                size,
                side,
                "precision",
                "buckets-gemm",
                med,
                best,
                tc,
                rel(out, ref),
                f"{padded:.2f}x the ratings gathered",
            )
            if n * T * 4 / 2**20 <= args.segsum_max_mb:
                out, med, best, tc = timeit(segsum_tri, F, csr, rowid)
                report(size, side, "precision", "segsum-tri", med, best, tc, rel(out, ref))
            else:
                report(
                    size,
                    side,
                    "precision",
                    "segsum-tri",
                    float("nan"),
                    float("nan"),
                    0.0,
                    None,
                    f"skipped: n x {T} temporary of {n * T * 4 / 2**20:.0f} MB",
                )

            # ---------------- rhs
            rref, med, best, tc = timeit(lambda F, csr: kr.row_rhs(csr, F, 1.0), F, csr)
            report(size, side, "rhs", "kernels (chosen)", med, best, tc, None)

            def rhs_bcsr(F, csr, rowid):
                a = jax.experimental.sparse.BCSR(
                    (csr.values, csr.index, csr.indptr),
                    shape=csr.shape,
                    indices_sorted=True,
                    unique_indices=True,
                )
                return (a @ F[0])[None]

            def rhs_segsum(F, csr, rowid):
                return jax.ops.segment_sum(
                    F[0][csr.index] * csr.values[:, None],
                    rowid,
                    num_segments=m,
                    indices_are_sorted=True,
                )[None]

            for name, fn in (("bcsr (unpadded)", rhs_bcsr), ("segsum", rhs_segsum)):
                out, med, best, tc = timeit(fn, F, csr, rowid)
                report(size, side, "rhs", name, med, best, tc, rel(out, rref))

            # ---------------- precision + rhs in one product: [A_1 | A_Y] @ blockdiag(tri, F)
            deg = np.diff(view.indptr).astype(np.int64)
            start = np.repeat(view.indptr[:-1].astype(np.int64), deg)
            within = np.arange(n, dtype=np.int64) - start
            pos1 = 2 * start + within
            pos2 = pos1 + np.repeat(deg, deg)
            idx2 = np.empty(2 * n, np.int32)
            idx2[pos1] = view.index
            idx2[pos2] = view.index + mo
            val2 = np.empty(2 * n, np.float32)
            val2[pos1] = 1.0
            val2[pos2] = view.values
            idx2, val2 = jnp.asarray(idx2), jnp.asarray(val2)
            ptr2 = jnp.asarray(2 * view.indptr.astype(np.int64), jnp.int32)
            Tp = T + (-T) % 8
            Kp = K + (-K) % 8

            def both(F, ptr2, idx2, val2):
                top = jnp.pad(F[0][:, iu] * F[0][:, ju], ((0, 0), (0, Tp - T + Kp)))
                bot = jnp.pad(F[0], ((0, 0), (Tp, Kp - K)))
                G = kr.csr_matmul(
                    ptr2, idx2, val2, (m, 2 * mo), jnp.concatenate([top, bot], axis=0)
                )
                P = kr.unpack_upper(G[None, :, :T], K) + g[:, None, :, None] * jnp.eye(K)
                return P, G[None, :, Tp : Tp + K]

            (outP, outr), med, best, tc = timeit(both, F, ptr2, idx2, val2)
            report(
                size,
                side,
                "prec+rhs",
                "one product",
                med,
                best,
                tc,
                max(rel(outP, ref), rel(outr, rref)),
            )
            _, med, best, tc = timeit(
                lambda F, csr: (
                    kr.row_precision(csr, kr.outer(F), g, 1.0),
                    kr.row_rhs(csr, F, 1.0),
                ),
                F,
                csr,
            )
            report(size, side, "prec+rhs", "two (chosen)", med, best, tc, None)
            del idx2, val2, ptr2

            # ---------------- float64 precision (same kernel) for comparison
            with jax.enable_x64(True):
                csr64 = kr.csr_from_view(view, (m, mo), jnp.float64)
                F64 = F.astype(jnp.float64)
                out, med, best, tc = timeit(
                    lambda F, c: kr.row_precision(c, kr.outer(F), g.astype(F.dtype), 1.0),
                    F64,
                    csr64,
                )
                report(size, side, "precision", "float64", med, best, tc, rel(out, ref))
                del csr64

            # ---------------- Cholesky and solves on the precisions just computed
            P = ref
            Lref, med, best, tc = timeit(kr.cholesky_rows, P)
            report(size, side, "cholesky", "kernels (chosen)", med, best, tc, None)
            out, med, best, tc = timeit(jnp.linalg.cholesky, P)
            report(size, side, "cholesky", "jnp.linalg", med, best, tc, rel(out, Lref))
            if K <= 16:
                out, med, best, tc = timeit(_cholesky_unrolled, P)
                report(size, side, "cholesky", "unrolled", med, best, tc, rel(out, Lref))
            b = rref
            z = jax.random.normal(jax.random.key(2), b.shape, b.dtype)
            xref, med, best, tc = timeit(kr.sample_rows, Lref, b, z)
            report(size, side, "solves", "kernels (chosen)", med, best, tc, None)
            if K <= 16:
                out, med, best, tc = timeit(_sample_unrolled, Lref, b, z)
                report(size, side, "solves", "unrolled", med, best, tc, rel(out, xref))
            del P, Lref, ref, rref

            # ---------------- chains: stacked columns vs vmap (precision + rhs)
            C = args.chains
            FC = jax.random.normal(jax.random.key(3), (C, mo, K), jnp.float32)
            gC = jnp.ones((C, K), jnp.float32)

            def stacked(F, csr):
                return kr.row_precision(csr, kr.outer(F), gC, 1.0), kr.row_rhs(csr, F, 1.0)

            def vmapped(F, csr):
                one = lambda f, gg: (  # noqa: E731
                    kr.row_precision(csr, kr.outer(f[None]), gg[None], 1.0)[0],
                    kr.row_rhs(csr, f[None], 1.0)[0],
                )
                return jax.vmap(one)(F, gC)

            (sP, sr), med, best, tc = timeit(stacked, FC, csr)
            report(size, side, f"C={C} chains", "stacked (chosen)", med, best, tc, None)
            if size != "10m":
                (vP, vr), med, best, tc = timeit(vmapped, FC, csr)
                report(
                    size,
                    side,
                    f"C={C} chains",
                    "jax.vmap",
                    med,
                    best,
                    tc,
                    max(rel(vP, sP), rel(vr, sr)),
                )
            else:
                report(
                    size,
                    side,
                    f"C={C} chains",
                    "jax.vmap",
                    float("nan"),
                    float("nan"),
                    0.0,
                    None,
                    "skipped at 10m",
                )
            del csr, FC

        # ---------------- whole Gibbs step: C stacked chains vs vmap over C single chains
        C = args.chains
        prior = InverseGamma()
        problem = gibbs.build_problem(data, 1.0)
        keys = jax.random.split(jax.random.key(0), C)
        st = gibbs.init(keys, problem, prior, K)
        _, med, best, tc = timeit(lambda s, p: gibbs.step(s, p, prior), st, problem)
        report(size, "both", f"C={C} step", "stacked (chosen)", med, best, tc, None)
        # problem is bound above: pyflakes reads the del at the loop's end (hence the noqa)
        st1 = jax.vmap(lambda k: gibbs.init(k[None], problem, prior, K))(keys)  # noqa: F821
        if size != "10m":
            _, med, best, tc = timeit(
                jax.vmap(lambda s, p: gibbs.step(s, p, prior), in_axes=(0, None)), st1, problem
            )
            report(size, "both", f"C={C} step", "jax.vmap", med, best, tc, None)
        st1 = gibbs.init(keys[:1], problem, prior, K)
        _, med, best, tc = timeit(lambda s, p: gibbs.step(s, p, prior), st1, problem)
        report(size, "both", "C=1 step", "single chain", med, best, tc, None)
        del data, problem

    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


# ------------------------------------------------------------------ rejected variants
def _degree_buckets(indptr: np.ndarray, index: np.ndarray, pad: int):
    """Rows grouped by degree in ``(2^k, 2^(k+1)]`` (every row, empty ones in a bucket of
    width one): per group a (B, D) index of each row's columns, padded with ``pad``, and
    the group's rows."""
    deg = np.diff(indptr)
    groups, lo = [], -1
    for hi in [0] + [2**k for k in range(0, 40)]:
        rows = np.flatnonzero((deg > lo) & (deg <= hi))
        lo = hi
        if rows.size == 0:
            continue
        D = max(int(deg[rows].max()), 1)
        idx = np.full((rows.size, D), pad, np.int32)
        pos = np.arange(D)[None, :]
        take = pos < deg[rows][:, None]
        src = indptr[rows][:, None] + np.minimum(pos, np.maximum(deg[rows][:, None] - 1, 0))
        idx[take] = index[src[take]]
        groups.append((idx, rows))
        if lo >= deg.max():
            break
    return groups


def _cholesky_unrolled(P):
    """Cholesky-Crout unrolled into element-wise ops over the batch (K <= 16)."""
    import jax.numpy as jnp

    K = P.shape[-1]
    L = [[None] * K for _ in range(K)]
    for j in range(K):
        s = P[..., j, j]
        for k in range(j):
            s = s - L[j][k] * L[j][k]
        d = jnp.sqrt(s)
        L[j][j] = d
        for i in range(j + 1, K):
            t = P[..., i, j]
            for k in range(j):
                t = t - L[i][k] * L[j][k]
            L[i][j] = t / d
    zero = jnp.zeros_like(P[..., 0, 0])
    return jnp.stack(
        [jnp.stack([L[i][j] if j <= i else zero for j in range(K)], -1) for i in range(K)], -2
    )


def _sample_unrolled(L, b, z):
    import jax.numpy as jnp

    K = L.shape[-1]
    w = []
    for i in range(K):
        t = b[..., i]
        for k in range(i):
            t = t - L[..., i, k] * w[k]
        w.append(t / L[..., i, i])
    y = [w[i] + z[..., i] for i in range(K)]
    x = [None] * K
    for i in reversed(range(K)):
        t = y[i]
        for k in range(i + 1, K):
            t = t - L[..., k, i] * x[k]
        x[i] = t / L[..., i, i]
    return jnp.stack(x, -1)


if __name__ == "__main__":
    raise SystemExit(main())

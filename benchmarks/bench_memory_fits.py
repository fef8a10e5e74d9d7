"""Memory across consecutive ``bmc.fit`` calls in one process (leak check).

    python benchmarks/bench_memory_fits.py                    # 3M ratings, 5 Gibbs + 5 VB fits
    python benchmarks/bench_memory_fits.py --method gibbs --ratings 300000

Synthetic ratings (``_synthetic.py``: skewed degrees, 1-5 stars) of about ``--ratings``
entries, split 90/10; then ``--fits`` short fits per method (a few Gibbs sweeps through
NumPyro's ``MCMC``, a few VB iterations; ``K=10``, the test set's posterior mean and RMSE
accumulated as in real use).  After each fit the result is deleted and ``gc.collect()``
runs (``jax.clear_caches()`` only with ``--clear-caches``); the script prints the
process's resident memory (``VmRSS`` of ``/proc/self/status``) and the count and bytes of
``jax.live_arrays()``.  ``--trim`` also prints the RSS after glibc's ``malloc_trim(0)``
(freed heap handed back to the OS: memory still referenced, without allocator slack).

A fit that leaks leaves its device arrays alive: the live bytes grow by about the
problem's size per fit and the RSS with them.  The verdict per method: live bytes not
growing after the first fit, and RSS within 5% of its value after fit 2 for fits 2 to the
last (the first fit also pays for one-off compilation and allocator growth).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic import synthetic_ratings  # noqa: E402

RSS_TOLERANCE = 0.05


def rss_mb() -> float:
    """Current resident set size (MiB): VmRSS, else the high-water mark from ``resource``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # peak, not current


def trimmed_rss_mb() -> float | None:
    """RSS after glibc's ``malloc_trim(0)`` (freed heap returned to the OS), or None
    without glibc: separates memory still referenced from allocator slack."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return None
    return rss_mb()


def live_jax() -> tuple[int, int]:
    import jax

    arrays = jax.live_arrays()
    return len(arrays), sum(a.nbytes for a in arrays)


def shape_for(n: int) -> tuple[int, int]:
    """A users x items shape of MovieLens-like aspect (~2.5:1) with ~2% density."""
    cells = n / 0.02
    m2 = max(50, int(round((cells / 2.5) ** 0.5)))
    m1 = max(50, int(round(cells / m2)))
    return m1, m2


def run_fits(
    method: str,
    train,
    test,
    fits: int,
    K: int,
    sweeps: int,
    seed: int,
    clear_caches: bool = False,
    trim: bool = False,
) -> list[tuple[float, int, int]]:
    import jax

    import bmczoo as bmc

    prior = bmc.priors.Discrete()
    out = []
    for i in range(fits):
        t0 = time.perf_counter()
        if method == "gibbs":
            result = bmc.fit(
                train,
                K=K,
                prior=prior,
                method="gibbs",
                num_warmup=sweeps,
                num_samples=sweeps,
                thinning=1,
                num_chains=1,
                seed=seed + i,
                progress_bar=False,
                test=test,
            )
        else:
            result = bmc.fit(
                train,
                K=K,
                prior=prior,
                method="vb",
                max_iter=sweeps,
                seed=seed + i,
                progress_bar=False,
                test=test,
            )
        rmse = result.rmse(test)
        seconds = time.perf_counter() - t0
        del result
        gc.collect()
        if clear_caches:
            jax.clear_caches()
            gc.collect()
        n_live, live_bytes = live_jax()
        rss = rss_mb()
        trimmed = trimmed_rss_mb() if trim else None
        out.append((rss, n_live, live_bytes))
        print(
            f"{method:5s} fit {i + 1}: {seconds:5.1f} s  test rmse {rmse:.4f}  RSS {rss:7.1f} MiB"
            + (f" (after malloc_trim {trimmed:7.1f})" if trimmed is not None else "")
            + f"  live JAX arrays {n_live:4d}  {live_bytes / 2**20:7.1f} MiB",
            flush=True,
        )
    return out


def verdict(method: str, rows: list[tuple[float, int, int]]) -> bool:
    rss = [r[0] for r in rows]
    live = [r[2] for r in rows]
    live_ok = all(b <= live[0] for b in live[1:])
    if len(rss) >= 2:
        ref = rss[1]
        lo, hi = min(rss[1:]) / ref - 1, max(rss[1:]) / ref - 1
        rss_ok = max(-lo, hi) <= RSS_TOLERANCE
        rss_msg = (
            f"RSS fit 2..{len(rss)}: {ref:.1f} -> {rss[-1]:.1f} MiB ({100 * (rss[-1] / ref - 1):+.1f}%; "
            f"range {100 * lo:+.1f}%..{100 * hi:+.1f}% of fit 2) -> "
            f"{'flat' if rss_ok else 'NOT flat'} within {100 * RSS_TOLERANCE:.0f}%"
        )
    else:
        rss_ok, rss_msg = True, "RSS: one fit only"
    print(
        f"{method}: {rss_msg}; live JAX bytes {live[0] / 2**20:.1f} -> {live[-1] / 2**20:.1f} MiB "
        f"({'no growth' if live_ok else 'GROWING'} after fit 1)"
    )
    return rss_ok and live_ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ratings", type=int, default=3_000_000, help="number of synthetic ratings (default 3M)"
    )
    p.add_argument("--fits", type=int, default=5, help="consecutive fits per method (default 5)")
    p.add_argument("--method", choices=("gibbs", "vb", "both"), default="both")
    p.add_argument("--K", type=int, default=10)
    p.add_argument(
        "--sweeps",
        type=int,
        default=3,
        help="Gibbs: warm-up and kept sweeps each; VB: iterations (default 3)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--clear-caches",
        action="store_true",
        help="also call jax.clear_caches() after each fit (for comparison; not needed)",
    )
    p.add_argument(
        "--trim", action="store_true", help="also print the RSS after glibc's malloc_trim(0)"
    )
    a = p.parse_args(argv)
    if a.fits < 1 or a.ratings < 1000 or a.sweeps < 1:
        p.error("--fits and --sweeps must be >= 1, --ratings >= 1000")

    import jax

    import bmczoo as bmc

    m1, m2 = shape_for(a.ratings)
    print(
        f"bmczoo {bmc.__file__}; jax {jax.__version__} on {jax.default_backend()}; pid {os.getpid()}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    t0 = time.perf_counter()
    rows, cols, vals = synthetic_ratings(m1, m2, a.ratings, seed=a.seed)
    data = bmc.RatingData(rows, cols, vals, (m1, m2))
    del rows, cols, vals
    train, test = data.split(0.1, seed=a.seed)
    del data
    gc.collect()
    print(
        f"data: {m1} x {m2}, {train.n + test.n:,} ratings ({train.n:,} train / {test.n:,} test), "
        f"{time.perf_counter() - t0:.1f} s; RSS {rss_mb():.1f} MiB, live JAX arrays {live_jax()[0]}"
    )

    methods = ("gibbs", "vb") if a.method == "both" else (a.method,)
    results = {
        m: run_fits(m, train, test, a.fits, a.K, a.sweeps, a.seed, a.clear_caches, a.trim)
        for m in methods
    }
    ok = [verdict(m, results[m]) for m in methods]
    print("PASS: memory flat across fits" if all(ok) else "FAIL: memory grows across fits")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())

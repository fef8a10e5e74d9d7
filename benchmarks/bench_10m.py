"""End-to-end Gibbs and VB through ``bmc.fit`` on a MovieLens-10M-shaped problem.

    python benchmarks/bench_10m.py                  # both methods, ~5-10 min on 2 cores
    python benchmarks/bench_10m.py --methods vb --size 1m

Synthetic ratings of the 10M shape (69,878 x 10,677, 10,000,054 ratings, skewed degrees;
``_synthetic.py``), split 80/20, ``bmc.fit(train, K=10, test=test)`` in float32 with the
test entries' posterior mean accumulated during the run, then ``fit.rmse(test)``
(predictions computed in blocks).  Peak memory is the resident-set high-water mark of
the fresh subprocess that runs each method, data generation included.

Seconds per iteration: for Gibbs, ``gibbs.step`` alone in a compiled loop on the same
data (``bench_gibbs.py``'s worker, best of 3 repeats: the fit's own wall time includes
compilation); for VB, the median wall time of the fit's iterations after the first
(``fit.meta["iteration_seconds"]``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic import SIZES, synthetic_ratings  # noqa: E402

TARGET_S = {"gibbs": 0.6, "vb": 0.6}
TARGET_MB = 2048


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(method: str, size: str, K: int, iters: int, seed: int) -> dict:
    import numpy as np

    import bmczoo as bmc

    if method == "gibbs-sweep":  # the sweep alone, compilation excluded (bench_gibbs.py)
        from bench_gibbs import worker_bmczoo

        r = worker_bmczoo(size, K, 1, 3, 5, seed)
        return {
            "method": method,
            "size": size,
            "K": K,
            "s_per_iter": min(r["per_sweep"]),
            "s_per_iter_median": float(np.median(r["per_sweep"])),
            "peak_mb": _rss_mb(),
        }
    m1, m2, n = SIZES[size]
    t0 = time.perf_counter()
    rows, cols, vals = synthetic_ratings(m1, m2, n, seed=seed)
    data = bmc.RatingData(rows, cols, vals, (m1, m2))
    del rows, cols, vals
    train, test = data.split(0.2, seed=seed)
    del data
    t_data = time.perf_counter() - t0
    prior = (
        bmc.priors.InverseGamma(a=1.0, b=0.1)
        if method == "vb"
        else bmc.priors.Discrete(1.0, 0.05, 0.05)
    )
    t = time.perf_counter()
    if method == "gibbs":
        f = bmc.fit(
            train,
            K=K,
            prior=prior,
            method="gibbs",
            num_warmup=0,
            num_samples=iters,
            thinning=1,
            num_chains=1,
            test=test,
            progress_bar=False,
            store_factors=False,
            track=8,
            seed=seed,
        )
    else:
        f = bmc.fit(
            train,
            K=K,
            prior=prior,
            method="vb",
            max_iter=iters,
            tol=0.0,
            test=test,
            progress_bar=False,
            seed=seed,
        )
    t_fit = time.perf_counter() - t
    t = time.perf_counter()
    rmse = f.rmse(test)
    t_pred = time.perf_counter() - t
    out = {
        "method": method,
        "size": size,
        "K": K,
        "n_train": train.n,
        "n_test": test.n,
        "iterations": iters,
        "t_fit": t_fit,
        "t_data": t_data,
        "t_predict": t_pred,
        "test_rmse": rmse,
        "peak_mb": _rss_mb(),
        "load": os.getloadavg()[0],
    }
    if method == "vb":  # per-iteration wall time after the first (compiling) iteration
        out["s_per_iter"] = float(np.median(f.meta["iteration_seconds"][1:]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--methods", default="gibbs,vb")
    ap.add_argument("--size", default="10m", choices=sorted(SIZES))
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20, help="sweeps / VB iterations of the full fits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.size, a.K, a.iters, a.seed)))
        return
    results = []
    methods = a.methods.split(",")
    if "gibbs" in methods:
        methods.insert(methods.index("gibbs"), "gibbs-sweep")
    for method in methods:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            method,
            "--size",
            a.size,
            "--K",
            str(a.K),
            "--iters",
            str(a.iters),
            "--seed",
            str(a.seed),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{method}: failed\n{out.stderr[-2000:]}")
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{a.size} ratings, K={a.K}, float32, one chain; load average {os.getloadavg()[0]:.1f}")
    print(
        f"{'run':12s} {'s/iter':>7s} {'target':>6s} {'peak MB':>8s} {'target':>6s} {'fit s':>7s} {'predict s':>9s} "
        f"{'test RMSE':>9s}"
    )
    for r in results:
        target = TARGET_S["gibbs" if r["method"].startswith("gibbs") else "vb"]
        s_it = f"{r['s_per_iter']:7.3f}" if "s_per_iter" in r else f"{'-':>7s}"
        fit_s = f"{r['t_fit']:7.1f}" if "t_fit" in r else f"{'-':>7s}"
        pred = f"{r['t_predict']:9.2f}" if "t_predict" in r else f"{'-':>9s}"
        rmse = f"{r['test_rmse']:9.4f}" if "test_rmse" in r else f"{'-':>9s}"
        print(
            f"{r['method']:12s} {s_it} {target:6.1f} {r['peak_mb']:8.0f} {TARGET_MB:6d} {fit_s} {pred} {rmse}"
        )
    print(
        "gibbs-sweep: gibbs.step alone in a compiled loop (benchmarks/bench_gibbs.py), best of 3 repeats; "
        "gibbs / vb: a whole bmc.fit (data, split, fit, predictions) in a fresh process, peak = its resident-set "
        "high-water mark"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

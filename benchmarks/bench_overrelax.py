"""Plain vs over-relaxed Gibbs row updates on the paper's Fig. 2 problem.

    python benchmarks/bench_overrelax.py [--rho -0.7] [--seeds 0,1] [--track 16]

m = 200, K = 5, discrete prior (1, 0.05, 0.05), 100 warm-up + 1000 kept sweeps, thinning
1, 2 chains, the same seed for both samplers.  For the tracked theta entries: the first
lag at which |ACF| < 0.1 (largest over entries), the largest |ACF| at lags 5..10, and the
bulk ESS (ArviZ; min and median over entries), plus wall seconds per sweep (the whole
fit, compilation included, divided by the sweeps; both samplers pay the same overheads).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def run(seed: int, rho: float, track: int):
    import bmczoo as bmc
    from bmczoo import diagnostics as dg

    sim = bmc.datasets.simulate_paper(200, seed=seed)
    t = time.perf_counter()
    fit = bmc.fit(
        sim.train,
        K=5,
        prior=bmc.priors.Discrete(1.0, 0.05, 0.05),
        num_warmup=100,
        num_samples=1000,
        thinning=1,
        num_chains=2,
        track=track,
        clip=False,
        progress_bar=False,
        seed=seed,
        overrelax=rho,
    )
    secs = (time.perf_counter() - t) / 1100
    acf = dg.autocorrelation(fit, max_lag=10)
    first = [next((k for k in range(1, 11) if abs(r[k]) < 0.1), 99) for r in acf]
    summ = dg.summary(fit)
    ess = summ.loc[[i for i in summ.index if i.startswith("theta[")], "ess_bulk"].to_numpy()
    return (
        max(first),
        float(np.abs(acf[:, 5:11]).max()),
        float(ess.min()),
        float(np.median(ess)),
        secs,
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rho", type=float, default=-0.7)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--track", type=int, default=16)
    a = ap.parse_args()
    print(
        f"{'seed':>4s} {'rho':>5s} {'worst first lag |ACF|<0.1':>26s} {'max |ACF| lags 5-10':>20s} "
        f"{'ESS min':>8s} {'ESS median':>10s} {'s/sweep':>8s}"
    )
    for seed in (int(s) for s in a.seeds.split(",")):
        for rho in (0.0, a.rho):
            first, tail, emin, emed, secs = run(seed, rho, a.track)
            print(
                f"{seed:4d} {rho:5.2f} {first:26d} {tail:20.3f} {emin:8.0f} {emed:10.0f} {secs:8.4f}"
            )
    print("(2 chains x 1000 draws: ESS out of 2000)")


if __name__ == "__main__":
    main()

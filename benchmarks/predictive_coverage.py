"""Coverage of the posterior predictive intervals on held-out MovieLens ratings, per member.

    python benchmarks/predictive_coverage.py                  # ML-100K from ../shared
    python benchmarks/predictive_coverage.py --data path/to/u.data --sweeps 300

The split is the README's (``numpy.random.default_rng(seed)`` permutation, first 80%
train).  For each member the fit's ``predictive_interval(prob=p)`` at the test entries is
compared with the held-out ratings: the fraction inside, for p = 0.5, 0.8, 0.9, 0.95, and
the mean log predictive density (``fit.log_predictive_density``).  Ratings are integers
1-5 and the intervals are Gaussian (clipped to [1, 5]), so coverage is of a discrete
variable by a continuous interval; nominal is only the reference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from compare_peers import REAL_100K, load_split  # noqa: E402

PROBS = (0.5, 0.8, 0.9, 0.95)


def members():
    import bmczoo as bmc

    nw_full = dict(
        prior=bmc.priors.NormalWishart(), likelihood=bmc.likelihoods.LearnedNoise(), biases=True
    )
    return {
        "gibbs paper discrete": dict(prior=bmc.priors.Discrete(1.0, 0.05, 0.07), method="gibbs"),
        "gibbs inverse-gamma": dict(prior=bmc.priors.InverseGamma(1.0, 0.1), method="gibbs"),
        "gibbs recommended": dict(**nw_full, method="gibbs"),
        "vb inverse-gamma": dict(prior=bmc.priors.InverseGamma(1.0, 0.1), method="vb"),
        "vb recommended": dict(**nw_full, method="vb"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(REAL_100K))
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument(
        "--sweeps", type=int, default=500, help="Gibbs: warm-up 100 + the rest kept (default 500)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chains", type=int, default=1, help="Gibbs chains (default 1)")
    ap.add_argument(
        "--no-column-moves",
        action="store_true",
        help="Gibbs: the paper's plain sweep (default: bmc.fit's, the column moves where the prior has one)",
    )
    a = ap.parse_args(argv)
    import bmczoo as bmc

    tr, te, rows, cols, vals, shape = load_split(Path(a.data), a.seed)
    train = bmc.RatingData(rows[tr], cols[tr], vals[tr], shape)
    test = bmc.RatingData(rows[te], cols[te], vals[te], shape)
    print(
        f"{a.data}: {train.n} train / {test.n} test ratings, K={a.K}, Gibbs {a.chains} chain(s) "
        f"x {a.sweeps} sweeps (100 warm-up)"
    )
    print(
        f"\n| member | {' | '.join(f'{int(p * 100)}%' for p in PROBS)} | log pred. density | test RMSE |"
    )
    print("|---|" + "---|" * (len(PROBS) + 2))
    for name, kw in members().items():
        t0 = time.perf_counter()
        extra = (
            dict(
                num_warmup=100,
                num_samples=a.sweeps - 100,
                thinning=1,
                num_chains=a.chains,
                column_moves=False if a.no_column_moves else None,
            )
            if kw["method"] == "gibbs"
            else {}
        )
        fit = bmc.fit(train, K=a.K, test=test, seed=a.seed, progress_bar=False, **kw, **extra)
        cover = []
        for p in PROBS:
            lo, hi = fit.predictive_interval(test.rows, test.cols, prob=p)
            cover.append(float(np.mean((lo <= test.values) & (test.values <= hi))))
        lpd = fit.log_predictive_density(test)
        print(
            f"| {name} | {' | '.join(f'{c:.3f}' for c in cover)} | {lpd:.4f} | {fit.rmse(test):.4f} |"
            f"  ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

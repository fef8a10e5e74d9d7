"""Student-t noise against Gaussian noise on MovieLens 100K with planted outlying ratings.

    python benchmarks/robust_noise.py                      # 2% outliers, K = 10, 4 chains
    python benchmarks/robust_noise.py --fraction 0 0.02 0.05 --kind flip far --json out.json

The README's split (``data.split(test_fraction=0.2, seed=0)``).  A fraction of the
*training* ratings (``--fraction``, chosen with ``default_rng(--seed)``) is replaced by
extreme values; the test ratings stay clean, and every member is scored by its test RMSE
(and mean log predictive density) on them:

* ``flip``: the rating moved to the opposite end of the scale (1 for a rating of 3 or
  more, else 5): plausible-looking but wrong ratings;
* ``far``: the rating moved 10 stars away from the scale (``-9`` or ``15``, the side away
  from the rating): a data-entry error.

Members (the same rows, biases, rank, sweeps and seed; only the noise differs): the
README's recommended member (``NormalWishart()`` rows, ``LearnedNoise()``, biases) and the
same with ``StudentT(nu)`` for each ``--nu``.  Gibbs, ``--warmup`` + ``--samples`` sweeps,
``--chains`` chains; seconds per sweep as the fit measured them (``fit.timings``).  The CPU
model is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _peers import cpu_model  # noqa: E402

REAL_100K = HERE.parent.parent / "shared" / "data" / "ml-100k"


def plant_outliers(train, fraction: float, kind: str, seed: int):
    """``train`` with ``round(fraction n)`` ratings (uniform without replacement) replaced
    by extreme values (``kind``: ``flip`` or ``far``); also their positions."""
    import bmczoo as bmc

    rng = np.random.default_rng(seed)
    y = np.asarray(train.values, np.float64).copy()
    pos = rng.choice(y.size, size=int(round(fraction * y.size)), replace=False)
    high = y[pos] >= 3.0
    if kind == "flip":
        y[pos] = np.where(high, 1.0, 5.0)
    elif kind == "far":
        y[pos] = np.where(high, -9.0, 15.0)
    else:
        raise ValueError(f"unknown outlier kind {kind!r}; known: flip, far")
    return bmc.RatingData(train.rows, train.cols, y, train.shape), pos


def run(train, test, likelihood, args) -> dict:
    import bmczoo as bmc

    fit = bmc.fit(
        train,
        K=args.K,
        prior=bmc.priors.NormalWishart(),
        likelihood=likelihood,
        biases=True,
        num_warmup=args.warmup,
        num_samples=args.samples,
        thinning=1,
        num_chains=args.chains,
        seed=args.seed,
        progress_bar=False,
    )
    return {
        "rmse": float(fit.rmse(test)),
        "lpd": float(fit.log_predictive_density(test)),
        "noise_sd": float(np.sqrt(fit.noise_var())),
        "s_per_sweep": float((fit.timings or {}).get("sweep_seconds", float("nan"))),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(REAL_100K), help="ML-100K folder (u.data)")
    ap.add_argument("--fraction", type=float, nargs="+", default=[0.02])
    ap.add_argument("--kind", nargs="+", default=["flip"], choices=["flip", "far"])
    ap.add_argument("--nu", type=float, nargs="+", default=[4.0])
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)

    import bmczoo as bmc

    data = bmc.datasets.load_movielens("100k", path=args.data)
    train, test = data.split(test_fraction=0.2, seed=0)
    members = {"gaussian (learned)": bmc.likelihoods.LearnedNoise()}
    members.update({f"student-t nu={nu:g}": bmc.likelihoods.StudentT(nu=nu) for nu in args.nu})
    print(f"{cpu_model()}; K={args.K}, {args.chains} chains, {args.warmup}+{args.samples} sweeps")
    print(
        f"{'outliers':>16s} {'member':>22s} {'RMSE':>8s} {'lpd':>8s} {'noise':>7s} {'s/sweep':>8s}"
    )
    rows = []
    cases = [(k, f) for k in args.kind for f in args.fraction]
    if 0.0 in args.fraction:  # clean data: one row whatever the kind
        cases = [("none", 0.0)] + [(k, f) for k, f in cases if f != 0.0]
    for kind, fraction in cases:
        noisy = train if fraction == 0 else plant_outliers(train, fraction, kind, args.seed)[0]
        for name, lik in members.items():
            r = {
                "kind": kind,
                "fraction": fraction,
                "member": name,
                **run(noisy, test, lik, args),
            }
            rows.append(r)
            label = f"{kind} {fraction:.0%}"
            print(
                f"{label:>16s} {name:>22s} {r['rmse']:8.4f} {r['lpd']:8.4f} "
                f"{r['noise_sd']:7.3f} {r['s_per_sweep']:8.4f}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Test RMSE and seconds per iteration of zoo members against SMURFF and myFM, one run.

    python benchmarks/compare_peers.py                       # ML-100K, K = 10 and 32
    python benchmarks/compare_peers.py --K 10 --chains 4 --members recommended,paper
    python benchmarks/compare_peers.py --data path/to/u.data --no-peers

The split is the one the README's tables use: ``numpy.random.default_rng(seed)``
permutation of the ratings, the first 80% train, the rest test.  Every member and peer
gets the same split, the same rank ``K`` and the same number of iterations
(``--warmup`` burn-in + ``--samples`` kept; every draw after burn-in is averaged), with
no hyper-parameter chosen on the test data.

Members (``--members``):

* ``paper``: the paper's best MovieLens prior, ``Discrete(1, .05, .07)``, tempered
  likelihood with unit noise, no biases;
* ``normal-wishart``: the BPMF row prior alone (fixed unit noise, no biases);
* ``recommended``: ``NormalWishart()`` rows, ``LearnedNoise()`` and ``biases=True``
  (the README's recommended configuration);
* ``inverse-gamma-full``: the paper's inverse-gamma prior with learned noise and biases.

Peers, each only when importable (they are never dependencies of bmczoo;
``pip install smurff myfm``): SMURFF's BPMF (its ``TrainSession`` with Normal-Wishart
priors on both factors and its ``AdaptiveNoise``: ``BPMFSession``'s fixed noise
precision 5 overfits ML-100K; the ratings centred by their training mean, which is
added back) and myFM's ``MyFMRegressor`` (Bayesian
factorization machine on one-hot user and item features: biases, learned noise,
normal-gamma hyper-priors).  Seconds per iteration are wall-clock time of the whole
fit divided by its iterations (compilation included for bmczoo, so short runs
understate its speed; ``--chains`` chains run side by side and count as one iteration).
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

from _peers import importable  # noqa: E402

REAL_100K = HERE.parent.parent / "shared" / "data" / "ml-100k" / "u.data"
MEMBERS = ("paper", "normal-wishart", "recommended", "inverse-gamma-full")


def load_split(path: Path, seed: int):
    """``(train, test)`` index arrays of a ``user item rating [timestamp]`` table, and the data."""
    raw = np.loadtxt(path, dtype=np.float64, usecols=(0, 1, 2))
    users, rows = np.unique(raw[:, 0].astype(np.int64), return_inverse=True)
    items, cols = np.unique(raw[:, 1].astype(np.int64), return_inverse=True)
    vals = raw[:, 2]
    perm = np.random.default_rng(seed).permutation(vals.size)
    ntr = int(0.8 * vals.size)
    return perm[:ntr], perm[ntr:], rows, cols, vals, (users.size, items.size)


def member(name: str):
    import bmczoo as bmc

    return {
        "paper": (bmc.priors.Discrete(1.0, 0.05, 0.07), None, False),
        "normal-wishart": (bmc.priors.NormalWishart(), None, False),
        "recommended": (bmc.priors.NormalWishart(), bmc.likelihoods.LearnedNoise(), True),
        "inverse-gamma-full": (bmc.priors.InverseGamma(), bmc.likelihoods.LearnedNoise(), True),
    }[name]


def run_member(name, split, K, warmup, samples, chains, seed, column_moves=None):
    import bmczoo as bmc

    tr, te, rows, cols, vals, shape = split
    train = bmc.RatingData(rows[tr], cols[tr], vals[tr], shape)
    test = bmc.RatingData(rows[te], cols[te], vals[te], shape)
    prior, likelihood, biases = member(name)
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=K,
        prior=prior,
        likelihood=likelihood,
        biases=biases,
        num_warmup=warmup,
        num_samples=samples,
        thinning=1,
        num_chains=chains,
        test=test,
        seed=seed,
        progress_bar=False,
        column_moves=column_moves,
    )
    seconds = time.perf_counter() - t0
    return fit.rmse(test), seconds / (warmup + samples)


def run_myfm(split, K, warmup, samples, seed):
    import myfm
    import scipy.sparse as sps

    tr, te, rows, cols, vals, (m1, m2) = split

    def onehot(idx):
        n = idx.size
        data = np.ones(2 * n)
        ind = np.stack([rows[idx], m1 + cols[idx]], axis=1).ravel()
        return sps.csr_matrix((data, ind, np.arange(0, 2 * n + 1, 2)), shape=(n, m1 + m2))

    t0 = time.perf_counter()
    fm = myfm.MyFMRegressor(rank=K, random_seed=seed)
    fm.fit(onehot(tr), vals[tr], n_iter=warmup + samples, n_kept_samples=samples)
    seconds = time.perf_counter() - t0
    lo, hi = vals.min(), vals.max()
    pred = np.clip(fm.predict(onehot(te)), lo, hi)
    return float(np.sqrt(np.mean((pred - vals[te]) ** 2))), seconds / (warmup + samples)


def run_smurff(split, K, warmup, samples, seed):
    import scipy.sparse as sps
    import smurff

    tr, te, rows, cols, vals, shape = split
    # SMURFF models the ratings as given (no global offset): centre them as bmczoo does
    mean = float(vals[tr].mean())
    ytr = sps.coo_matrix((vals[tr] - mean, (rows[tr], cols[tr])), shape=shape)
    yte = sps.coo_matrix((vals[te] - mean, (rows[te], cols[te])), shape=shape)
    t0 = time.perf_counter()
    # BPMF (Normal-Wishart rows for both factors) with SMURFF's adaptive noise precision:
    # BPMFSession fixes the precision at 5 (noise sd 0.45), which overfits ML-100K (0.976)
    session = smurff.TrainSession(
        priors=["normal", "normal"],
        num_latent=K,
        burnin=warmup,
        nsamples=samples,
        seed=seed,
        verbose=0,
    )
    session.addTrainAndTest(ytr, yte, smurff.AdaptiveNoise(1.0, 10.0))
    predictions = session.run()
    seconds = time.perf_counter() - t0
    lo, hi = vals.min(), vals.max()
    pred = np.clip(np.array([p.pred_avg for p in predictions]) + mean, lo, hi)
    y = np.array([p.val for p in predictions]) + mean
    return float(np.sqrt(np.mean((pred - y) ** 2))), seconds / (warmup + samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data", default=str(REAL_100K), help="ratings table (default: ../shared ML-100K u.data)"
    )
    ap.add_argument("--K", default="10,32", help="comma-separated ranks (default 10,32)")
    ap.add_argument("--warmup", type=int, default=100, help="burn-in iterations (default 100)")
    ap.add_argument(
        "--samples", type=int, default=400, help="kept iterations after burn-in (default 400)"
    )
    ap.add_argument(
        "--chains", type=int, default=4, help="bmczoo chains run side by side (default 4)"
    )
    ap.add_argument("--members", default=",".join(MEMBERS), help=f"subset of {','.join(MEMBERS)}")
    ap.add_argument("--no-peers", action="store_true", help="skip SMURFF and myFM")
    ap.add_argument("--seed", type=int, default=0, help="split and sampler seed (default 0)")
    ap.add_argument(
        "--no-column-moves",
        action="store_true",
        help="the paper's plain Gibbs sweep (default: bmc.fit's, the column moves where the prior has one)",
    )
    a = ap.parse_args(argv)
    path = Path(a.data)
    if not path.exists():
        print(f"compare_peers: {path} not found", file=sys.stderr)
        return 2
    members = [m.strip() for m in a.members.split(",") if m.strip()]  # "" runs the peers only
    if any(m not in MEMBERS for m in members):
        ap.error(f"--members must be a subset of {','.join(MEMBERS)}")
    split = load_split(path, a.seed)
    ranks = [int(k) for k in a.K.split(",")]
    print(
        f"data {path} ({split[5][0]} x {split[5][1]}, {split[4].size} ratings, 80/20 split seed {a.seed}); "
        f"{a.warmup} burn-in + {a.samples} kept iterations; bmczoo chains {a.chains}; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    jobs = [
        (
            f"bmczoo {m}",
            lambda K, m=m: run_member(
                m,
                split,
                K,
                a.warmup,
                a.samples,
                a.chains,
                a.seed,
                False if a.no_column_moves else None,
            ),
        )
        for m in members
    ]
    if not a.no_peers:
        for mod, label, fn in (("smurff", "SMURFF BPMF", run_smurff), ("myfm", "myFM", run_myfm)):
            if importable(mod):
                jobs.append((label, lambda K, fn=fn: fn(split, K, a.warmup, a.samples, a.seed)))
            else:
                print(f"{label}: skipped ({mod} not importable)")
    print(f"\n| {'model':28s} | {'K':>3s} | {'test RMSE':>9s} | {'s / iteration':>13s} |")
    print(f"|{'-' * 30}|{'-' * 5}|{'-' * 11}|{'-' * 15}|")
    for K in ranks:
        for label, job in jobs:
            rmse, per_it = job(K)
            print(f"| {label:28s} | {K:3d} | {rmse:9.4f} | {per_it:13.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

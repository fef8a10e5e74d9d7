"""Test RMSE and seconds per sweep of the Normal-Wishart feature link (Macau) on ML-100K's
official fold u3, with and without side information and implicit feedback.

    python benchmarks/side_information_probe.py --data ../shared/data/ml-100k
    python benchmarks/side_information_probe.py --data ../shared/data/ml-100k --configs ids,side --out probe.json

Every configuration is ``NormalWishart(...)`` rows + ``LearnedNoise()`` + ``biases=True``,
K = 10, four chains, 100 burn-in + 400 kept sweeps, seed 0, fitted to ``u3.base`` and
scored on ``u3.test`` (nothing chosen on the test data):

* ``ids``: no features (the recommended member);
* ``side``: ``row_features=True, col_features=True``, the side tables the MovieLens
  loader attaches (age bucket, gender, occupation, zip prefix; release year, genres);
* ``implicit``: ``implicit=True``, the SVD++-style implicit feedback of the training pairs
  on both sides (the movies each user rated, the users who rated each movie, scaled by
  ``|R(i)|^-1/2``);
* ``side+implicit``: both.

``--likelihood ordered`` replaces ``LearnedNoise()`` by ``OrderedProbit()`` (the RMSE of
its predictive mean of the stars); ``--fold split`` uses the README's 80/20 split.

Seconds per sweep are the wall-clock time of the whole fit divided by its sweeps
(compilation and the eigendecompositions of ``X^T X`` included; the four chains run side
by side and count as one sweep).
"""

from __future__ import annotations

import argparse
import json
import time

CONFIGS = {
    "ids": {},
    "side": {"row_features": True, "col_features": True},
    "implicit": {"implicit": True},
    "side+implicit": {"row_features": True, "col_features": True, "implicit": True},
}
LIKELIHOODS = ("learned", "ordered")


def run(
    config: str,
    train,
    test,
    *,
    K: int,
    warmup: int,
    samples: int,
    chains: int,
    seed: int,
    likelihood: str = "learned",
) -> dict:
    import bmczoo as bmc

    prior = bmc.priors.NormalWishart(**CONFIGS[config])
    lik = (
        bmc.likelihoods.LearnedNoise()
        if likelihood == "learned"
        else bmc.likelihoods.OrderedProbit()
    )
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=K,
        prior=prior,
        likelihood=lik,
        biases=True,
        num_warmup=warmup,
        num_samples=samples,
        thinning=1,
        num_chains=chains,
        test=test,
        seed=seed,
        progress_bar=False,
    )
    seconds = time.perf_counter() - t0
    return {
        "config": config,
        "likelihood": likelihood,
        "rmse": float(fit.rmse(test)),
        "seconds": seconds,
        "seconds_per_sweep": seconds / (warmup + samples),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the ML-100K folder (u.data, u.user, u.item)")
    p.add_argument(
        "--fold",
        default="u3",
        help="an official fold (u1..u5, ua, ub) or 'split': the README's "
        "80/20 split, data.split(test_fraction=0.2, seed=0)",
    )
    p.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}"
    )
    p.add_argument("--K", type=int, default=10)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--likelihood",
        choices=LIKELIHOODS,
        default="learned",
        help="LearnedNoise (default) or OrderedProbit (RMSE of the predictive mean of the stars)",
    )
    p.add_argument("--out", help="write the results as JSON here")
    a = p.parse_args(argv)
    configs = a.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")

    import bmczoo as bmc

    bmc.enable_compilation_cache()
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    train, test = (
        data.split(test_fraction=0.2, seed=0) if a.fold == "split" else data.official_split(a.fold)
    )
    for side, f in (("rows", train.row_features), ("cols", train.col_features)):
        print(f"{side} features: {None if f is None else f.shape}")
    results = []
    for c in configs:
        r = run(
            c,
            train,
            test,
            K=a.K,
            warmup=a.warmup,
            samples=a.samples,
            chains=a.chains,
            seed=a.seed,
            likelihood=a.likelihood,
        )
        results.append(r)
        print(
            f"{c:>14}  RMSE {r['rmse']:.4f}  {r['seconds_per_sweep'] * 1e3:.1f} ms/sweep  ({r['seconds']:.0f} s)",
            flush=True,
        )
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(
                    {
                        "fold": a.fold,
                        "K": a.K,
                        "warmup": a.warmup,
                        "samples": a.samples,
                        "chains": a.chains,
                        "seed": a.seed,
                        "results": results,
                    },
                    fh,
                    indent=1,
                )


if __name__ == "__main__":
    main()

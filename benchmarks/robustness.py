"""Robustness matrix: every prior x likelihood x biases on/off, float32, several seeds.

    python benchmarks/robustness.py                          # the full matrix (hours)
    python benchmarks/robustness.py --quick                  # simulation, seed 0, 100 sweeps
    python benchmarks/robustness.py --data sim --seeds 0 1 --sweeps 1000
    python benchmarks/robustness.py --data ml100k --likelihoods probit ordered --biases on

Cells: priors ``Fixed``, ``InverseGamma``, ``Gamma``, ``Discrete``, ``NormalWishart`` (their
defaults) x likelihoods ``Tempered()``, ``LearnedNoise()``, ``Probit()``,
``OrderedProbit()`` x biases off/on, on two data sets split 80/20 by ``data.split(0.2,
seed=0)``:

* ``ml100k``: MovieLens 100K (``--ml-path``); the probit sees ``liked = rating >= 4``, the
  ordered probit the stars;
* ``sim``: the paper's simulation ``bmc.datasets.simulate_paper(--sim-m, rank=2, seed=0)``;
  the probit sees the sign of the entries, the ordered probit five levels cut at the
  quintiles of all entries.

Each cell is fitted by Gibbs in float32 with ``--sweeps`` sweeps (a fifth burn-in), one
chain, for every seed of ``--seeds``.  A failure is any exception (a non-finite draw, ...)
or a non-finite prediction.  The table gives, per cell, the failures and the mean (sd over
seeds) of the test metric: RMSE for the Gaussian likelihoods and the ordered probit (of the
expected level), AUC for the probit.  Exit status 1 when any cell failed.

Seeds reuse compiled programs through JAX's persistent compilation cache (``--cache``;
programs that differ only in the seed hit it).  ``--fast-compile`` (implied by ``--quick``)
compiles with the test suite's flags (XLA optimisation off): quicker to compile, slower to
run, the better trade for fits of a hundred sweeps but not for 1,000 sweeps on ML-100K.  The script lowers its own CPU priority
(``nice``, ``--nice``): it is meant to run beside other work.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REAL_100K = REPO.parent / "shared" / "data" / "ml-100k"
PRIORS = ("fixed", "inverse-gamma", "gamma", "discrete", "normal-wishart")
LIKELIHOODS = ("tempered", "learned", "probit", "ordered")
DATA = ("sim", "ml100k")
FAST_COMPILE = [
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_parallel_codegen_split_count=1",
    "--xla_cpu_use_fusion_emitters=false",
]


def make_prior(name):
    import bmczoo as bmc

    return {
        "fixed": bmc.priors.Fixed,
        "inverse-gamma": bmc.priors.InverseGamma,
        "gamma": bmc.priors.Gamma,
        "discrete": bmc.priors.Discrete,
        "normal-wishart": bmc.priors.NormalWishart,
    }[name]()


def make_likelihood(name):
    import bmczoo as bmc

    return {
        "tempered": bmc.likelihoods.Tempered,
        "learned": bmc.likelihoods.LearnedNoise,
        "probit": bmc.likelihoods.Probit,
        "ordered": bmc.likelihoods.OrderedProbit,
    }[name]()


def load_data(name, a):
    """``(train, test)`` per likelihood family: ``{"gauss": ..., "probit": ..., "ordered": ...}``."""
    import bmczoo as bmc

    if name == "ml100k":
        data = bmc.datasets.load_movielens("100k", a.ml_path, download=False)
        v = np.asarray(data.values, np.float64)
        variants = {
            "gauss": data,
            "probit": data.with_values((v >= 4).astype(np.float64)),
            "ordered": data,
        }
    else:
        data = bmc.datasets.simulate_paper(a.sim_m, rank=2, seed=0).train
        v = np.asarray(data.values, np.float64)
        cuts = np.quantile(v, [0.2, 0.4, 0.6, 0.8])
        variants = {
            "gauss": data,
            "probit": data.with_values((v > 0).astype(np.float64)),
            "ordered": data.with_values(1.0 + np.searchsorted(cuts, v).astype(np.float64)),
        }
    return {k: d.split(0.2, seed=0) for k, d in variants.items()}


def family(likelihood):
    return {"probit": "probit", "ordered": "ordered"}.get(likelihood, "gauss")


def run_cell(splits, prior, likelihood, biases, seed, a):
    """``(metric, error, seconds)`` of one fit."""
    import bmczoo as bmc
    from bmczoo.evaluation import auc

    train, test = splits[family(likelihood)]
    warmup = a.sweeps // 5
    t0 = time.perf_counter()
    try:
        fit = bmc.fit(
            train,
            K=a.K,
            prior=make_prior(prior),
            likelihood=make_likelihood(likelihood),
            biases=biases,
            method="gibbs",
            num_warmup=warmup,
            num_samples=a.sweeps - warmup,
            num_chains=1,
            seed=seed,
            dtype="float32",
            progress_bar=False,
        )
        if likelihood == "probit":
            p = fit.predict_proba(test.rows, test.cols)
            metric = auc(test.values, p) if np.all(np.isfinite(p)) else math.nan
        else:
            metric = fit.rmse(test)
        err = None if math.isfinite(metric) else "non-finite prediction"
    except Exception as exc:  # a failure of the cell is the result being measured
        metric, err = math.nan, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        if a.verbose:
            traceback.print_exc()
    return metric, err, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--priors", nargs="+", choices=PRIORS, default=list(PRIORS))
    ap.add_argument("--likelihoods", nargs="+", choices=LIKELIHOODS, default=list(LIKELIHOODS))
    ap.add_argument("--data", nargs="+", choices=DATA, default=list(DATA))
    ap.add_argument("--biases", choices=("off", "on", "both"), default="both")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--sweeps",
        type=int,
        default=1000,
        help="sweeps per fit, a fifth of them burn-in (default 1000)",
    )
    ap.add_argument("--K", type=int, default=10, help="rank (default 10)")
    ap.add_argument(
        "--sim-m", type=int, default=100, help="rows = columns of the simulation (default 100)"
    )
    ap.add_argument(
        "--ml-path", default=str(REAL_100K), help="ML-100K folder or u.data (default ../shared)"
    )
    ap.add_argument("--quick", action="store_true", help="simulation only, seed 0, 100 sweeps")
    ap.add_argument(
        "--cache", default=str(REPO / ".jax_cache"), help="persistent compilation cache folder"
    )
    ap.add_argument(
        "--nice", type=int, default=10, help="CPU priority increment (default 10; 0: none)"
    )
    ap.add_argument(
        "--fast-compile",
        action="store_true",
        help="compile with XLA optimisation off (for short fits; implied by --quick)",
    )
    ap.add_argument("--out", help="results JSON")
    ap.add_argument("--verbose", action="store_true", help="print the traceback of every failure")
    a = ap.parse_args(argv)
    if a.quick:
        a.data, a.seeds, a.sweeps, a.fast_compile = ["sim"], [0], 100, True
    if a.nice:
        os.nice(a.nice)
    if a.fast_compile and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
        # compiling dominates these short fits: the test suite's flags (tests/conftest.py),
        # which change how the code is generated, not what is computed
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *FAST_COMPILE]).strip()

    import jax

    jax.config.update("jax_compilation_cache_dir", a.cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

    biases = {"off": [False], "on": [True], "both": [False, True]}[a.biases]
    print(
        f"robustness: data {a.data}, priors {a.priors}, likelihoods {a.likelihoods}, biases {a.biases}, "
        f"seeds {a.seeds}, {a.sweeps} sweeps, K={a.K}, float32, 1 chain; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = []
    for data in a.data:
        splits = load_data(data, a)
        for prior, lik, b in itertools.product(a.priors, a.likelihoods, biases):
            cell = {"data": data, "prior": prior, "likelihood": lik, "biases": b, "seeds": {}}
            for seed in a.seeds:
                metric, err, sec = run_cell(splits, prior, lik, b, seed, a)
                cell["seeds"][seed] = {"metric": metric, "error": err, "seconds": sec}
                print(
                    f"  {data} {prior} {lik} biases={'on' if b else 'off'} seed {seed}: "
                    f"{err or f'{metric:.4f}'} ({sec:.0f} s)",
                    flush=True,
                )
            rows.append(cell)
            if a.out:  # after every cell, so that an interrupted run keeps what it measured
                Path(a.out).write_text(
                    json.dumps({"settings": vars(a), "cells": rows}, indent=1, default=str)
                )

    print()
    print("| data | prior | likelihood | biases | failures | metric | mean (sd) | seconds/fit |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    for c in rows:
        res = list(c["seeds"].values())
        fails = sum(r["error"] is not None for r in res)
        failed += fails
        vals = np.array([r["metric"] for r in res if r["error"] is None])
        stat = (
            "-"
            if vals.size == 0
            else (
                f"{vals.mean():.4f} ({vals.std(ddof=1):.4f})" if vals.size > 1 else f"{vals[0]:.4f}"
            )
        )
        print(
            f"| {c['data']} | {c['prior']} | {c['likelihood']} | {'on' if c['biases'] else 'off'} | "
            f"{fails}/{len(res)} | {'AUC' if c['likelihood'] == 'probit' else 'RMSE'} | {stat} | "
            f"{np.mean([r['seconds'] for r in res]):.0f} |"
        )
    for c in rows:
        for seed, r in c["seeds"].items():
            if r["error"]:
                print(
                    f"FAILED {c['data']} {c['prior']} {c['likelihood']} biases={c['biases']} seed {seed}: "
                    f"{r['error']}"
                )
    print(f"{failed} failed fits of {sum(len(c['seeds']) for c in rows)}", flush=True)
    if a.out:
        Path(a.out).write_text(
            json.dumps({"settings": vars(a), "cells": rows}, indent=1, default=str)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

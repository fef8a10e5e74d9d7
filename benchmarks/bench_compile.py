"""Time outside the sweeps of a first ``bmc.fit``: compilation and everything around it.

    python benchmarks/bench_compile.py                        # every member, 1 and 4 chains
    python benchmarks/bench_compile.py --members recommended --chains 4
    python benchmarks/bench_compile.py --cached               # plus a second process on a warm cache
    python benchmarks/bench_compile.py --xla-defaults         # plus XLA's default compilation
    python benchmarks/bench_compile.py --rounds 3             # the median of three runs per cell
    python benchmarks/bench_compile.py --against ../other --rounds 3   # paired with another checkout
    python benchmarks/bench_compile.py --gamma-sampler one-hash --versus-gamma-sampler jax --rounds 3

Each cell runs in a fresh Python process (nothing compiled before it, JAX's persistent
compilation cache off unless ``--cached``): it loads ML-100K (``--ml-path``), splits it
80/20 (``split(0.2, seed=0)``) and times one ``bmc.fit(train, K=10, test=test,
num_warmup=100, num_samples=400, num_chains=C, seed=0, progress_bar=False)``.  The fit
reports the seconds per sweep its loop measured (``fit.timings``); *outside* is the whole
fit minus the sweeps (``num_warmup + num_samples`` times the seconds per sweep): compiling,
the start, building the problem and the result.  ``--cached`` runs each cell a second
time in a new process that reads the programs the first one wrote to a temporary cache
folder (``bmc.enable_compilation_cache``): its compile column is what a second run of the
same fit spends compiling.  ``--xla-defaults`` runs each cell once more, compiled with
XLA's default options instead of bmczoo's (LLVM's first optimisation level on the CPU,
:mod:`bmczoo._xla`), and adds its compile seconds, seconds per sweep and test RMSE.
``--rounds N`` runs each cell N times and shows the run of median time outside the sweeps.
``--against DIR`` runs each cell also with another checkout of bmczoo (``DIR/src`` first
on ``PYTHONPATH``), the two processes alternated ``--rounds`` times, and adds the other's
median time outside the sweeps, the ratio of the medians (this checkout's over the other's)
and whether the test RMSEs agree (the same draws give the same RMSE): a comparison in the
same hour on a machine whose speed drifts.  ``--gamma-sampler NAME`` fits with that
``gamma_sampler`` (default: ``bmc.fit``'s); ``--versus-gamma-sampler NAME`` compares it with
another sampler of this checkout the same way as ``--against`` (the RMSEs differ: other draws).

Members:

* ``plain``: the paper's sweep, ``InverseGamma()`` without the column moves;
* ``inverse-gamma``: ``InverseGamma()`` with its default column moves;
* ``discrete``: the default prior ``Discrete()`` with its column moves;
* ``recommended``: ``NormalWishart()`` + ``LearnedNoise()`` + biases;
* ``ordered``: ``NormalWishart()`` + ``OrderedProbit()`` + biases on the stars.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REAL_100K = REPO.parent / "shared" / "data" / "ml-100k"
MEMBERS = ("plain", "inverse-gamma", "discrete", "recommended", "ordered")

CHILD = r"""
import json, sys, time
import bmczoo as bmc
member, chains, path, cache, sampler = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
if sys.argv[6:] == ["xla-defaults"]:
    from bmczoo import _xla

    _xla.CPU_COMPILER_OPTIONS.clear()
if cache:
    bmc.enable_compilation_cache(cache)
P, L = bmc.priors, bmc.likelihoods
kw = {
    "plain": dict(prior=P.InverseGamma(), column_moves=False),
    "inverse-gamma": dict(prior=P.InverseGamma()),
    "discrete": dict(prior=P.Discrete()),
    "recommended": dict(prior=P.NormalWishart(), likelihood=L.LearnedNoise(), biases=True),
    "ordered": dict(prior=P.NormalWishart(), likelihood=L.OrderedProbit(), biases=True),
}[member]
if sampler:
    kw["gamma_sampler"] = sampler
train, test = bmc.datasets.load_movielens("100k", path, download=False).split(0.2, seed=0)
t0 = time.perf_counter()
fit = bmc.fit(train, K=10, test=test, method="gibbs", num_warmup=100, num_samples=400, num_chains=chains,
              seed=0, progress_bar=False, **kw)
whole = time.perf_counter() - t0
t = fit.timings
print(json.dumps({"whole": whole, "compile": t["compile_seconds"], "sweep": t["sweep_seconds"], "sweeps": 500,
                  "rmse": fit.rmse(test)}))
"""


def run_child(
    member: str,
    chains: int,
    ml_path: str,
    cache: str,
    xla_defaults: bool = False,
    source: str | None = None,
    sampler: str = "",
) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    if source is not None:  # another checkout's package first
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(source) / "src"), *filter(None, [env.get("PYTHONPATH")])]
        )
    extra = ["xla-defaults"] if xla_defaults else []
    out = subprocess.run(
        [sys.executable, "-c", CHILD, member, str(chains), ml_path, cache, sampler, *extra],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"{member}, {chains} chains failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _outside(r: dict) -> float:
    return r["whole"] - r["sweep"] * r["sweeps"]


def _median_run(member: str, chains: int, a, cache: str) -> tuple[dict, str]:
    """``--rounds`` runs of this checkout (``cache`` their compilation cache folder, "" for
    none), alternated with ``--against``'s when given: the run of median time outside the
    sweeps, and the comparison's table cells ("" without ``--against``)."""
    mine, other = [], []
    for _ in range(a.rounds):
        mine.append(run_child(member, chains, a.ml_path, cache, sampler=a.gamma_sampler))
        if a.against:
            other.append(run_child(member, chains, a.ml_path, "", source=a.against))
        elif a.versus_gamma_sampler:
            other.append(run_child(member, chains, a.ml_path, "", sampler=a.versus_gamma_sampler))
    mine.sort(key=_outside)
    median = mine[len(mine) // 2]
    if not other:
        return median, ""
    m_out = float(np.median([_outside(r) for r in mine]))
    o_out = float(np.median([_outside(r) for r in other]))
    same = all(abs(r["rmse"] - mine[0]["rmse"]) < 1e-9 for r in mine + other)
    return median, f" {o_out:.1f} | {m_out / o_out:.2f} | {'yes' if same else 'no'} |"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--members", nargs="+", choices=MEMBERS, default=list(MEMBERS))
    ap.add_argument("--chains", nargs="+", type=int, default=[1, 4])
    ap.add_argument(
        "--ml-path", default=str(REAL_100K), help="ML-100K folder or u.data (default ../shared)"
    )
    ap.add_argument(
        "--cached",
        action="store_true",
        help="also time a second process on a warm compilation cache",
    )
    ap.add_argument(
        "--xla-defaults",
        action="store_true",
        help="also time each cell compiled with XLA's default options instead of bmczoo's",
    )
    ap.add_argument(
        "--against",
        metavar="DIR",
        help="another checkout of bmczoo: each cell run with both, alternated (see above)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="runs per cell, the one of median time outside the sweeps shown (with "
        "--against: alternated pairs)",
    )
    ap.add_argument(
        "--gamma-sampler",
        choices=["jax", "one-hash"],
        default="",
        help="the fits' gamma_sampler (default: bmc.fit's)",
    )
    ap.add_argument(
        "--versus-gamma-sampler",
        choices=["jax", "one-hash"],
        default="",
        metavar="NAME",
        help="each cell also run with this gamma_sampler, alternated --rounds times, like "
        "--against (the ratio of the medians: --gamma-sampler's over this one's)",
    )
    a = ap.parse_args(argv)
    if a.against and a.versus_gamma_sampler:
        ap.error("--against and --versus-gamma-sampler: one comparison at a time")
    if a.cached and (a.against or a.versus_gamma_sampler or a.rounds > 1):
        ap.error("--cached times one run per cell: not with --rounds > 1 or --against")
    print(
        f"bench_compile: ML-100K 80/20, K=10, 100 + 400 sweeps; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    head = "| member | chains | whole fit (s) | ms/sweep | sweeps (s) | outside (s) | compile (s) | test RMSE |"
    if a.cached:
        head += " cached: compile (s) | cached: outside (s) |"
    if a.xla_defaults:
        head += " XLA defaults: compile (s) | XLA defaults: ms/sweep | XLA defaults: test RMSE |"
    if a.against or a.versus_gamma_sampler:
        head += " other: outside (s) | outside, ratio of medians | same RMSE |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for member in a.members:
        for chains in a.chains:
            with tempfile.TemporaryDirectory() as cache:
                r, compared = _median_run(member, chains, a, cache if a.cached else "")
                sweeps = r["sweep"] * r["sweeps"]
                row = (
                    f"| {member} | {chains} | {r['whole']:.1f} | {1000 * r['sweep']:.2f} | {sweeps:.1f} | "
                    f"{r['whole'] - sweeps:.1f} | {r['compile']:.1f} | {r['rmse']:.4f} |"
                )
                if a.cached:
                    w = run_child(member, chains, a.ml_path, cache, sampler=a.gamma_sampler)
                    row += f" {w['compile']:.2f} | {w['whole'] - w['sweep'] * w['sweeps']:.1f} |"
            if a.xla_defaults:
                d = run_child(
                    member, chains, a.ml_path, "", xla_defaults=True, sampler=a.gamma_sampler
                )
                row += f" {d['compile']:.1f} | {1000 * d['sweep']:.2f} | {d['rmse']:.4f} |"
            print(row + compared, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cost of the column moves: the plain Gibbs sweep, the sweep with the moves at its end
(``fuse_column_moves=False``) and with the moves inside it (the default), timed side by
side.

    python benchmarks/bench_column_moves.py [--data PATH] [--chains 1,4] [--K 10]
        [--priors discrete,inverse-gamma,gamma] [--every S] [--rounds 15] [--json PATH]

MovieLens 100K (the README's training split, centred) when present, else synthetic data of
its shape (``_synthetic.py``); float32.  For each prior (discrete ``Discrete(1, .05,
.07)``, ``InverseGamma()``, ``Gamma()``) and chain count, the three jitted ``gibbs.sweep``
variants are compiled first, then timed in alternation: ``--rounds`` rounds, each taking
the fastest of five calls of every variant, and the median over the rounds, so that a
machine whose speed drifts affects all three alike.  The moves run every ``--every``
sweeps, by default each prior's own schedule (``Prior.column_moves_every``: 4 for the
discrete prior, 1 for the others; then the "moves inside" column is ``bmc.fit``'s
default sweep).  A call runs one cycle of the schedule (the moves in its last sweep), and
the time per sweep is its mean.  The ratios to the plain sweep are what the issue's
targets are stated in; the load averages are printed with them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import REAL_100K, load_split  # noqa: E402  (the README's split)

VARIANTS = ("plain", "end", "fused")


def _priors(bmc):
    return {
        "discrete": bmc.priors.Discrete(1.0, 0.05, 0.07),
        "inverse-gamma": bmc.priors.InverseGamma(),
        "gamma": bmc.priors.Gamma(),
    }


def _options(variant: str, every: int):
    from bmczoo.inference.settings import SweepOptions

    if variant == "plain":
        return SweepOptions(column_moves=False)
    return SweepOptions(
        column_moves=True, column_moves_every=every, fuse_column_moves=variant == "fused"
    )


def _cycle(state, *, problem, prior, n: int):
    """``n`` sweeps (one cycle of a schedule of moves every ``n`` sweeps), counted."""
    from jax import lax

    from bmczoo.inference import gibbs

    def one(_, s):
        return gibbs.sweep(s, problem, prior)._replace(iteration=s.iteration + 1)

    return lax.fori_loop(0, n, one, state)


def _time_alternated(fns: dict, rounds: int) -> dict:
    """Median over ``rounds`` of the fastest of five calls, the variants alternated."""
    import jax

    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, (f, state) in fns.items():
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                jax.block_until_ready(f(state))
                best = min(best, time.perf_counter() - t)
            times[k].append(best)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=REAL_100K)
    ap.add_argument("--chains", type=_int_list, default=[1, 4])
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--priors", default="discrete,inverse-gamma,gamma")
    ap.add_argument(
        "--every",
        type=int,
        default=None,
        help="column_moves_every of both variants (default: each prior's own schedule)",
    )
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)

    import jax

    import bmczoo as bmc
    from bmczoo.inference import gibbs

    if a.data.exists():
        tr, _, rows, cols, vals, shape = load_split(a.data, 0)
        rows, cols, vals, name = rows[tr], cols[tr], vals[tr], str(a.data)
    else:
        from _synthetic import synthetic_ratings

        shape = (943, 1682)
        rows, cols, vals = synthetic_ratings(*shape, 80_000, seed=0)
        name = "synthetic 100K"
    train = bmc.RatingData(rows, cols, vals - vals.mean(), shape)
    priors = _priors(bmc)
    chosen = [p for p in a.priors.split(",") if p]
    unknown = sorted(set(chosen) - set(priors))
    if unknown:
        ap.error(f"unknown prior(s) {unknown}; choose from {sorted(priors)}")
    schedule = f"every {a.every} sweep(s)" if a.every else "on each prior's schedule"
    print(
        f"# {name}: {shape[0]} x {shape[1]}, {train.n} ratings; K = {a.K}, float32, moves "
        f"{schedule}; median of {a.rounds} rounds (fastest of 5 calls each, the variants "
        f"alternated); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print("| prior | chains | every | plain | moves at the end | ratio | moves inside | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for C in a.chains:
        keys = jax.random.split(jax.random.key(0), C)
        for label in chosen:
            prior = priors[label]
            every = a.every or prior.column_moves_every
            fns = {}
            for variant in VARIANTS:
                problem = gibbs.build_problem(train, 1.0, options=_options(variant, every))
                state = gibbs.init(keys, problem, prior, a.K)
                f = jax.jit(functools.partial(_cycle, problem=problem, prior=prior, n=every))
                for _ in range(3):  # compiled, and past the start
                    state = f(state)
                jax.block_until_ready(state)
                fns[variant] = (f, state)
            ms = {k: v / every for k, v in _time_alternated(fns, a.rounds).items()}
            row = dict(prior=label, chains=C, every=every, **{f"{k}_ms": v for k, v in ms.items()})
            row.update(end_ratio=ms["end"] / ms["plain"], fused_ratio=ms["fused"] / ms["plain"])
            results.append(row)
            print(
                f"| {label} | {C} | {every} | {ms['plain']:.2f} ms | {ms['end']:.2f} ms | "
                f"{row['end_ratio']:.2f} | {ms['fused']:.2f} ms | {row['fused_ratio']:.2f} |",
                flush=True,
            )
    print(f"# load after: {os.getloadavg()[0]:.1f}")
    if a.json is not None:
        a.json.write_text(
            json.dumps(
                dict(
                    args=vars(a) | {"data": str(a.data), "json": str(a.json)},
                    load=os.getloadavg(),
                    results=results,
                ),
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

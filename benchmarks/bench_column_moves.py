"""Cost of the column moves: a Gibbs sweep with and without them, and the moves alone.

    python benchmarks/bench_column_moves.py [--data PATH] [--chains 2] [--K 10] [--repeats 30]

MovieLens 100K (the README's training split, centred) when present, else synthetic data of
its shape (``_synthetic.py``); float32.  For the discrete ``Discrete(1, .05, .07)`` and
the inverse-gamma prior: the median wall milliseconds of a jitted ``gibbs.sweep`` without
and with ``column_moves=True``, and of ``gibbs.column_moves`` alone, after compilation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import REAL_100K, load_split  # noqa: E402  (the README's split)


def _median_ms(fn, arg, repeats):
    import jax

    out = fn(arg)
    jax.block_until_ready(out)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times)), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=REAL_100K)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args(argv)

    import jax

    import bmczoo as bmc
    from bmczoo.inference import gibbs
    from bmczoo.inference.settings import SweepOptions

    if a.data.exists():
        tr, _, rows, cols, vals, shape = load_split(a.data, 0)
        rows, cols, vals, name = rows[tr], cols[tr], vals[tr], str(a.data)
    else:
        from _synthetic import synthetic_ratings

        shape = (943, 1682)
        rows, cols, vals = synthetic_ratings(*shape, 80_000, seed=0)
        name = "synthetic 100K"
    train = bmc.RatingData(rows, cols, vals - vals.mean(), shape)
    print(
        f"# {name}: {shape[0]} x {shape[1]}, {train.n} ratings; K = {a.K}, {a.chains} chains, float32, "
        f"median of {a.repeats} after compilation"
    )
    keys = jax.random.split(jax.random.key(0), a.chains)
    for label, prior in (
        ("discrete", bmc.priors.Discrete(1.0, 0.05, 0.07)),
        ("inverse-gamma", bmc.priors.InverseGamma()),
    ):
        res = {}
        for moves in (False, True):
            problem = gibbs.build_problem(train, 1.0, options=SweepOptions(column_moves=moves))
            state = gibbs.init(keys, problem, prior, a.K)
            res[moves], state = _median_ms(
                jax.jit(lambda s, p=problem: gibbs.sweep(s, p, prior)), state, a.repeats
            )
        mkeys = jax.random.split(jax.random.key(1), a.chains)
        alone, _ = _median_ms(
            jax.jit(lambda s, p=problem: gibbs.column_moves(s, p, prior, mkeys).M), state, a.repeats
        )
        print(
            f"{label:>14s}: sweep {res[False]:.1f} ms, sweep with moves {res[True]:.1f} ms "
            f"({res[True] / res[False]:.1f}x), moves alone {alone:.1f} ms",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

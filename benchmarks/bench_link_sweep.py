"""Seconds per Gibbs sweep of the Normal-Wishart feature link (Macau) against the same
member without features, on ML-100K's official fold u3.

    python benchmarks/bench_link_sweep.py --data ../shared/data/ml-100k
    python benchmarks/bench_link_sweep.py --data ../shared/data/ml-100k --chains 4 --likelihood ordered

Every configuration is ``NormalWishart(...)`` + ``LearnedNoise()`` (or ``OrderedProbit()``)
+ biases, K = 10: ``ids`` (no features: the recommended member), ``side`` (the side
tables), ``implicit`` (implicit feedback on both sides), ``side+implicit``.  Each sweep
program (:func:`bmczoo.inference.gibbs.step`, all chains in one program) is compiled
first; the table gives the median over ``--repeats`` blocks of ``--sweeps`` sweeps and the
ratio to ``ids`` measured in the same run (the configurations alternate, so a change of
load touches them alike).  The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import time

CONFIGS = {
    "ids": {},
    "side": {"row_features": True, "col_features": True},
    "implicit": {"implicit": True},
    "side+implicit": {"row_features": True, "col_features": True, "implicit": True},
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the ML-100K folder (u.data, u.user, u.item)")
    p.add_argument("--fold", default="u3")
    p.add_argument("--chains", type=int, nargs="+", default=[1, 4])
    p.add_argument("--likelihood", choices=("learned", "ordered"), default="learned")
    p.add_argument("--sweeps", type=int, default=10, help="sweeps per timed block")
    p.add_argument("--repeats", type=int, default=7, help="timed blocks per configuration (median)")
    a = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    import bmczoo as bmc
    from bmczoo.inference import gibbs

    print(
        f"load average at the start: {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; jax {jax.__version__}"
    )
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    train, _ = data.official_split(a.fold)
    rows = []
    for C in a.chains:
        steps = {}
        for name, kw in CONFIGS.items():
            prior = bmc.priors.NormalWishart(**kw)
            lik = (
                bmc.likelihoods.LearnedNoise()
                if a.likelihood == "learned"
                else bmc.likelihoods.OrderedProbit()
            )
            problem = gibbs.build_problem(
                train,
                1.0,
                dtype=jnp.float32,
                prior=prior,
                likelihood=lik,
                biases=bmc.offsets.Biases(),
            )
            state = gibbs.init(jax.random.split(jax.random.key(0), C), problem, prior, 10)
            step = jax.jit(lambda s, pr, prior=prior: gibbs.step(s, pr, prior))
            state = jax.block_until_ready(step(state, problem))
            steps[name] = [step, state, problem, []]
        for _ in range(a.repeats):  # alternate the configurations
            for entry in steps.values():
                step, state, problem, times = entry
                t0 = time.perf_counter()
                for _ in range(a.sweeps):
                    state = step(state, problem)
                jax.block_until_ready(state)
                times.append((time.perf_counter() - t0) / a.sweeps)
                entry[1] = state
        base = float(np.median(steps["ids"][3]))
        for name, (_, _, _, times) in steps.items():
            rows.append((C, name, float(np.median(times)), float(np.median(times)) / base))
    print("| chains | configuration | ms/sweep | ratio to ids |\n|---|---|---|---|")
    for C, name, sec, ratio in rows:
        print(f"| {C} | {name} | {sec * 1e3:.1f} | {ratio:.2f} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

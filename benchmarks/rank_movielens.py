"""The discrete prior's rank on MovieLens 100K: plain Gibbs vs Gibbs with column moves.

    python benchmarks/rank_movielens.py [--data PATH] [--chains 2] [--warmup 100] [--samples 900]
                                        [--samplers plain,moves,default,anneal] [--K 10] [--start slab|spike|slab:r]
                                        [--dtype float32|float64] [--anneal-steps 50] [--anneal-every 10]

The README's split (``compare_peers.load_split``, seed 0, 80/20), the paper's
``Discrete(1, .05, .07)``, ``--K`` columns, thinning 1, started in the slab (the default), the spike or with ``r`` slab columns (``--start``).
Per sampler: test RMSE (the test entries predicted during the run), the rank posterior
(threshold sqrt(C eps)), each chain's mode and mean count, the R-hat of the active-column
count (n/a when every chain is constant) and the wall seconds of the fit (compilation
included).  ``moves`` runs the column moves at the end of every sweep
(``fuse_column_moves=False``, ``column_moves_every=1``), ``default`` as ``bmc.fit`` does
by default (inside the sweep, every fourth sweep for this prior).  The sampler ``anneal``
is ``moves`` plus the annealed spike/slab switch
(``anneal_steps``/``anneal_every``, :func:`bmczoo.inference.gibbs.annealed_switch`); per
chain the number of sweeps at which its count changed (after warm-up) is printed too, and
for ``anneal`` the accepted and attempted switches (warm-up included, ``fit.run_stats()``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_peers import REAL_100K, load_split  # noqa: E402  (the README's split)


def _start(text: str) -> str:
    if text in ("slab", "spike") or (text.startswith("slab:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"--start must be slab, spike or slab:r, got {text!r}")


def _init_gamma(start: str, prior, K: int):
    if start == "slab":
        return None
    if start == "spike":
        return prior.eps
    r = int(start[5:])
    if r > K:
        raise SystemExit(f"--start {start}: more slab columns than K = {K}")
    return [prior.C] * r + [prior.eps] * (K - r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=REAL_100K)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--samples", type=int, default=900)
    ap.add_argument(
        "--samplers", default="plain,moves", help="comma-separated: plain, moves, default, anneal"
    )
    ap.add_argument("--K", type=int, default=10)
    ap.add_argument(
        "--start",
        default="slab",
        type=_start,
        help="every column in the slab (gamma = C, bmc.fit's default), in the spike (gamma = eps), "
        "or 'slab:r': the first r columns in the slab, the others in the spike",
    )
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument(
        "--anneal-steps",
        type=int,
        default=50,
        help="steps of the annealed switch (sampler 'anneal')",
    )
    ap.add_argument(
        "--anneal-every", type=int, default=10, help="sweeps between two annealed switches"
    )
    a = ap.parse_args(argv)
    if not a.data.exists():
        print(f"no data at {a.data}", file=sys.stderr)
        return 1

    import bmczoo as bmc
    from bmczoo import diagnostics as dg

    tr, te, rows, cols, vals, shape = load_split(a.data, 0)
    train = bmc.RatingData(rows[tr], cols[tr], vals[tr], shape)
    test = bmc.RatingData(rows[te], cols[te], vals[te], shape)
    prior = bmc.priors.Discrete(1.0, 0.05, 0.07)
    print(
        f"# {a.data} ({shape[0]} x {shape[1]}), {prior}, K = {a.K}, {a.chains} chains, "
        f"{a.warmup} + {a.samples} sweeps, {a.start} start, {a.dtype}"
    )
    for sampler in a.samplers.split(","):
        t = time.perf_counter()
        anneal = (
            dict(anneal_steps=a.anneal_steps, anneal_every=a.anneal_every)
            if sampler == "anneal"
            else {}
        )
        fit = bmc.fit(
            train,
            K=a.K,
            prior=prior,
            num_warmup=a.warmup,
            num_samples=a.samples,
            thinning=1,
            num_chains=a.chains,
            progress_bar=False,
            seed=0,
            column_moves=(sampler != "plain"),
            **({} if sampler == "default" else dict(column_moves_every=1, fuse_column_moves=False)),
            **anneal,
            test=test,  # predicted during the run: long chains store no factor draws
            dtype=a.dtype,
            init_gamma=_init_gamma(a.start, prior, a.K),
        )
        secs = time.perf_counter() - t
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.RankMixingWarning)
            law = dg.rank_posterior(fit, dg.gamma_threshold(fit))
        mix = dg.rank_mixing(fit)
        counts = np.sum(
            np.asarray(fit.samples["gamma"]) > dg.gamma_threshold(fit), axis=-1
        )  # (chains, draws)
        changes = [int(np.sum(np.diff(c) != 0)) for c in counts]
        r_hat = mix["r_hat"]
        print(
            f"{sampler:>7s}: test RMSE {fit.rmse(test):.4f}; P(r), r = 0..{a.K}: "
            + " ".join(f"{p:.2f}" for p in law)
            + f"; chain modes {','.join(map(str, mix['chain_modes']))}"
            + f" (means {','.join(f'{v:.2f}' for v in mix['chain_means'])}); R-hat "
            + ("n/a" if not np.isfinite(r_hat) and r_hat != np.inf else f"{r_hat:.3f}")
            + f"; count changes per chain {','.join(map(str, changes))}"
            + (
                "; annealed switches accepted/attempted per chain "
                + ",".join(
                    f"{x}/{y}"
                    for x, y in zip(
                        fit.run_stats()["switches_accepted"], fit.run_stats()["switches_attempted"]
                    )
                )
                if sampler == "anneal"
                else ""
            )
            + f"; {secs:.0f} s ({1000 * secs / (a.warmup + a.samples):.0f} ms per sweep incl. compilation)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

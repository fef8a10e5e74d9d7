"""Does the rank posterior of the discrete prior mix?  Plain Gibbs vs Gibbs with column moves.

    python benchmarks/bench_rank_mixing.py [--seeds 0] [--chains 4] [--warmup 200] [--samples 1000]
                                           [--samplers plain,moves,fused,anneal] [--moves-every 1]
                                           [--anneal-steps 50] [--anneal-every 10]

The rank-3 simulation (``simulate_paper(200, rank=3)``: 200 x 200, rank 3, 20%
observed, N(0, 1) noise, factor variance 20/sqrt(m)), K = 10, ``Discrete(1, .05, .05)``,
``--warmup`` + ``--samples`` sweeps, thinning 1, ``--chains`` chains per start.  Three
starts: the slab (every gamma_h = C, the default), the spike (``init_gamma=0.05``) and a
random start (each gamma_h C or eps with probability 1/2, drawn once per seed).  For each
sampler, start and seed: the rank posterior (``P(#active = r)``, threshold sqrt(C eps)),
its mode, the R-hat of the number of active columns over that start's chains, the RMSE of
the posterior mean against the true matrix, and ESS per second of the number of active
columns and of the effective rank of theta (ArviZ bulk ESS over all chains, divided by the
wall seconds of the whole fit, compilation included; n/a when every chain stays at one
count: then nothing mixes).  R-hat is n/a when every chain is constant.  Per sampler and seed, the R-hat of
the active-column count (and of the effective rank) over all starts' chains pooled, and the
largest total-variation distance between two starts' rank posteriors.  The sampler
``moves`` runs the column moves every ``--moves-every`` sweeps (``column_moves_every``),
at the end of the sweep; ``fused`` the same inside the sweep (``fuse_column_moves=True``).
The sampler ``anneal`` is ``moves`` plus the annealed spike/slab switch (``--anneal-steps`` every
``--anneal-every`` sweeps; the discrete prior).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def run_one(sim, prior, sampler: str, start, a, seed: int):
    import bmczoo as bmc
    from bmczoo import diagnostics as dg

    t = time.perf_counter()
    m1, m2 = sim.train.shape
    # the posterior mean of every entry accumulated during the run; the factor draws (for
    # the effective rank) stored when they take < 256 MiB (long runs would need gigabytes)
    every = tuple(np.divmod(np.arange(m1 * m2), m2))
    fit = bmc.fit(
        sim.train,
        K=10,
        prior=prior,
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=1,
        num_chains=a.chains,
        init_gamma=start,
        progress_bar=False,
        seed=seed,
        column_moves=(sampler != "plain"),
        predict=every,
        store_factors="auto",
        **({} if sampler == "plain" else {"column_moves_every": a.moves_every}),
        fuse_column_moves=(sampler == "fused"),
        **(
            dict(anneal_steps=a.anneal_steps, anneal_every=a.anneal_every)
            if sampler == "anneal"
            else {}
        ),
    )
    secs = time.perf_counter() - t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.RankMixingWarning)
        rank = dg.rank_posterior(fit, dg.gamma_threshold(fit))
    mix = dg.rank_mixing(fit)
    active = dg.fit_arrays(fit).groups["posterior"]
    summ = dg.summary(fit, var_names=[v for v in ("num_active", "eff_rank") if v in active])
    ess = {
        v: float(summ.loc[v, "ess_bulk"]) if v in summ.index else float("nan")
        for v in ("num_active", "eff_rank")
    }
    counts = np.asarray(active["num_active"])
    if np.all(np.ptp(counts, axis=1) == 0):  # every chain stuck at one count: no mixing at all
        ess["num_active"] = float("nan")
    return dict(
        rank=rank,
        rhat=mix["r_hat"],
        modes=mix["chain_modes"],
        rmse=sim.rmse(fit),
        secs=secs,
        ess_active=ess["num_active"],
        ess_eff=ess["eff_rank"],
        counts=counts,
        eff_rank=np.asarray(active["eff_rank"]) if "eff_rank" in active else None,
    )


def _fmt(x, spec):
    if x == np.inf:
        return "inf"
    return "n/a" if not np.isfinite(x) else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--samplers", default="plain,moves")
    ap.add_argument(
        "--moves-every",
        type=int,
        default=1,
        help="sweeps between two rounds of column moves (samplers 'moves', 'fused' and 'anneal'; "
        "default 1)",
    )
    ap.add_argument(
        "--anneal-steps",
        type=int,
        default=50,
        help="steps of the annealed switch (sampler 'anneal')",
    )
    ap.add_argument(
        "--anneal-every", type=int, default=10, help="sweeps between two annealed switches"
    )
    ap.add_argument(
        "--prior",
        default="discrete",
        choices=("discrete", "inverse-gamma", "gamma"),
        help="discrete(1, .05, .05) (three starts), inverse-gamma(1, .005) or gamma(beta^2 = 2000) "
        "(their default start only)",
    )
    a = ap.parse_args()

    import arviz as az

    import bmczoo as bmc

    prior = {
        "discrete": bmc.priors.Discrete(1.0, 0.05, 0.05),
        "inverse-gamma": bmc.priors.InverseGamma(1.0, 0.005),
        "gamma": bmc.priors.Gamma(beta=float(np.sqrt(2000.0))),
    }[a.prior]
    print(
        f"# 200 x 200 rank-3 simulation, K = 10, {prior}, {a.warmup} + {a.samples} sweeps, "
        f"{a.chains} chains per start (ESS out of {a.chains * a.samples})"
    )
    print(
        f"{'seed':>4s} {'sampler':>7s} {'start':>6s} {'rank posterior P(r), r = 0..10':>58s} {'mode':>4s} "
        f"{'R-hat':>6s} {'chain modes':>12s} {'RMSE':>6s} {'ESS/s act':>9s} {'ESS/s eff':>9s} {'secs':>6s}"
    )
    for seed in (int(s) for s in a.seeds.split(",")):
        sim = bmc.datasets.simulate_paper(200, rank=3, seed=seed)
        rng = np.random.default_rng(1000 + seed)
        starts = {"default": None}
        if a.prior == "discrete":
            starts = {
                "slab": None,
                "spike": prior.eps,
                "random": tuple(np.where(rng.random(10) < 0.5, prior.C, prior.eps).tolist()),
            }
        for sampler in a.samplers.split(","):
            laws, counts, effs = [], [], []
            for name, start in starts.items():
                r = run_one(sim, prior, sampler, start, a, seed)
                laws.append(r["rank"])
                counts.append(r["counts"])
                effs.append(r["eff_rank"])
                law = " ".join(f"{p:.2f}" for p in r["rank"])
                print(
                    f"{seed:4d} {sampler:>7s} {name:>6s} {law:>58s} {int(np.argmax(r['rank'])):4d} "
                    f"{_fmt(r['rhat'], '6.3f'):>6s} {','.join(map(str, r['modes'])):>12s} {r['rmse']:6.3f} "
                    f"{_fmt(r['ess_active'] / r['secs'], '9.2f'):>9s} {_fmt(r['ess_eff'] / r['secs'], '9.2f'):>9s} "
                    f"{r['secs']:6.1f}",
                    flush=True,
                )
            pooled = np.concatenate(counts, axis=0)
            with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rhat = float(az.rhat(pooled))
            if np.ptp(pooled) == 0:
                rhat = float("nan")  # every chain at one count: nothing to compare (all agree)
            elif np.all(np.ptp(pooled, axis=1) == 0):
                rhat = float("inf")  # constant chains at different counts
            tv = max(0.5 * np.abs(p - q).sum() for p in laws for q in laws)
            rhat_eff = (
                float(az.rhat(np.concatenate(effs, axis=0)))
                if all(e is not None for e in effs)
                else float("nan")
            )
            print(
                f"{seed:4d} {sampler:>7s} {'all':>6s} pooled R-hat of #active over the {pooled.shape[0]} chains "
                f"{_fmt(rhat, '.3f')} (of the effective rank {_fmt(rhat_eff, '.3f')}), largest TV between starts "
                f"{tv:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

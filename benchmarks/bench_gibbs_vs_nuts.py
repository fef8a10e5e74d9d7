"""Conjugate Gibbs versus NumPyro NUTS (and VB, SVI, MAP) on the paper's m = 100, K = 5 problem.

    python benchmarks/bench_gibbs_vs_nuts.py --priors discrete,gamma
    python benchmarks/bench_gibbs_vs_nuts.py                     # all four priors (slow: NUTS)

Problem: ``bmc.datasets.simulate_paper(100, seed=0)`` (rank-2 truth, 20% of the entries
observed with N(0, 1) noise), K = 5, the ordinary posterior (noise sd 1), each prior with
the paper's Table 3 hyper-parameters for m = 100 (``bmczoo.experiments.paper_prior``).

For each prior:

* **Gibbs** (``bmc.fit(method="gibbs")``): ``--gibbs-chains`` chains advanced together
  (``chain_method="vectorized"``), ``--gibbs-warmup`` + ``--gibbs-samples`` sweeps,
  thinning 1;
* **NUTS** (``bmc.fit(method="nuts")``, NumPyro's NUTS on
  :func:`bmczoo.models.matrix_completion`, the discrete prior integrated out):
  ``--nuts-chains`` chains, ``--nuts-warmup`` + ``--nuts-samples``;

both track ``theta`` at the same entries (``--track`` observed plus as many unobserved
entries, ``track=(rows, cols)``).  Reported: wall time of the fit call ("wall"), the
part of it spent tracing and compiling with JAX ("compile", the union of the time spans
of JAX's own compilation events, ``jax.monitoring``), and their difference ("net");
ArviZ bulk ESS of the tracked entries (min and median over entries) and ESS per second
(min ESS / net seconds); the Gibbs/NUTS ratio of ESS per second; the agreement of the
posterior means of the tracked entries, ``max |mean_gibbs - mean_nuts| /
sqrt(mcse_gibbs^2 + mcse_nuts^2)`` (ArviZ MCSE of the mean; values below ~3.5 are what
Monte Carlo error alone gives for 2x10 entries); R-hat (max over entries); NUTS
divergences; and the RMSE of the posterior mean of theta to the true theta over all
m^2 entries (the paper's criterion).  VB (CAVI), SVI (AutoNormal) and MAP (AutoDelta,
gamma integrated out) are timed on the same problem with their RMSE.

The machine may be shared: the load average is printed; timings are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PRIOR_NAMES = ("fixed", "gamma", "inverse-gamma", "discrete")


def _parse_priors(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in PRIOR_NAMES:
            raise SystemExit(f"unknown prior {n!r}; choose from {', '.join(PRIOR_NAMES)}")
    return names


def _tracked_entries(train, m: int, num: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``num`` observed and ``num`` unobserved entries (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    obs = rng.choice(train.n, size=num, replace=False)
    observed = set(zip(train.rows.tolist(), train.cols.tolist()))
    unobs = []
    while len(unobs) < num:
        i, j = (int(x) for x in rng.integers(0, m, size=2))
        if (i, j) not in observed and (i, j) not in unobs:
            unobs.append((i, j))
    rows = np.concatenate([train.rows[obs], [u[0] for u in unobs]]).astype(np.int64)
    cols = np.concatenate([train.cols[obs], [u[1] for u in unobs]]).astype(np.int64)
    return rows, cols


_SPANS: list[tuple[float, float]] = []
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def _install_compile_listener() -> None:
    """Record the (start, end) wall times of JAX tracing, lowering and XLA compilation."""
    import jax.monitoring

    def on_span(event, start, end, **kwargs):
        if event in _COMPILE_EVENTS:
            _SPANS.append((start, end))

    jax.monitoring.register_event_time_span_listener(on_span)


def _union_length(spans: list[tuple[float, float]]) -> float:
    """Total length of a union of intervals (nested traces are counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _timed(fn):
    """``(result, wall seconds, seconds of JAX tracing + compilation during the call)``."""
    n0 = len(_SPANS)
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    return out, wall, min(_union_length(_SPANS[n0:]), wall)


def _theta_hat_from_draws(M: np.ndarray, N: np.ndarray) -> np.ndarray:
    """Posterior mean of ``M N^T`` from draws (..., m1, K), (..., m2, K)."""
    M = np.asarray(M, np.float64).reshape(-1, *M.shape[-2:])
    N = np.asarray(N, np.float64).reshape(-1, *N.shape[-2:])
    return np.einsum("sik,sjk->ij", M, N) / M.shape[0]


def _ess_mcse(theta: np.ndarray):
    """Bulk ESS, MCSE of the mean, R-hat and mean of each tracked entry: theta (chain, draw, T)."""
    import arviz as az

    ds = az.convert_to_dataset({"theta": theta})
    ess = np.asarray(az.ess(ds, method="bulk")["theta"])
    mcse = np.asarray(az.mcse(ds, method="mean")["theta"])
    rhat = np.asarray(az.rhat(ds)["theta"]) if theta.shape[0] > 1 else np.full(theta.shape[-1], np.nan)
    return ess, mcse, rhat, theta.mean(axis=(0, 1))


def run_prior(name: str, args, sim, rows_t, cols_t, log) -> dict:
    import bmczoo as bmc
    from bmczoo.experiments import paper_prior

    m = sim.shape[0]
    prior = paper_prior(name, m)
    train = sim.train
    rr = np.repeat(np.arange(m), m)
    cc = np.tile(np.arange(m), m)
    common = dict(K=args.K, prior=prior, seed=args.seed, progress_bar=args.progress, track=(rows_t, cols_t))
    out: dict = {"prior": str(prior)}

    # ---------------------------------------------------------------- Gibbs
    def gibbs(num_warmup, num_samples, predict=True):
        return bmc.fit(train, method="gibbs", num_warmup=num_warmup, num_samples=num_samples, thinning=1,
                       num_chains=args.gibbs_chains, chain_method="vectorized",
                       column_moves=False if args.no_column_moves else None,
                       predict=(rr, cc) if predict else None, **common)

    log(f"[{name}] gibbs: {args.gibbs_chains} chains x ({args.gibbs_warmup} + {args.gibbs_samples})")
    g, t_g, c_g = _timed(lambda: gibbs(args.gibbs_warmup, args.gibbs_samples))
    ess_g, mcse_g, rhat_g, mean_g = _ess_mcse(np.asarray(g.samples["theta"], np.float64))
    theta_g = g.predict(rr, cc).reshape(m, m)
    out["gibbs"] = dict(wall=t_g, compile=c_g, net=t_g - c_g, ess_min=float(ess_g.min()),
                        ess_med=float(np.median(ess_g)), rhat_max=float(np.nanmax(rhat_g)),
                        rmse=sim.rmse(theta_g), draws=args.gibbs_chains * args.gibbs_samples)

    # ---------------------------------------------------------------- NUTS
    def nuts(num_warmup, num_samples):
        return bmc.fit(train, method="nuts", num_warmup=num_warmup, num_samples=num_samples, thinning=1,
                       num_chains=args.nuts_chains, **common)

    log(f"[{name}] nuts: {args.nuts_chains} chains x ({args.nuts_warmup} + {args.nuts_samples})")
    n_fit, t_n, c_n = _timed(lambda: nuts(args.nuts_warmup, args.nuts_samples))
    ess_n, mcse_n, rhat_n, mean_n = _ess_mcse(np.asarray(n_fit.samples["theta"], np.float64))
    theta_n = _theta_hat_from_draws(n_fit.samples["M"], n_fit.samples["N"]) + n_fit.meta["offset"]
    div = int(np.sum(np.asarray(n_fit.mcmc.get_extra_fields()["diverging"])))
    out["nuts"] = dict(wall=t_n, compile=c_n, net=t_n - c_n, ess_min=float(ess_n.min()),
                       ess_med=float(np.median(ess_n)), rhat_max=float(np.nanmax(rhat_n)),
                       rmse=sim.rmse(theta_n), divergences=div, draws=args.nuts_chains * args.nuts_samples)
    z = np.abs(mean_g - mean_n) / np.sqrt(mcse_g**2 + mcse_n**2)
    out["agreement_max_z"] = float(z.max())
    gi, nu = out["gibbs"], out["nuts"]
    out["ess_per_s_ratio"] = (gi["ess_min"] / gi["net"]) / (nu["ess_min"] / nu["net"])
    out["ess_per_s_ratio_wall"] = (gi["ess_min"] / gi["wall"]) / (nu["ess_min"] / nu["wall"])

    # ---------------------------------------------------------------- VB, SVI, MAP
    log(f"[{name}] vb / svi / map")
    v, t_v, _ = _timed(lambda: bmc.fit(train, K=args.K, prior=prior, method="vb", max_iter=args.vb_max_iter,
                                    seed=args.seed, progress_bar=False))
    out["vb"] = dict(wall=t_v, rmse=sim.rmse(v), iterations=int(v.meta["num_iter"]), converged=bool(v.converged))
    s, t_s, _ = _timed(lambda: bmc.fit(train, K=args.K, prior=prior, method="svi", num_steps=args.svi_steps,
                                    seed=args.seed, progress_bar=False))
    out["svi"] = dict(wall=t_s, rmse=sim.rmse(s))
    p, t_p, _ = _timed(lambda: bmc.fit(train, K=args.K, prior=prior, method="map", num_steps=args.svi_steps,
                                    seed=args.seed, progress_bar=False))
    out["map"] = dict(wall=t_p, rmse=sim.rmse(p))
    return out


def print_table(results: dict, args) -> None:
    print()
    print(f"Gibbs vs NUTS: simulate_paper({args.m}, seed={args.data_seed}), K={args.K}, paper Table-3 priors; "
          f"Gibbs {args.gibbs_chains}x({args.gibbs_warmup}+{args.gibbs_samples}), "
          f"NUTS {args.nuts_chains}x({args.nuts_warmup}+{args.nuts_samples}); "
          f"{2 * args.track} tracked theta entries; seconds: wall = the fit call, compile = JAX tracing + "
          f"compilation within it, net = wall - compile; ESS/s = min ESS / net (and / wall)")
    hdr = (f"{'prior':<32} {'sampler':<6} {'wall':>8} {'compile':>8} {'net':>8} {'ESS min':>8} {'ESS med':>8} "
           f"{'ESS/s':>9} {'(wall)':>8} {'R-hat':>6} {'RMSE':>7} {'div':>5}")
    print(hdr)
    print("-" * len(hdr))
    for name, r in results.items():
        for smp in ("gibbs", "nuts"):
            x = r[smp]
            label = r["prior"] if smp == "gibbs" else ""
            print(f"{label:<32} {smp:<6} {x['wall']:8.2f} {x['compile']:8.2f} {x['net']:8.2f} "
                  f"{x['ess_min']:8.0f} {x['ess_med']:8.0f} {x['ess_min'] / x['net']:9.1f} "
                  f"{x['ess_min'] / x['wall']:8.1f} {x['rhat_max']:6.3f} {x['rmse']:7.4f} "
                  f"{x.get('divergences', ''):>5}")
        print(f"{'':<32} ESS/s ratio Gibbs/NUTS = {r['ess_per_s_ratio']:.1f} (net), "
              f"{r['ess_per_s_ratio_wall']:.1f} (wall); "
              f"posterior means agree: max |diff|/MCSE = {r['agreement_max_z']:.2f}")
    print()
    hdr2 = f"{'prior':<32} {'method':<6} {'wall':>8} {'RMSE':>7}  notes"
    print(hdr2)
    print("-" * len(hdr2))
    for name, r in results.items():
        for meth in ("gibbs", "nuts", "vb", "svi", "map"):
            x = r[meth]
            note = ""
            if meth == "vb":
                note = f"{x['iterations']} iterations, converged={x['converged']}"
            print(f"{r['prior'] if meth == 'gibbs' else '':<32} {meth:<6} {x['wall']:8.2f} {x['rmse']:7.4f}  {note}")
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--priors", type=_parse_priors, default=list(PRIOR_NAMES),
                    help="comma-separated subset of " + ",".join(PRIOR_NAMES))
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0, help="sampler seed")
    ap.add_argument("--track", type=int, default=10, help="observed (and as many unobserved) entries tracked")
    ap.add_argument("--gibbs-chains", type=int, default=4)
    ap.add_argument("--no-column-moves", action="store_true",
                    help="Gibbs: the paper's plain sweep (default: bmc.fit's, the column moves where the prior has one)")
    ap.add_argument("--gibbs-warmup", type=int, default=100)
    ap.add_argument("--gibbs-samples", type=int, default=1000)
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-samples", type=int, default=500)
    ap.add_argument("--vb-max-iter", type=int, default=1000)
    ap.add_argument("--svi-steps", type=int, default=2000)
    ap.add_argument("--x64", action="store_true", help="float64 for every method")
    ap.add_argument("--progress", action="store_true", help="progress bars")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    args = ap.parse_args(argv)

    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    _install_compile_listener()
    import bmczoo as bmc

    def log(msg):
        print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)

    sim = bmc.datasets.simulate_paper(args.m, seed=args.data_seed)
    rows_t, cols_t = _tracked_entries(sim.train, args.m, args.track, seed=12345)
    log(f"device {jax.devices()[0]}, load average {os.getloadavg()}, n = {sim.train.n}")
    results = {}
    for name in args.priors:
        results[name] = run_prior(name, args, sim, rows_t, cols_t, log)
        if len(args.priors) > 1:  # partial results as they come
            print_table({name: results[name]}, args)
    log(f"load average {os.getloadavg()}")
    print_table(results, args)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

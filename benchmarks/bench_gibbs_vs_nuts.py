"""Conjugate Gibbs versus NumPyro NUTS (and VB, SVI, MAP) on the paper's m = 100, K = 5 problem.

    python benchmarks/bench_gibbs_vs_nuts.py --priors discrete,inverse-gamma
    python benchmarks/bench_gibbs_vs_nuts.py                     # all four priors (slow: NUTS)

Problem: ``bmc.datasets.simulate_paper(100, seed=0)`` (rank-2 truth, 20% of the entries
observed with N(0, 1) noise), K = 5, the ordinary posterior (noise sd 1), each prior with
the paper's Table 3 hyper-parameters for m = 100 (``bmczoo.experiments.paper_prior``).

For each prior the samplers and starts (:func:`sampler_runs`):

* **Gibbs** (``bmc.fit(method="gibbs")``), ``--gibbs-chains`` chains advanced together,
  ``--gibbs-warmup`` + ``--gibbs-samples`` sweeps, thinning 1: with ``bmc.fit``'s
  default moves (the column moves where the prior has one; the reference) and the
  paper's plain sweep (``column_moves=False``); for the discrete prior each from the
  slab (every column active, the default start) and from the spike;
* **NUTS** (NumPyro's NUTS on :func:`bmczoo.models.matrix_completion`, the discrete
  prior integrated out), ``--nuts-chains`` chains, ``--nuts-warmup`` + ``--nuts-samples``,
  from three starts: NumPyro's default (``bmc.fit(method="nuts")``), the last state of
  each chain of the reference Gibbs run ("moves' state"), and dispersed starts built from
  that state with 1..K active columns spread over the chains (inactive columns redrawn at
  the smallest, active ones at the largest scale of that state's gamma), through
  :func:`bmczoo.inference.baselines.run_nuts`'s ``init_params``.

Every run tracks ``theta`` at the same entries (``--track`` observed plus as many
unobserved).  Reported per run: the rank posterior ``fit.rank_posterior(t)``
(P(#active columns = r), r = 0..K; ``t`` the prior's active threshold, else
``bmc.diagnostics.gamma_threshold`` of the reference run), each chain's most frequent
active count, R-hat, the RMSE of the posterior mean of theta to the true theta (all m^2
entries, the paper's criterion) and, for the discrete prior, the mean log density of
the integrated model, ``log p(M, N, Y)`` (gamma summed out), over 200 of its draws.

Verdict against the reference: for the tracked theta entries and the active count,
``z = |mean_a - mean_ref| / sqrt(mcse_a^2 + mcse_ref^2)`` (ArviZ MCSE of the mean, from
each run's ESS); "agree" when every ``z`` is below the Bonferroni threshold
``Phi^-1(1 - 0.01 / (2 S))`` for the ``S`` statistics (familywise 1%; 3.49 for S = 21)
and both runs have R-hat < 1.05, else "DISAGREE".  Where a run disagrees, the text says
which active counts its chains sit in against the reference's, from which start, and
the log density of each mode.

Timing table (Gibbs with the default moves against NUTS from its default start): wall
time of the fit call, the part spent tracing and compiling with JAX ("compile", the union
of the time spans of JAX's own compilation events, ``jax.monitoring``) and their
difference ("net"); ArviZ bulk ESS of the tracked entries (min and median over entries)
and ESS per second; the Gibbs/NUTS ratio of ESS per second; NUTS divergences.  VB (CAVI),
SVI (AutoNormal) and MAP (AutoDelta, gamma integrated out) are timed on the same problem
with their RMSE (``--no-vb`` skips them).

The machine may be shared: the load average is printed; timings are wall-clock.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
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
    rhat = (
        np.asarray(az.rhat(ds)["theta"]) if theta.shape[0] > 1 else np.full(theta.shape[-1], np.nan)
    )
    return ess, mcse, rhat, theta.mean(axis=(0, 1))


# ---------------------------------------------------------------------------- samplers and starts
Z_ALPHA = 0.01  # familywise level of the agreement verdict


def _statistic_draws(fit, threshold, column_scales: bool) -> tuple[np.ndarray, list[str]]:
    """theta at the tracked entries and, for a column-scale prior, the active count, per
    draw: (chain, draw, S)."""
    from bmczoo.diagnostics.convert import num_active_draws

    theta = np.asarray(fit.samples["theta"], np.float64)
    names = [f"theta{(int(r), int(c))}" for r, c in zip(fit.track_rows, fit.track_cols)]
    if column_scales:
        count = num_active_draws(fit, fit.samples, threshold)[..., None]
        return np.concatenate([theta, count], axis=-1), names + ["active count"]
    return theta, names


def _mean_mcse_rhat(x: np.ndarray):
    """Mean, ArviZ MCSE of the mean (0 for a constant series) and R-hat per statistic."""
    import arviz as az

    ds = az.convert_to_dataset({"x": x})
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        # a series without variance within its chains has no MCSE or R-hat: set below
        warnings.simplefilter("ignore", RuntimeWarning)
        mcse = np.asarray(az.mcse(ds, method="mean")["x"], np.float64)
        rhat = (
            np.asarray(az.rhat(ds)["x"], np.float64)
            if x.shape[0] > 1
            else np.full(x.shape[-1], np.nan)
        )
    const = np.all(x == x[:1, :1], axis=(0, 1))
    mcse = np.where(const, 0.0, mcse)
    rhat = np.where(const, 1.0, rhat)  # every chain at the same constant
    # chains each constant at different values: no within-chain variance, R-hat undefined
    chain_const = np.all(x == x[:, :1], axis=1).all(axis=0) & ~const
    rhat = np.where(chain_const, np.inf, rhat)
    return x.mean(axis=(0, 1)), mcse, rhat


def agreement(x_ref: np.ndarray, x: np.ndarray) -> dict:
    """Verdict of one run's statistics (chain, draw, S) against the reference's."""
    from statistics import NormalDist

    m0, s0, r0 = _mean_mcse_rhat(x_ref)
    m1, s1, r1 = _mean_mcse_rhat(x)
    diff = np.abs(m1 - m0)
    se = np.sqrt(s0**2 + s1**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(diff > 0, np.inf, 0.0))
    z_crit = NormalDist().inv_cdf(1.0 - Z_ALPHA / (2 * z.size))
    worst_rhat = np.fmax(r0, r1)
    rhat = float(np.nanmax(worst_rhat))
    ok = bool(np.all(z < z_crit) and rhat < 1.05)
    return dict(
        z=z,
        max_z=float(z.max()),
        argmax=int(np.argmax(z)),
        z_crit=z_crit,
        rhat=rhat,
        rhat_argmax=int(np.nanargmax(worst_rhat)),
        verdict="agree" if ok else "DISAGREE",
    )


def _log_density(fit, data, K, prior, likelihood, num: int = 200) -> float:
    """Mean over ``num`` draws (evenly spaced over all chains) of the log density of the
    model with gamma integrated out (the discrete prior's NumPyro model), M and N given."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer.util import log_density

    import bmczoo as bmc

    M = np.asarray(fit.samples["M"], np.float64).reshape(-1, *fit.samples["M"].shape[-2:])
    N = np.asarray(fit.samples["N"], np.float64).reshape(-1, *fit.samples["N"].shape[-2:])
    idx = np.linspace(0, M.shape[0] - 1, min(num, M.shape[0])).astype(int)

    def one(Mv, Nv):
        return log_density(
            bmc.models.matrix_completion,
            (data, K, prior),
            {"likelihood": likelihood},
            {"M": Mv, "N": Nv},
        )[0]

    return float(
        jnp.mean(
            jax.jit(jax.vmap(one))(
                jnp.asarray(M[idx], jnp.float32), jnp.asarray(N[idx], jnp.float32)
            )
        )
    )


def _dispersed_starts(fit, threshold: float, num_chains: int, seed: int) -> tuple[dict, list[int]]:
    """NUTS starts with 1..K active columns spread over ``num_chains`` chains, from the last
    state of the reference run's first chain: its active columns (largest ``S_h`` first)
    kept, extra ones redrawn at the largest scale of its gamma, the rest at the smallest."""
    rng = np.random.default_rng(seed)
    M0 = np.asarray(fit.samples["M"][0, -1], np.float64)
    N0 = np.asarray(fit.samples["N"][0, -1], np.float64)
    g0 = np.asarray(fit.samples["gamma"][0, -1], np.float64)
    K = M0.shape[1]
    order = np.argsort(-(np.sum(M0**2, 0) + np.sum(N0**2, 0)))
    active0 = int(np.sum(g0 > threshold))
    big, small = np.sqrt(g0.max()), np.sqrt(g0.min())
    counts = [int(round(x)) for x in np.linspace(1, K, num_chains)]
    Ms, Ns, gs = [], [], []
    for r in counts:
        M, N, g = M0.copy(), N0.copy(), g0.copy()
        for pos, h in enumerate(order):
            if pos < min(r, active0):
                continue  # one of the state's active columns, kept
            scale = big if pos < r else small
            M[:, h] = rng.normal(size=M.shape[0]) * scale
            N[:, h] = rng.normal(size=N.shape[0]) * scale
            g[h] = scale**2
        Ms.append(M), Ns.append(N), gs.append(g)
    return {"M": np.stack(Ms), "N": np.stack(Ns), "gamma": np.stack(gs)}, counts


def _unconstrained_start(template, fit_data, values: dict) -> dict:
    """NumPyro's ``init_params`` from values of the model's sites (a chain axis first):
    each latent sample site of the model, mapped to its unconstrained space (``gamma`` of a
    continuous prior to its log; the discrete prior's model has only ``M``, ``N``)."""
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.distributions import biject_to

    import bmczoo as bmc

    info = template.info
    trace = handlers.trace(handlers.seed(bmc.models.matrix_completion, 0)).get_trace(
        fit_data, info.K, info.prior, likelihood=info.likelihood
    )
    out = {}
    for name, site in trace.items():
        if site["type"] == "sample" and not site["is_observed"]:
            if name not in values:
                raise ValueError(f"no starting value for the model's site {name!r}")
            out[name] = np.asarray(biject_to(site["fn"].support).inv(jnp.asarray(values[name])))
    return out


def _nuts_from(template, train, init, args, track):
    """NUTS from ``init`` (values of the sites, a chain axis), as ``bmc.fit(method="nuts")``
    runs it (same centred data, likelihood, dtype and seed), returned as a NUTS fit (the
    template's info) so that ``rank_posterior`` and the diagnostics apply."""
    from bmczoo.inference import NUTS
    from bmczoo.inference.baselines import run_nuts
    from bmczoo.inference.results.base import draws_theta_mean
    from bmczoo.offsets import GlobalMean

    info = template.info
    fit_data, shift = GlobalMean(center=info.center, clip="auto").prepare(train)
    init = _unconstrained_start(template, fit_data, init)
    settings = NUTS(
        num_warmup=args.nuts_warmup,
        num_samples=args.nuts_samples,
        thinning=1,
        num_chains=args.nuts_chains,
    )
    samples, mcmc = run_nuts(fit_data, info, settings, progress_bar=args.progress, init_params=init)
    M, N = samples["M"], samples["N"]
    samples["theta"] = np.sum(M[:, :, track[0]] * N[:, :, track[1]], axis=-1)
    theta = draws_theta_mean(samples, template.pred_rows, template.pred_cols)
    return dataclasses.replace(
        template,
        samples=samples,
        mcmc=mcmc,
        pred_theta=theta,
        pred_mean=shift.apply(theta),
        num_kept=M.shape[1],
    )


def sampler_runs(train, prior, args, track, log=print) -> dict:
    """The fits of every sampler and start on ``train`` (see the module docstring)."""
    import bmczoo as bmc

    m1, m2 = train.shape
    rr, cc = np.repeat(np.arange(m1), m2), np.tile(np.arange(m2), m1)
    common = dict(
        K=args.K,
        prior=prior,
        seed=args.seed,
        progress_bar=args.progress,
        track=track,
        predict=(rr, cc),
    )
    discrete = isinstance(prior, bmc.priors.Discrete)

    def gibbs(moves, start=None):
        return bmc.fit(
            train,
            method="gibbs",
            num_warmup=args.gibbs_warmup,
            num_samples=args.gibbs_samples,
            thinning=1,
            num_chains=args.gibbs_chains,
            chain_method="vectorized",
            column_moves=None if moves else False,
            store_factors=True,
            **({"init_gamma": start} if start is not None else {}),
            **common,
        )

    runs: dict = {}
    timings: dict = {}

    def run(label, fn):
        log(f"[{prior.name}] {label}")
        runs[label], timings[label], _c = _timed(fn)
        timings[label] = (timings[label], _c)

    has_moves = prior.has_column_move
    ref = "Gibbs, moves" if has_moves else "Gibbs"
    run(ref, lambda: gibbs(True))
    if discrete:
        run("Gibbs, moves, spike start", lambda: gibbs(True, prior.eps))
    if has_moves:
        run("Gibbs, plain sweep", lambda: gibbs(False))
        if discrete:
            run("Gibbs, plain sweep, spike start", lambda: gibbs(False, prior.eps))
    run(
        "NUTS, default start",
        lambda: bmc.fit(
            train,
            method="nuts",
            num_warmup=args.nuts_warmup,
            num_samples=args.nuts_samples,
            thinning=1,
            num_chains=args.nuts_chains,
            **common,
        ),
    )
    template = runs["NUTS, default start"]
    g = runs[ref]
    last = {k: np.asarray(g.samples[k][:, -1]) for k in ("M", "N", "gamma") if k in g.samples}
    # the reference's chains cycle over the NUTS chains when their numbers differ
    pick = np.arange(args.nuts_chains) % args.gibbs_chains
    run(
        "NUTS, from the moves' state" if has_moves else "NUTS, from Gibbs's state",
        lambda: _nuts_from(template, train, {k: v[pick] for k, v in last.items()}, args, track),
    )
    threshold = _threshold(g, prior)
    init, counts = _dispersed_starts(g, threshold, args.nuts_chains, args.seed + 1)
    run(f"NUTS, dispersed starts {counts}", lambda: _nuts_from(template, train, init, args, track))
    return dict(runs=runs, timings=timings, reference=ref, threshold=threshold, dispersed=counts)


def _threshold(fit, prior) -> float:
    import bmczoo as bmc

    t = prior.active_threshold() if prior.has_column_scales else None
    return float(t) if t is not None else float(bmc.diagnostics.gamma_threshold(fit))


def summarise_runs(res: dict, sim, prior, log_density: bool) -> list[dict]:
    """Per run: rank posterior, chain modes, R-hat, RMSE, log density, verdict."""
    import bmczoo as bmc

    runs, ref, t = res["runs"], res["reference"], res["threshold"]
    fixed = isinstance(prior, bmc.priors.Fixed)
    x_ref, names = _statistic_draws(runs[ref], t, not fixed)
    rows = []
    for label, fit in runs.items():
        x, _ = _statistic_draws(fit, t, not fixed)
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            # the table reports what these warn of (chains at different counts, R-hat
            # undefined for chains without variance)
            warnings.simplefilter("ignore", bmc.diagnostics.RankMixingWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            rp = np.asarray(fit.rank_posterior(t), np.float64)
            mix = bmc.diagnostics.rank_mixing(fit, t)
        count = np.round(x[..., -1]) if not fixed else None
        row = dict(
            label=label,
            rank_posterior=rp,
            chain_modes=None if mix is None else list(mix["chain_modes"]),
            chains_constant=None if count is None else bool(np.all(count == count[:, :1])),
            rmse=sim.rmse(fit),
            mean_count=float(np.sum(np.arange(rp.size) * rp)),
        )
        if label != ref:
            a = agreement(x_ref, x)
            row.update(
                verdict=a["verdict"],
                max_z=a["max_z"],
                worst=names[a["argmax"]],
                z_crit=a["z_crit"],
                rhat=a["rhat"],
                rhat_worst=names[a["rhat_argmax"]],
            )
        else:
            row.update(rhat=float(np.nanmax(_mean_mcse_rhat(x)[2])))
        if log_density:
            from bmczoo.offsets import GlobalMean

            fit_data, _ = GlobalMean(center=True, clip="auto").prepare(sim.train)
            row["log_density"] = _log_density(fit, fit_data, fit.info.K, prior, fit.info.likelihood)
        rows.append(row)
    return rows


def explain(rows: list[dict], res: dict, prior) -> str:
    """What the verdicts say: which run misses which mode, and how that is established."""
    ref = rows[0]
    mode = int(np.argmax(ref["rank_posterior"]))
    bad = [r for r in rows[1:] if r["verdict"] == "DISAGREE"]
    if not bad:
        return (
            f"Every run agrees with {ref['label']} (max z below the threshold, R-hat < 1.05); "
            f"the rank posteriors put {ref['rank_posterior'][mode]:.3f} on {mode} active columns."
        )
    lines = []
    moves_runs = [r for r in rows if r["label"].startswith("Gibbs, moves")]
    lines.append(
        f"Reference {ref['label']}: P(#active = {mode}) = {ref['rank_posterior'][mode]:.3f}, chains at "
        f"{ref['chain_modes']}"
        + (
            f"; from the spike start too: chains at {moves_runs[1]['chain_modes']}"
            if len(moves_runs) > 1
            else ""
        )
        + "."
    )
    for r in bad:
        m = int(np.argmax(r["rank_posterior"]))
        stuck = bool(r.get("chains_constant"))
        if m != mode:
            why = f"misses the {mode}-column mode: its chains sit at {r['chain_modes']} active columns"
        elif stuck and any(c != mode for c in r["chain_modes"]):
            why = f"only some chains at the {mode}-column mode: its chains sit at {r['chain_modes']} active columns"
        elif r["rhat"] > 1.05:
            why = (
                f"the chains of this run or the reference do not mix on {r['rhat_worst']}, though every z is "
                f"below the threshold (max z {r['max_z']:.2f})"
            )
        else:
            why = f"max z {r['max_z']:.2f} ({r['worst']})"
        extra = ""
        if "log_density" in r and "log_density" in ref:
            extra = (
                f"; mean log p(M, N, Y) (gamma summed out) {r['log_density']:.1f} against "
                f"{ref['log_density']:.1f} at the reference's draws"
            )
        lines.append(
            f"{r['label']}: DISAGREE - {why} (R-hat {r['rhat']:.3f}), mean active count "
            f"{r['mean_count']:.2f} against {ref['mean_count']:.2f}{extra}."
        )
    nuts = [r for r in rows if r["label"].startswith("NUTS") and r["chains_constant"] is not None]
    stay = [r for r in nuts if r["label"].startswith("NUTS, dispersed")]
    if stay and stay[0]["chain_modes"] is not None and stay[0]["chains_constant"]:
        counts, ends = res["dispersed"], [int(c) for c in stay[0]["chain_modes"]]
        kept = sum(int(a == b) for a, b in zip(counts, ends))
        lines.append(
            f"Started at {counts} active columns, NUTS's chains end at {ends} ({kept} of {len(counts)} "
            "at their start count; the others moved during warm-up)."
        )
    if nuts and all(r["chains_constant"] for r in nuts):
        lines.append(
            "After warm-up every NUTS chain keeps one active count in all its draws: NUTS does not move "
            "columns between the spike and the slab while it samples, so each NUTS run reports the mode "
            "its chains settled in, whatever their agreement with each other (R-hat)."
        )
    moved = [r for r in moves_runs if r["chain_modes"] is not None]
    if (
        len(moved) > 1
        and ref["rank_posterior"][mode] > 0.95
        and all(all(c == mode for c in r["chain_modes"]) for r in moved)
    ):
        lines.append(
            f"The column moves reach {mode} active columns from the slab and from the spike start (and are "
            f"calibrated by SBC, tests/inference/test_sbc.py): the posterior mass is at {mode}; a run that "
            f"sits elsewhere misses that mode."
        )
    return "\n".join(lines)


def print_comparison(name: str, prior, rows: list[dict], res: dict) -> str:
    K = rows[0]["rank_posterior"].size - 1
    out = [
        f"\n[{name}] {prior}; active: gamma_h > {res['threshold']:.4g}; verdicts against {rows[0]['label']} "
        f"(max z over the tracked entries and the active count; threshold "
        f"{rows[1]['z_crit']:.2f} = Phi^-1(1 - {Z_ALPHA}/(2 S)); R-hat < 1.05)"
    ]
    head = (
        f"{'run':<40} "
        + " ".join(f"{'P(' + str(r) + ')':>6}" for r in range(K + 1))
        + f" {'chains at':>14} {'R-hat':>7} {'RMSE':>7} {'log p':>9} {'max z':>7}  verdict"
    )
    out += [head, "-" * len(head)]
    for r in rows:
        lp = f"{r['log_density']:9.1f}" if "log_density" in r else f"{'-':>9}"
        mz = f"{r['max_z']:7.2f}" if "max_z" in r else f"{'-':>7}"
        modes = "-" if r["chain_modes"] is None else ",".join(str(int(c)) for c in r["chain_modes"])
        out.append(
            f"{r['label']:<40} "
            + " ".join(f"{p:6.3f}" for p in r["rank_posterior"])
            + f" {modes:>14} {r['rhat']:7.3f} {r['rmse']:7.4f} {lp} {mz}  {r.get('verdict', 'reference')}"
        )
    out.append(explain(rows, res, prior))
    text = "\n".join(out)
    print(text, flush=True)
    return text


def run_prior(name: str, args, sim, rows_t, cols_t, log) -> dict:
    import bmczoo as bmc
    from bmczoo.experiments import paper_prior

    from bmczoo.experiments.paper import PAPER_TABLE3_HYPER

    m = sim.shape[0]
    prior = paper_prior(
        name, m if m in PAPER_TABLE3_HYPER[name] else 100
    )  # else the m = 100 values
    res = sampler_runs(sim.train, prior, args, (rows_t, cols_t), log)
    rows = summarise_runs(res, sim, prior, log_density=isinstance(prior, bmc.priors.Discrete))
    out: dict = {
        "prior": str(prior),
        "comparison": print_comparison(name, prior, rows, res),
        "runs": [
            {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()}
            for r in rows
        ],
    }

    # ---------------------------------------------------------------- timing: Gibbs (default) vs NUTS (default)
    for smp, label in (("gibbs", res["reference"]), ("nuts", "NUTS, default start")):
        f = res["runs"][label]
        wall, comp = res["timings"][label]
        ess, mcse, rhat, mean = _ess_mcse(np.asarray(f.samples["theta"], np.float64))
        out[smp] = dict(
            wall=wall,
            compile=comp,
            net=wall - comp,
            ess_min=float(ess.min()),
            ess_med=float(np.median(ess)),
            rhat_max=float(np.nanmax(rhat)),
            rmse=sim.rmse(f),
            draws=int(np.prod(f.samples["theta"].shape[:2])),
        )
    n_fit = res["runs"]["NUTS, default start"]
    out["nuts"]["divergences"] = int(np.sum(np.asarray(n_fit.mcmc.get_extra_fields()["diverging"])))
    gi, nu = out["gibbs"], out["nuts"]
    out["ess_per_s_ratio"] = (gi["ess_min"] / gi["net"]) / (nu["ess_min"] / nu["net"])
    out["ess_per_s_ratio_wall"] = (gi["ess_min"] / gi["wall"]) / (nu["ess_min"] / nu["wall"])
    nuts_row = next(r for r in rows if r["label"] == "NUTS, default start")
    out["verdict_nuts_default"] = nuts_row["verdict"]
    out["max_z_nuts_default"] = nuts_row["max_z"]

    if args.no_vb:
        return out
    # ---------------------------------------------------------------- VB, SVI, MAP
    train = sim.train
    log(f"[{name}] vb / svi / map")
    v, t_v, _ = _timed(
        lambda: bmc.fit(
            train,
            K=args.K,
            prior=prior,
            method="vb",
            max_iter=args.vb_max_iter,
            seed=args.seed,
            progress_bar=False,
        )
    )
    out["vb"] = dict(
        wall=t_v, rmse=sim.rmse(v), iterations=int(v.meta["num_iter"]), converged=bool(v.converged)
    )
    s, t_s, _ = _timed(
        lambda: bmc.fit(
            train,
            K=args.K,
            prior=prior,
            method="svi",
            num_steps=args.svi_steps,
            seed=args.seed,
            progress_bar=False,
        )
    )
    out["svi"] = dict(wall=t_s, rmse=sim.rmse(s))
    p, t_p, _ = _timed(
        lambda: bmc.fit(
            train,
            K=args.K,
            prior=prior,
            method="map",
            num_steps=args.svi_steps,
            seed=args.seed,
            progress_bar=False,
        )
    )
    out["map"] = dict(wall=t_p, rmse=sim.rmse(p))
    return out


def print_table(results: dict, args) -> None:
    print()
    print(
        f"Gibbs vs NUTS: simulate_paper({args.m}, seed={args.data_seed}), K={args.K}, paper Table-3 priors; "
        f"Gibbs {args.gibbs_chains}x({args.gibbs_warmup}+{args.gibbs_samples}) with the default moves, "
        f"NUTS {args.nuts_chains}x({args.nuts_warmup}+{args.nuts_samples}) from its default start; "
        f"{2 * args.track} tracked theta entries; seconds: wall = the fit call, compile = JAX tracing + "
        f"compilation within it, net = wall - compile; ESS/s = min ESS / net (and / wall)"
    )
    hdr = (
        f"{'prior':<32} {'sampler':<6} {'wall':>8} {'compile':>8} {'net':>8} {'ESS min':>8} {'ESS med':>8} "
        f"{'ESS/s':>9} {'(wall)':>8} {'R-hat':>6} {'RMSE':>7} {'div':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    for name, r in results.items():
        for smp in ("gibbs", "nuts"):
            x = r[smp]
            label = r["prior"] if smp == "gibbs" else ""
            print(
                f"{label:<32} {smp:<6} {x['wall']:8.2f} {x['compile']:8.2f} {x['net']:8.2f} "
                f"{x['ess_min']:8.0f} {x['ess_med']:8.0f} {x['ess_min'] / x['net']:9.1f} "
                f"{x['ess_min'] / x['wall']:8.1f} {x['rhat_max']:6.3f} {x['rmse']:7.4f} "
                f"{x.get('divergences', ''):>5}"
            )
        print(
            f"{'':<32} ESS/s ratio Gibbs/NUTS = {r['ess_per_s_ratio']:.1f} (net), "
            f"{r['ess_per_s_ratio_wall']:.1f} (wall); posterior means, NUTS default start vs Gibbs: "
            f"{r['verdict_nuts_default']} (max z = {r['max_z_nuts_default']:.2f}; see the rank posteriors above)"
        )
    print()
    if args.no_vb:
        return
    hdr2 = f"{'prior':<32} {'method':<6} {'wall':>8} {'RMSE':>7}  notes"
    print(hdr2)
    print("-" * len(hdr2))
    for name, r in results.items():
        for meth in ("gibbs", "nuts", "vb", "svi", "map"):
            x = r[meth]
            note = ""
            if meth == "vb":
                note = f"{x['iterations']} iterations, converged={x['converged']}"
            print(
                f"{r['prior'] if meth == 'gibbs' else '':<32} {meth:<6} {x['wall']:8.2f} {x['rmse']:7.4f}  {note}"
            )
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--priors",
        type=_parse_priors,
        default=list(PRIOR_NAMES),
        help="comma-separated subset of " + ",".join(PRIOR_NAMES),
    )
    ap.add_argument("--m", type=int, default=100)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0, help="sampler seed")
    ap.add_argument(
        "--track", type=int, default=10, help="observed (and as many unobserved) entries tracked"
    )
    ap.add_argument("--gibbs-chains", type=int, default=4)
    ap.add_argument("--gibbs-warmup", type=int, default=100)
    ap.add_argument("--gibbs-samples", type=int, default=1000)
    ap.add_argument("--nuts-chains", type=int, default=4)
    ap.add_argument("--nuts-warmup", type=int, default=500)
    ap.add_argument("--nuts-samples", type=int, default=500)
    ap.add_argument("--no-vb", action="store_true", help="skip VB, SVI and MAP")
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
    log(f"load average {os.getloadavg()}")
    print_table(results, args)
    for name, r in results.items():
        print(r["comparison"])
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

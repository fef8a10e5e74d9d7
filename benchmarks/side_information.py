"""Side information, implicit feedback and cold start on MovieLens 100K: bmczoo against
myFM and SMURFF's Macau, in one run.

    python benchmarks/side_information.py --out side_information.json
    python benchmarks/side_information.py --splits u3 --configs ids,side+implicit --no-cold --out u3.json
    python benchmarks/side_information.py --quick --out quick.json          # smoke test: 10 + 20 sweeps

**Splits** (``--splits``): the official folds ``u3`` and ``u1`` (``data.official_split``)
and the README's 80/20 split (``readme``: ``data.split(test_fraction=0.2, seed=0)``).
Every model gets the same training ratings, rank ``--K`` (10), ``--warmup`` burn-in +
``--samples`` kept iterations (100 + 400) and seed ``--seed`` (0); nothing is chosen on
the test data.  Implicit feedback is always built from the training pairs only.

**bmczoo** (``--configs``, the :data:`CONFIGS` table): ``NormalWishart(...)`` rows,
``biases=True``, four chains (``--chains``), Gibbs, thinning 1, every kept draw averaged:

* ``ids``: no features, ``LearnedNoise()`` (the recommended member);
* ``side``: ``row_features=True, col_features=True``: the side tables of the MovieLens
  loader (age bucket, gender, occupation, zip prefix; release year, genres) through the
  Macau link ``M_i ~ N(mu + B^T x_i, Lambda^-1)``;
* ``implicit``: ``implicit=True``: SVD++-style implicit feedback on both sides (the movies
  each user rated, the users who rated each movie, scaled by ``|R(i)|^-1/2``);
* ``side+implicit``: both;
* ``side+implicit+ordered``: the same prior with ``OrderedProbit()`` (levels 1..5 and cut
  points learned); RMSE of its predictive mean ``sum_l l P(Y = l)``;
* ``+fbias`` (``side+fbias``, ``side+implicit+fbias``, ``side+implicit+ordered+fbias``):
  the same prior and likelihood with feature-driven biases, ``Biases(row_features=True,
  col_features=True[, implicit=True])`` (``b_i ~ N(x_i^T w, s_b^2)``) in place of
  ``biases=True``.

**myFM** (when importable; ``--myfm-configs``): ``MyFMRegressor(rank=K)`` as in myFM's
MovieLens documentation: one :class:`myfm.RelationBlock` per side (each user's row: its
one-hot id, its side features, and the movies it rated scaled by ``count^-1/2``; each
movie's likewise), ``group_shapes`` with one group per id block and per feature group
(myFM's grouped hyper-priors), ``n_iter = warmup + samples`` and ``n_kept_samples =
samples`` (myFM keeps the last ``n_kept_samples`` draws: 100 burn-in + 400 kept).
Configurations: ``ids-ungrouped`` (pure MF, no ``group_shapes``), ``ids``, ``ids+side``,
``ids+implicit``, ``ids+implicit+side`` and ``oprobit+implicit+side``
(``MyFMOrderedProbit`` on ``rating - 1``; RMSE of ``1 + sum_l l P(class l)``).  An id
that has no training rating gets an all-zero id column (myFM's examples map such ids to
an "unknown" column that no training row has).

**SMURFF** (when importable; ``--smurff-configs``): ``TrainSession`` with
``AdaptiveNoise(1, 10)``, ratings centred by their training mean (added back):
``bpmf`` (Normal-Wishart priors on both sides), ``macau-side`` (``"macau"`` priors with the
same user and movie side features as ``addSideInfo`` matrices, direct solver, the link
precision sampled: SMURFF's ``SampledNoise`` default) and ``macau-side+implicit`` (side
features and the implicit-feedback columns).  SMURFF has no biases.

myFM's and SMURFF's predictions are clipped to [1, 5] as bmczoo's are.

**Cold start** (``--no-cold`` skips it): on the README split, 10% of the users
(``default_rng(seed).choice``) lose all their training ratings; they stay in the
matrix's shape, so a model predicts their test ratings from their features alone (for
bmczoo their rows are draws of ``N(mu + B^T x_i, Lambda^-1)``; their implicit-feedback
vector is zero).  Scored on those users' test ratings against two baselines fitted to the
same training ratings: the item mean (the global mean for an item without ratings) and
the item-bias baseline ``mu + sum_{u in R(j)} (r_uj - mu) / (n_j + 25)`` (shrinkage 25
fixed a priori, the item-bias regularisation of Koren's baseline predictors, not tuned).

Seconds per fit are wall clock including compilation (bmczoo) and data preparation
inside the peer's ``fit``; bmczoo's seconds per sweep are its sweeps alone
(``fit.timings["sweep_seconds"]``, the four chains side by side counting as one sweep),
the peers' the whole fit divided by its iterations.  Prints markdown tables and writes
every number, with the machine (CPU count, load average at start and end, date, package
versions), to ``--out`` after each fit.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _peers import cpu_model, importable  # noqa: E402

DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "ml-100k"

#: bmczoo configurations: ``NormalWishart`` keywords, the likelihood's class name in
#: ``bmczoo.likelihoods`` and (optional) ``Biases`` keywords (absent: ``biases=True``).
#: Add entries here to benchmark more members.
CONFIGS: dict[str, dict] = {
    "ids": {"prior": {}, "likelihood": "LearnedNoise"},
    "side": {"prior": {"row_features": True, "col_features": True}, "likelihood": "LearnedNoise"},
    "implicit": {"prior": {"implicit": True}, "likelihood": "LearnedNoise"},
    "side+implicit": {
        "prior": {"row_features": True, "col_features": True, "implicit": True},
        "likelihood": "LearnedNoise",
    },
    "side+implicit+ordered": {
        "prior": {"row_features": True, "col_features": True, "implicit": True},
        "likelihood": "OrderedProbit",
    },
    "side+fbias": {
        "prior": {"row_features": True, "col_features": True},
        "likelihood": "LearnedNoise",
        "biases": {"row_features": True, "col_features": True},
    },
    "side+implicit+fbias": {
        "prior": {"row_features": True, "col_features": True, "implicit": True},
        "likelihood": "LearnedNoise",
        "biases": {"row_features": True, "col_features": True, "implicit": True},
    },
    "side+implicit+ordered+fbias": {
        "prior": {"row_features": True, "col_features": True, "implicit": True},
        "likelihood": "OrderedProbit",
        "biases": {"row_features": True, "col_features": True, "implicit": True},
    },
}
#: myFM configurations: (side features, implicit feedback, group_shapes, ordered probit).
MYFM_CONFIGS: dict[str, tuple[bool, bool, bool, bool]] = {
    "ids-ungrouped": (False, False, False, False),
    "ids": (False, False, True, False),
    "ids+side": (True, False, True, False),
    "ids+implicit": (False, True, True, False),
    "ids+implicit+side": (True, True, True, False),
    "oprobit+implicit+side": (True, True, True, True),
}
#: SMURFF configurations: (side features, implicit feedback); neither is plain BPMF.
SMURFF_CONFIGS: dict[str, tuple[bool, bool]] = {
    "bpmf": (False, False),
    "macau-side": (True, False),
    "macau-side+implicit": (True, True),
}
SPLITS = ("u3", "u1", "readme")
COLD_CONFIGS = ("ids", "side", "side+implicit", "side+fbias", "side+implicit+fbias")
COLD_MYFM = ("ids+side", "ids+implicit+side")
COLD_SMURFF = ("macau-side",)
ITEM_BIAS_SHRINKAGE = 25.0
LO, HI = 1.0, 5.0


# --------------------------------------------------------------------------- data
def get_split(data, name: str, seed: int):
    if name == "readme":
        return data.split(test_fraction=0.2, seed=seed)
    return data.official_split(name)


def rmse(pred, y) -> float:
    return float(
        np.sqrt(
            np.mean((np.asarray(pred, dtype=np.float64) - np.asarray(y, dtype=np.float64)) ** 2)
        )
    )


def cold_start_split(train, test, fraction: float, seed: int):
    """``(train without the cold users' ratings, the cold users' test ratings, cold user ids)``."""
    m1 = train.shape[0]
    cold = np.sort(np.random.default_rng(seed).choice(m1, int(round(fraction * m1)), replace=False))
    return train.subset(~np.isin(train.rows, cold)), test.subset(np.isin(test.rows, cold)), cold


def item_baselines(train, test, shrinkage: float) -> dict:
    """Test RMSE of the item mean (global mean for unrated items) and of the regularised
    item-bias baseline ``mu + sum (r - mu) / (n_j + shrinkage)``."""
    mu = float(np.mean(train.values))
    m2 = train.shape[1]
    n = np.bincount(train.cols, minlength=m2).astype(np.float64)
    s = np.bincount(train.cols, weights=train.values, minlength=m2)
    item_mean = np.where(n > 0, s / np.maximum(n, 1.0), mu)
    item_bias = mu + (s - n * mu) / (n + shrinkage)
    return {
        "item mean": rmse(np.clip(item_mean[test.cols], LO, HI), test.values),
        f"item bias (shrinkage {shrinkage:g})": rmse(
            np.clip(item_bias[test.cols], LO, HI), test.values
        ),
    }


# --------------------------------------------------------------------------- bmczoo
def run_bmczoo(config: str, train, test, a) -> dict:
    import bmczoo as bmc

    spec = CONFIGS[config]
    prior = bmc.priors.NormalWishart(**spec["prior"])
    likelihood = getattr(bmc.likelihoods, spec["likelihood"])()
    biases = bmc.offsets.Biases(**spec["biases"]) if "biases" in spec else True
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=a.K,
        prior=prior,
        likelihood=likelihood,
        biases=biases,
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=1,
        num_chains=a.chains,
        seed=a.seed,
        progress_bar=False,
        # the test entries' predictions accumulate over the draws: no factor draws needed
        # (at K = 32 with four chains they exceed store_factors="auto"'s budget)
        predict=(test.rows, test.cols),
    )
    seconds = time.perf_counter() - t0
    out = {
        "rmse": fit.rmse(test),
        "seconds": seconds,
        "seconds_per_iteration": seconds / (a.warmup + a.samples),
    }
    if fit.timings:
        out["sweep_seconds"] = float(fit.timings.get("sweep_seconds", float("nan")))
        out["compile_seconds"] = float(fit.timings.get("compile_seconds", float("nan")))
    del fit
    return out


# --------------------------------------------------------------------------- myFM
def _scipy(f):
    return f.to_scipy().tocsr().astype(np.float64)


def _id_block(n: int, present: np.ndarray):
    """One-hot ids, all-zero rows for ids without training ratings."""
    import scipy.sparse as sps

    idx = np.flatnonzero(present)
    return sps.csr_matrix((np.ones(idx.size), (idx, idx)), shape=(n, n))


def _implicit(train, axis: str):
    from bmczoo.data import implicit_features

    return _scipy(implicit_features(train, axis))


def _side_blocks(train, use_side: bool, use_implicit: bool):
    """Per side: the block matrix and its group sizes (id, side groups, implicit)."""
    import scipy.sparse as sps

    m1, m2 = train.shape
    out = []
    for axis, m, feats, present in (
        ("rows", m1, train.row_features, train.row_counts > 0),
        ("cols", m2, train.col_features, train.col_counts > 0),
    ):
        parts, groups = [_id_block(m, present)], [m]
        if use_side:
            parts.append(_scipy(feats))
            groups += [k for _, k in feats.group_sizes()]
        if use_implicit:
            imp = _implicit(train, axis)
            parts.append(imp)
            groups.append(imp.shape[1])
        out.append((sps.hstack(parts, format="csr"), groups))
    return out


def run_myfm(config: str, train, test, a) -> dict:
    import myfm

    use_side, use_implicit, grouped, ordered = MYFM_CONFIGS[config]
    t0 = time.perf_counter()
    (U, gu), (V, gv) = _side_blocks(train, use_side, use_implicit)
    blocks = [
        myfm.RelationBlock(train.rows.astype(np.int64), U),
        myfm.RelationBlock(train.cols.astype(np.int64), V),
    ]
    test_blocks = [
        myfm.RelationBlock(test.rows.astype(np.int64), U),
        myfm.RelationBlock(test.cols.astype(np.int64), V),
    ]
    kw = {"X_rel": blocks, "n_iter": a.warmup + a.samples, "n_kept_samples": a.samples}
    if grouped:
        kw["group_shapes"] = gu + gv
    # myFM draws a tqdm bar on stderr in every fit (no option turns it off)
    with contextlib.redirect_stderr(io.StringIO()):
        pred = _myfm_fit_predict(myfm, a, train, blocks, test_blocks, kw, ordered)
    seconds = time.perf_counter() - t0
    return {
        "rmse": rmse(np.clip(pred, LO, HI), test.values),
        "seconds": seconds,
        "seconds_per_iteration": seconds / (a.warmup + a.samples),
        "features": {
            "user_block": list(U.shape),
            "movie_block": list(V.shape),
            "group_shapes": kw.get("group_shapes"),
        },
    }


def _myfm_fit_predict(myfm, a, train, blocks, test_blocks, kw, ordered):
    if ordered:
        levels = np.unique(train.values)
        if not np.array_equal(levels, np.arange(1, levels.size + 1)):
            raise ValueError(f"ordered probit needs integer levels 1..L, got {levels}")
        fm = myfm.MyFMOrderedProbit(rank=a.K, random_seed=a.seed)
        fm.fit(None, (train.values - 1).astype(np.int64), **kw)
        pred = 1.0 + fm.predict_proba(None, test_blocks) @ np.arange(levels.size)
    else:
        fm = myfm.MyFMRegressor(rank=a.K, random_seed=a.seed)
        fm.fit(None, np.asarray(train.values, dtype=np.float64), **kw)
        pred = fm.predict(None, test_blocks)
    return pred


# --------------------------------------------------------------------------- SMURFF
def run_smurff(config: str, train, test, a) -> dict:
    import scipy.sparse as sps
    import smurff

    use_side, use_implicit = SMURFF_CONFIGS[config]
    shape = train.shape
    mean = float(np.mean(train.values))
    t0 = time.perf_counter()
    ytr = sps.coo_matrix(
        (np.asarray(train.values, np.float64) - mean, (train.rows, train.cols)), shape=shape
    )
    yte = sps.coo_matrix(
        (np.asarray(test.values, np.float64) - mean, (test.rows, test.cols)), shape=shape
    )
    macau = use_side or use_implicit
    session = smurff.TrainSession(
        priors=["macau", "macau"] if macau else ["normal", "normal"],
        num_latent=a.K,
        burnin=a.warmup,
        nsamples=a.samples,
        seed=a.seed,
        verbose=0,
    )
    session.addTrainAndTest(ytr, yte, smurff.AdaptiveNoise(1.0, 10.0))
    if macau:
        for mode, (feats, axis) in enumerate(
            ((train.row_features, "rows"), (train.col_features, "cols"))
        ):
            parts = ([_scipy(feats)] if use_side else []) + (
                [_implicit(train, axis)] if use_implicit else []
            )
            session.addSideInfo(mode, sps.hstack(parts, format="csr"), direct=True)
    with contextlib.redirect_stderr(io.StringIO()):  # its tqdm bar
        predictions = session.run()
    seconds = time.perf_counter() - t0
    pred = np.clip(np.array([p.pred_avg for p in predictions]) + mean, LO, HI)
    y = np.array([p.val for p in predictions]) + mean
    return {
        "rmse": rmse(pred, y),
        "n_scored": int(y.size),
        "seconds": seconds,
        "seconds_per_iteration": seconds / (a.warmup + a.samples),
    }


# --------------------------------------------------------------------------- reporting
def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            p: _version(p)
            for p in ("bmczoo", "jax", "jaxlib", "numpyro", "numpy", "scipy", "myfm", "smurff")
        },
    }


def _fmt(x, f="{:.4f}"):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f.format(x)


def tables(res: dict) -> str:
    rows = res["results"]
    splits = [s for s in res["settings"]["splits"]]
    models = list(dict.fromkeys((r["model"], r["config"]) for r in rows))
    get = {(r["model"], r["config"], r["split"]): r for r in rows}
    lines = [
        f"Test RMSE, K = {res['settings']['K']}, {res['settings']['warmup']} + {res['settings']['samples']} "
        "iterations",
        "",
        "| model | configuration | " + " | ".join(splits) + " |",
        "|---|---|" + "---|" * len(splits),
    ]
    for m, c in models:
        lines.append(
            f"| {m} | {c} | "
            + " | ".join(_fmt(get.get((m, c, s), {}).get("rmse")) for s in splits)
            + " |"
        )
    lines += [
        "",
        "Seconds per fit (wall clock) and per iteration (bmczoo: its sweeps alone, "
        "all chains as one sweep; peers: fit / iterations)",
        "",
        "| model | configuration | "
        + " | ".join(f"s / fit {s}" for s in splits)
        + " | s / iteration |",
        "|---|---|" + "---|" * (len(splits) + 1),
    ]
    for m, c in models:
        per = [get[(m, c, s)] for s in splits if (m, c, s) in get]
        it = [r.get("sweep_seconds", r["seconds_per_iteration"]) for r in per]
        lines.append(
            f"| {m} | {c} | "
            + " | ".join(_fmt(get.get((m, c, s), {}).get("seconds"), "{:.0f}") for s in splits)
            + f" | {_fmt(float(np.median(it)) if it else None, '{:.3f}')} |"
        )
    cold = res.get("cold_start")
    if cold:
        lines += [
            "",
            f"Cold start: {cold['n_cold_users']} users without training ratings "
            f"({cold['n_test']} test ratings), README split",
            "",
            "| model | configuration | test RMSE (cold users) | s / fit |",
            "|---|---|---|---|",
        ]
        for r in cold["results"]:
            lines.append(
                f"| {r['model']} | {r['config']} | {_fmt(r['rmse'])} | {_fmt(r.get('seconds'), '{:.0f}')} |"
            )
    return "\n".join(lines)


def _parse_list(value: str, allowed, what: str, p) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad:
        p.error(f"unknown {what} {', '.join(bad)}; choose from {', '.join(allowed)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data", default=str(DEFAULT_DATA), help="the ML-100K folder (u.data, u.user, u.item)"
    )
    p.add_argument(
        "--splits", default=",".join(SPLITS), help=f"comma-separated, of {', '.join(SPLITS)}"
    )
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"bmczoo, of {', '.join(CONFIGS)}")
    p.add_argument(
        "--myfm-configs", default=",".join(MYFM_CONFIGS), help=f"of {', '.join(MYFM_CONFIGS)}"
    )
    p.add_argument(
        "--smurff-configs", default=",".join(SMURFF_CONFIGS), help=f"of {', '.join(SMURFF_CONFIGS)}"
    )
    p.add_argument("--K", type=int, default=10, help="rank (default 10; 32 as the larger option)")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument(
        "--seed", type=int, default=0, help="sampler seed, README split seed and cold users' seed"
    )
    p.add_argument("--cold-fraction", type=float, default=0.1)
    p.add_argument("--no-cold", action="store_true", help="skip the cold-start table")
    p.add_argument(
        "--cold-configs",
        default=",".join(COLD_CONFIGS),
        help=f"bmczoo configurations of the cold-start table (default {', '.join(COLD_CONFIGS)})",
    )
    p.add_argument("--no-peers", action="store_true", help="skip myFM and SMURFF")
    p.add_argument(
        "--quick", action="store_true", help="smoke test: 10 burn-in + 20 kept iterations"
    )
    p.add_argument("--out", required=True, help="results JSON (rewritten after every fit)")
    a = p.parse_args(argv)
    if a.quick:
        a.warmup, a.samples = 10, 20
    splits = _parse_list(a.splits, SPLITS, "split(s)", p)
    configs = _parse_list(a.configs, CONFIGS, "bmczoo configuration(s)", p)
    myfm_configs = _parse_list(a.myfm_configs, MYFM_CONFIGS, "myFM configuration(s)", p)
    smurff_configs = _parse_list(a.smurff_configs, SMURFF_CONFIGS, "SMURFF configuration(s)", p)
    cold_configs = _parse_list(a.cold_configs, CONFIGS, "cold-start configuration(s)", p)

    import bmczoo as bmc

    bmc.enable_compilation_cache()
    peers = []
    if not a.no_peers:
        for mod, label, fn, cfgs in (
            ("myfm", "myFM", run_myfm, myfm_configs),
            ("smurff", "SMURFF", run_smurff, smurff_configs),
        ):
            if importable(mod):
                peers.append((label, fn, cfgs))
            else:
                print(
                    f"{label}: skipped ({mod} not importable; pip install {mod} to compare)",
                    flush=True,
                )
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    if data.row_features is None or data.col_features is None:
        print(f"side_information: {a.data} has no u.user / u.item side tables", file=sys.stderr)
        return 2
    res = {
        "machine": machine(),
        "load_start": list(os.getloadavg()),
        "settings": {
            "data": a.data,
            "splits": splits,
            "K": a.K,
            "warmup": a.warmup,
            "samples": a.samples,
            "chains": a.chains,
            "seed": a.seed,
            "cold_fraction": None if a.no_cold else a.cold_fraction,
            "item_bias_shrinkage": ITEM_BIAS_SHRINKAGE,
            "quick": a.quick,
            "row_features": list(data.row_features.group_sizes()),
            "col_features": list(data.col_features.group_sizes()),
        },
        "results": [],
    }
    out = Path(a.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        res["load_end"] = list(os.getloadavg())
        out.write_text(json.dumps(res, indent=1))

    print(
        f"ML-100K {data.shape}; splits {', '.join(splits)}; K={a.K}; {a.warmup} + {a.samples} iterations; "
        f"bmczoo {a.chains} chains; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    jobs = [("bmczoo", run_bmczoo, configs)] + peers
    for s in splits:
        train, test = get_split(data, s, a.seed)
        for model, fn, cfgs in jobs:
            for c in cfgs:
                r = {
                    "split": s,
                    "model": model,
                    "config": c,
                    "n_train": train.n,
                    "n_test": test.n,
                    "load_before": os.getloadavg()[0],
                    **fn(c, train, test, a),
                }
                res["results"].append(r)
                save()
                print(
                    f"{s:>6} {model:>7} {c:>24}  RMSE {r['rmse']:.4f}  {r['seconds']:.0f} s  "
                    f"load {r['load_before']:.1f}",
                    flush=True,
                )

    if not a.no_cold:
        train, test = get_split(data, "readme", a.seed)
        ctrain, ctest, cold = cold_start_split(train, test, a.cold_fraction, a.seed)
        res["cold_start"] = {
            "split": "readme",
            "n_cold_users": int(cold.size),
            "cold_users": cold.tolist(),
            "n_train": ctrain.n,
            "n_test": ctest.n,
            "results": [],
        }
        for name, v in item_baselines(ctrain, ctest, ITEM_BIAS_SHRINKAGE).items():
            res["cold_start"]["results"].append({"model": "baseline", "config": name, "rmse": v})
            print(f"  cold {name}: RMSE {v:.4f}", flush=True)
        cold_jobs = [("bmczoo", run_bmczoo, cold_configs)]
        cold_jobs += [
            (label, fn, COLD_MYFM if label == "myFM" else COLD_SMURFF) for label, fn, _ in peers
        ]
        for model, fn, cfgs in cold_jobs:
            for c in cfgs:
                r = {
                    "model": model,
                    "config": c,
                    "load_before": os.getloadavg()[0],
                    **fn(c, ctrain, ctest, a),
                }
                res["cold_start"]["results"].append(r)
                save()
                print(f"  cold {model} {c}: RMSE {r['rmse']:.4f}  {r['seconds']:.0f} s", flush=True)
    save()
    print("\n" + tables(res))
    print(f"\nload average at start {res['load_start']}, at end {res['load_end']}; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time as per-rating context on MovieLens 100K: bmczoo's best members with and without
the context offset against myFM with the same side, implicit and time features, in one run.

    python benchmarks/time_context.py --out time_context.json
    python benchmarks/time_context.py --splits readme --K 10 --out readme10.json
    python benchmarks/time_context.py --quick --out quick.json        # smoke test: 10 + 20
    python benchmarks/time_context.py --merge u1.json u3.json readme.json  # one table

**Splits** (``--splits``): the official folds ``u1`` and ``u3`` and the README's 80/20
split (``readme``: ``data.split(test_fraction=0.2, seed=0)``); ranks ``--K`` (10 and 32);
``--warmup`` + ``--samples`` iterations (100 + 400); bmczoo's ``--chains`` (4) chains, the
kept draws of all averaged.  Nothing is chosen on the test ratings.

**Time features** (:func:`bmczoo.data.time_features`, built once on all the ratings'
timestamps, then split with the ratings: a rating's time is known when it is predicted):
``time_bin`` (30 equal-count bins), ``item_time_bin`` (the item x bin pair),
``user_day`` (the user x day pair) and ``user_dev`` (timeSVD++'s ``dev_u(t)`` in the
user's column); ``--time-groups`` chooses a subset for both libraries.

**bmczoo** (``--configs``): ``NormalWishart(row_features=True, col_features=True,
implicit=True)`` rows with ``biases=True`` (side features through the Macau link,
SVD++-style implicit feedback on both sides: the "flipped" form), the learned-noise
Gaussian (``side+implicit``) or the ordered probit (``side+implicit+ordered``); ``+time``
adds ``context=Context()`` (every time group with its own gamma precision).

**myFM** (when importable): ``MyFMRegressor`` / ``MyFMOrderedProbit`` with one relation
block per side (one-hot id, side features, implicit feedback; as in
``side_information.py``) and, with ``+time``, the time features as the per-rating matrix
``X``; ``group_shapes`` with one group per time group, id block, side feature group and
implicit block.  ``+date`` is myFM's own time feature instead (its ML-1M and ML-10M
examples): the rating's calendar day, one-hot over the training days, as one group.
Unlike bmczoo's context offset (linear terms), myFM also gives each time feature a factor
vector (its second-order interactions).

Prints a markdown table of test RMSE per split and rank, what time adds to each library,
and bmczoo's lead (myFM's best RMSE minus bmczoo's best), and writes every number with the
machine to ``--out`` after each fit.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _peers import importable  # noqa: E402
from side_information import DEFAULT_DATA, HI, LO, _scipy, _side_blocks, get_split, machine, rmse  # noqa: E402

SPLITS = ("u1", "u3", "readme")
CONFIGS = (
    "side+implicit",
    "side+implicit+time",
    "side+implicit+ordered",
    "side+implicit+ordered+time",
)
MYFM_CONFIGS = (
    "implicit+side",
    "implicit+side+time",
    "oprobit+implicit+side",
    "oprobit+implicit+side+time",
    "implicit+side+date",
    "oprobit+implicit+side+date",
)


def run_bmczoo(config: str, train, test, K: int, a) -> dict:
    import bmczoo as bmc

    prior = bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True)
    lik = bmc.likelihoods.OrderedProbit() if "ordered" in config else bmc.likelihoods.LearnedNoise()
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=K,
        prior=prior,
        likelihood=lik,
        biases=True,
        context=config.endswith("+time"),
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=1,
        num_chains=a.chains,
        seed=a.seed,
        progress_bar=False,
        test=test,
        store_factors=False,
    )
    out = {"rmse": fit.rmse(test), "seconds": time.perf_counter() - t0}
    out["sweep_seconds"] = float(fit.timings.get("sweep_seconds", float("nan")))
    return out


def _time_block(data):
    ctx = data.context
    return _scipy(ctx), [k for _, k in ctx.group_sizes()]


def _date_block(train, test):
    """myFM's own time feature (its ML-1M / ML-10M examples): the rating's calendar day,
    one-hot over the training days, a test day not among them in a column of its own."""
    import scipy.sparse as sp

    days = np.unique(train.timestamps // 86_400)

    def one_hot(data):
        d = data.timestamps // 86_400
        pos = np.searchsorted(days, d)
        col = np.where((pos < days.size) & (days[np.minimum(pos, days.size - 1)] == d), pos + 1, 0)
        return sp.csr_matrix((np.ones(data.n), (np.arange(data.n), col)), (data.n, days.size + 1))

    return one_hot(train), one_hot(test), [days.size + 1]


def run_myfm(config: str, train, test, K: int, a) -> dict:
    import myfm

    t0 = time.perf_counter()
    (U, gu), (V, gv) = _side_blocks(train, True, True)
    blocks = [
        myfm.RelationBlock(train.rows.astype(np.int64), U),
        myfm.RelationBlock(train.cols.astype(np.int64), V),
    ]
    test_blocks = [
        myfm.RelationBlock(test.rows.astype(np.int64), U),
        myfm.RelationBlock(test.cols.astype(np.int64), V),
    ]
    X_train = X_test = None
    groups = gu + gv
    if config.endswith("+date"):
        X_train, X_test, gt = _date_block(train, test)
        groups = gt + groups
    if config.endswith("+time"):
        (X_train, gt), (X_test, _) = _time_block(train), _time_block(test)
        groups = gt + groups  # myFM orders the columns: X, then the relation blocks
    kw = {
        "X_rel": blocks,
        "n_iter": a.warmup + a.samples,
        "n_kept_samples": a.samples,
        "group_shapes": groups,
    }
    with contextlib.redirect_stderr(io.StringIO()):  # myFM's tqdm bar
        if config.startswith("oprobit"):
            fm = myfm.MyFMOrderedProbit(rank=K, random_seed=a.seed)
            fm.fit(X_train, (train.values - 1).astype(np.int64), **kw)
            proba = fm.predict_proba(X_test, test_blocks)
            pred = 1.0 + proba @ np.arange(proba.shape[1])
        else:
            fm = myfm.MyFMRegressor(rank=K, random_seed=a.seed)
            fm.fit(X_train, np.asarray(train.values, np.float64), **kw)
            pred = fm.predict(X_test, test_blocks)
    seconds = time.perf_counter() - t0
    return {"rmse": rmse(np.clip(pred, LO, HI), test.values), "seconds": seconds}


def tables(res: dict) -> str:
    rows = res["results"]
    keys = list(dict.fromkeys((r["split"], r["K"]) for r in rows))
    models = list(dict.fromkeys((r["model"], r["config"]) for r in rows))
    get = {(r["model"], r["config"], r["split"], r["K"]): r["rmse"] for r in rows}
    head = " | ".join(f"{s} K={k}" for s, k in keys)
    lines = [
        f"Test RMSE, {res['settings']['warmup']} + {res['settings']['samples']} iterations",
        "",
    ]
    lines += [f"| model | configuration | {head} |", "|---|---|" + "---|" * len(keys)]
    for m, c in models:
        vals = [get.get((m, c, s, k)) for s, k in keys]
        lines.append(
            f"| {m} | {c} | " + " | ".join("—" if v is None else f"{v:.4f}" for v in vals) + " |"
        )
    lines += ["", f"| | {head} |", "|---|" + "---|" * len(keys)]
    for label, fn in (
        ("time adds, bmczoo (best without - best with)", lambda s, k: _gain(get, "bmczoo", s, k)),
        ("time adds, myFM", lambda s, k: _gain(get, "myFM", s, k)),
        ("lead (myFM's best - bmczoo's best)", lambda s, k: _lead(get, s, k)),
    ):
        vals = [fn(s, k) for s, k in keys]
        lines.append(
            f"| {label} | " + " | ".join("—" if v is None else f"{v:+.4f}" for v in vals) + " |"
        )
    return "\n".join(lines)


def _best(get, model, s, k, timed=None):
    v = [
        r
        for (m, c, s2, k2), r in get.items()
        if m == model
        and s2 == s
        and k2 == k
        and (timed is None or c.endswith(("+time", "+date")) == timed)
    ]
    return min(v) if v else None


def _gain(get, model, s, k):
    a, b = _best(get, model, s, k, False), _best(get, model, s, k, True)
    return None if a is None or b is None else a - b


def _lead(get, s, k):
    a, b = _best(get, "myFM", s, k), _best(get, "bmczoo", s, k)
    return None if a is None or b is None else a - b


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(DEFAULT_DATA), help="the ML-100K folder")
    p.add_argument("--splits", default=",".join(SPLITS))
    p.add_argument("--K", default="10,32", help="comma-separated ranks (default 10,32)")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--myfm-configs", default=",".join(MYFM_CONFIGS))
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--samples", type=int, default=400)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--time-groups",
        default=",".join(("time_bin", "item_time_bin", "user_day", "user_dev")),
        help="the time features both libraries get (default: all four groups)",
    )
    p.add_argument("--quick", action="store_true", help="smoke test: 10 + 20 iterations")
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="RUN.json",
        help="print the tables of the results of several earlier runs (their --out files) "
        "together, and run nothing",
    )
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.merge:
        runs = [json.loads(Path(f).read_text()) for f in a.merge]
        merged = {**runs[0], "results": [r for run in runs for r in run["results"]]}
        for f, run in zip(a.merge, runs):
            m = run["machine"]
            print(f"{f}: {m.get('cpu', 'CPU not recorded')}, {m['cpu_count']} CPUs, {m['date']}")
        print(tables(merged))
        return 0
    if a.out is None:
        p.error("--out is required (unless --merge)")
    if a.quick:
        a.warmup, a.samples = 10, 20
    splits = [s for s in a.splits.split(",") if s]
    ranks = [int(k) for k in a.K.split(",") if k]
    configs = [c for c in a.configs.split(",") if c]
    myfm_configs = [c for c in a.myfm_configs.split(",") if c]
    for bad, allowed in (
        (set(splits) - set(SPLITS), SPLITS),
        (set(configs) - set(CONFIGS), CONFIGS),
        (set(myfm_configs) - set(MYFM_CONFIGS), MYFM_CONFIGS),
    ):
        if bad:
            p.error(f"unknown {', '.join(sorted(bad))}; choose from {', '.join(allowed)}")

    import bmczoo as bmc
    from bmczoo.data import time_features

    bmc.enable_compilation_cache()
    jobs = [("bmczoo", run_bmczoo, configs)]
    if importable("myfm"):
        jobs.append(("myFM", run_myfm, myfm_configs))
    else:
        print("myFM: skipped (pip install myfm to compare)", flush=True)
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    data = data.with_context(time_features(data, a.time_groups.split(",")))
    res = {
        "machine": machine(),
        "load_start": list(os.getloadavg()),
        "settings": {
            **{k: v for k, v in vars(a).items() if k != "out"},
            "time_groups": list(data.context.group_sizes()),
        },
        "results": [],
    }
    out = Path(a.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    for s in splits:
        train, test = get_split(data, s, a.seed)
        for K in ranks:
            for model, fn, cfgs in jobs:
                for c in cfgs:
                    r = {
                        "split": s,
                        "K": K,
                        "model": model,
                        "config": c,
                        "load_before": os.getloadavg()[0],
                    }
                    r.update(fn(c, train, test, K, a))
                    res["results"].append(r)
                    res["load_end"] = list(os.getloadavg())
                    out.write_text(json.dumps(res, indent=1))
                    print(
                        f"{s:>6} K={K:<3} {model:>7} {c:>28}  RMSE {r['rmse']:.4f}  {r['seconds']:.0f} s",
                        flush=True,
                    )
    print()
    print(tables(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Implicit feedback, top-N (issue 57, item 4): bmczoo's one-class likelihood against
``implicit``'s ALS and BPR, cornac's HPF and most-popular on MovieLens 100K, in one run.

    python benchmarks/implicit_topn.py                                  # the full run
    python benchmarks/implicit_topn.py --quick                          # smaller grids, fewer sweeps
    python benchmarks/implicit_topn.py --merge benchmarks/results/implicit_topn.json  # tables only
    python benchmarks/implicit_topn.py --retime benchmarks/results/implicit_topn.json # timing again

**Data.** ``u.data`` through :func:`bmczoo.datasets.load_movielens`; every rating is an
interaction (strength 1, the star value dropped).  ``split_per_user(0.2, seed=0)`` holds out
20% of each user's pairs (the test pairs); the validation split is carved from the training
pairs by the same rule (``split_per_user(0.2, seed=1)``).  K = 32 for every factor model.

**Protocol.** Each method's hyper-parameters are chosen on the validation split (the best
NDCG@10 over its grid), then the method is refitted on all the training pairs with them and
scored on the test pairs: nothing is chosen on the test pairs.  Every method is scored by
the same code, :func:`bmczoo.evaluation.ranking_metrics` (a peer through a small adapter
that ranks its own scores): each user's candidates are the items without a training pair,
the relevant items the user's held-out pairs; P@10, R@20 (bmczoo's capped recall,
``hits / min(k, P)``), NDCG@10, MAP@10 and AUC, the means over the users with a held-out
pair.

**Methods.**

* bmczoo: ``OneClass(alpha, c0, lam)`` with the inverse-gamma and discrete priors and the
  Normal-Wishart rows, Gibbs, one chain, ``--warmup`` + ``--samples`` sweeps kept every
  ``--thinning`` (default 50 + 150, every 5th: 30 factor draws), ranked by the posterior
  mean of ``M N^T`` (``fit.recommend(by="mean")``); grid ``--alphas`` x ``--lams`` (``c0``
  from ``--c0s``).  Its time per sweep is the fit's own ``run_stats()["sweep_seconds"]``
  (the sweeps alone, after compilation).
* implicit ``AlternatingLeastSquares`` (confidence ``1 + alpha r``, the default conjugate
  gradient solver), ``--als-iterations`` (15) iterations, grid ``--als-regs`` x
  ``--als-alphas``; ``num_threads=1`` and one BLAS thread (``OPENBLAS_NUM_THREADS=1`` and
  threadpoolctl, as implicit recommends): one process on one core.  Seconds per
  iteration: the median of implicit's own per-iteration times (its fit callback).  The
  chosen member is also timed with the exact Cholesky solver (``use_cg=False``) and with
  implicit's default threads (``num_threads=0``, every core) for reference.
* implicit ``BayesianPersonalizedRanking`` (``--bpr-iterations``, grid learning rate x
  regularization), cornac ``HPF`` (hierarchical or not, ``--hpf-iterations``), and
  most-popular (training counts).  cornac's WMF needs TensorFlow and is skipped where it
  does not import.

**bmczoo's member** (:func:`select_member`): each member's parameters are its best
validation NDCG@10; among the members, the one-standard-error rule: those within one
paired standard error (the per-user difference on the same validation users) of the best
member's validation NDCG@10 are tied, and the fastest of them is bmczoo's member.

**Check** (issue 57): bmczoo's member at least matches the best peer's test NDCG@10 and
P@10, and its sweep takes at most 1.5x an ALS iteration (one thread) at K = 32.

Prints markdown tables and writes every number with the machine (its CPU model) to
``--out`` after each fit.
"""

from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # implicit asks for one BLAS thread (its warning)

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _peers import cpu_model, importable  # noqa: E402

DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "ml-100k" / "u.data"
DEFAULT_OUT = HERE / "results" / "implicit_topn.json"
PRIORS = ("inverse-gamma", "discrete", "normal-wishart")


def _version(pkg: str):
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "env": {v: os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "BMCZOO_NATIVE")},
        "versions": {
            p: _version(p)
            for p in ("bmczoo", "jax", "jaxlib", "numpyro", "numpy", "implicit", "cornac")
        },
    }


# --------------------------------------------------------------------------- scoring
class ScoreFit:
    """A peer's scores as a fit that :func:`bmczoo.evaluation.ranking_metrics` can rank:
    ``shape`` and ``recommend`` (the training pairs excluded, item -1 past the last
    candidate, ties in item order, like bmczoo's own)."""

    def __init__(self, score_fn, shape):
        self.score_fn = score_fn  # users -> (len(users), m2) scores
        self.shape = shape

    def recommend(self, users, n=10, exclude_seen=True, seen=None, **_):
        users = np.asarray(users, np.int64)
        sc = np.array(self.score_fn(users), np.float64)
        if exclude_seen:
            rv = seen.row_view
            for k, u in enumerate(users):
                sc[k, rv.index[rv.indptr[u] : rv.indptr[u + 1]]] = -np.inf
        order = np.argsort(-sc, axis=1, kind="stable")[:, :n]
        top = np.take_along_axis(sc, order, axis=1)
        order[~np.isfinite(top)] = -1
        return order, top


def metrics(fit, train, test, per_user: dict | None = None) -> dict:
    """The benchmark's metrics (means over the users with a held-out pair); with
    ``per_user`` (a dict) also each user's NDCG@10 in ``per_user["ndcg10"]``."""
    from bmczoo._ranking import per_user_ranking, ranking_summary

    _, v10 = per_user_ranking(fit, train, test, k=10)
    m10 = ranking_summary(v10, 10)
    m20 = ranking_summary(per_user_ranking(fit, train, test, k=20)[1], 20)
    if per_user is not None:
        per_user["ndcg10"] = v10[:, 2]
    return {
        "p10": m10["precision"],
        "r20": m20["recall"],
        "ndcg10": m10["ndcg"],
        "map10": m10["map"],
        "auc": m10["auc"],
        "users": m10["users"],
    }


def select_member(members: dict) -> dict:
    """bmczoo's member by the one-standard-error rule on the validation split: the
    members whose validation NDCG@10 is within one standard error of the best's (the
    paired standard error of the per-user difference, the same users) are tied, and the
    fastest of them (seconds per sweep on validation) is chosen.

    ``members``: name -> ``{"ndcg10": mean, "per_user": per-user NDCG@10, "seconds":
    per sweep}`` of each member's chosen parameters."""
    top = max(members, key=lambda m: members[m]["ndcg10"])
    rows = {}
    for m, r in members.items():
        d = members[top]["per_user"] - r["per_user"]
        d = d[np.isfinite(d)]
        se = float(np.std(d, ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
        diff = float(members[top]["ndcg10"] - r["ndcg10"])
        rows[m] = {
            "val_ndcg10": r["ndcg10"],
            "behind_best": diff,
            "paired_se": se,
            "tied": diff <= se,
            "sweep_seconds": r["seconds"],
        }
    tied = [m for m in rows if rows[m]["tied"]]
    chosen = min(tied, key=lambda m: rows[m]["sweep_seconds"])
    return {"best_on_validation": top, "chosen": chosen, "members": rows}


def _csr(data):
    import scipy.sparse as sp

    m1, m2 = data.shape
    return sp.csr_matrix(
        (np.ones(data.n, np.float32), (np.asarray(data.rows), np.asarray(data.cols))), (m1, m2)
    )


# --------------------------------------------------------------------------- methods
def _moves(params: dict, a) -> dict:
    """The column-move options of the inverse-gamma and discrete members: ``params["moves"]``
    or ``--column-moves-every`` (0: off), else the prior's own schedule."""
    every = params.get("moves", a.column_moves_every)
    if every is None or params["prior"] == "normal-wishart":
        return {}
    return {"column_moves": False} if every == 0 else {"column_moves_every": int(every)}


def fit_bmczoo(train, params: dict, a) -> tuple[object, dict]:
    import bmczoo as bmc

    prior = {
        "inverse-gamma": lambda: bmc.priors.InverseGamma(),
        "discrete": lambda: bmc.priors.Discrete(),
        "normal-wishart": lambda: bmc.priors.NormalWishart(),
    }[params["prior"]]()
    lik = bmc.likelihoods.OneClass(alpha=params["alpha"], c0=params["c0"], lam=params["lam"])
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=a.K,
        prior=prior,
        likelihood=lik,
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=a.thinning,
        num_chains=1,
        seed=a.seed,
        progress_bar=False,
        store_factors=True,
        **_moves(params, a),
    )
    st = fit.run_stats()
    return fit, {
        "fit_seconds": time.perf_counter() - t0,
        "iter_seconds": float(st.get("sweep_seconds", float("nan"))),
        "compile_seconds": float(st.get("compile_seconds", float("nan"))),
        "num_kept": int(st.get("num_kept", 0)),
    }


def fit_als(train, params: dict, a) -> tuple[object, dict]:
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    per_iter = []
    model = AlternatingLeastSquares(
        factors=a.K,
        regularization=params["reg"],
        alpha=params["alpha"],
        iterations=a.als_iterations,
        use_cg=params.get("use_cg", True),
        num_threads=params.get("threads", 1),
        random_state=a.seed,
    )
    t0 = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        model.fit(_csr(train), show_progress=False, callback=lambda it, s, loss: per_iter.append(s))
    U, V = np.asarray(model.user_factors), np.asarray(model.item_factors)
    return ScoreFit(lambda u: U[u] @ V.T, train.shape), {
        "fit_seconds": time.perf_counter() - t0,
        "iter_seconds": float(np.median(per_iter)),
    }


def fit_bpr(train, params: dict, a) -> tuple[object, dict]:
    from implicit.cpu.bpr import BayesianPersonalizedRanking

    model = BayesianPersonalizedRanking(
        factors=a.K,
        learning_rate=params["lr"],
        regularization=params["reg"],
        iterations=a.bpr_iterations,
        num_threads=1,
        random_state=a.seed,
    )
    t0 = time.perf_counter()
    model.fit(_csr(train), show_progress=False)
    sec = time.perf_counter() - t0
    U, V = np.asarray(model.user_factors), np.asarray(model.item_factors)  # bias column inside
    return ScoreFit(lambda u: U[u] @ V.T, train.shape), {
        "fit_seconds": sec,
        "iter_seconds": sec / a.bpr_iterations,
    }


def fit_hpf(train, params: dict, a) -> tuple[object, dict]:
    import cornac

    m1, m2 = train.shape
    r, c = np.asarray(train.rows), np.asarray(train.cols)
    ds = cornac.data.Dataset.from_uir(
        list(zip(r.astype(str), c.astype(str), np.ones(train.n))), seed=a.seed
    )
    model = cornac.models.HPF(
        k=a.K, max_iter=a.hpf_iterations, hierarchical=params["hierarchical"], seed=a.seed
    )
    t0 = time.perf_counter()
    model.fit(ds)
    sec = time.perf_counter() - t0
    # cornac's own indices -> ours; an item or user without a training pair scores lowest
    uix = np.full(m1, -1)
    iix = np.full(m2, -1)
    for k, v in ds.uid_map.items():
        uix[int(k)] = v
    for k, v in ds.iid_map.items():
        iix[int(k)] = v
    Theta, Beta = np.asarray(model.Theta), np.asarray(model.Beta)
    known = iix >= 0

    def scores(u):
        out = np.full((len(u), m2), -1e30)
        rows = uix[u]
        out[:, known] = np.where(
            rows[:, None] >= 0, Theta[np.maximum(rows, 0)] @ Beta[iix[known]].T, -1e30
        )
        return out

    return ScoreFit(scores, train.shape), {
        "fit_seconds": sec,
        "iter_seconds": sec / a.hpf_iterations,
    }


def fit_pop(train, params: dict, a) -> tuple[object, dict]:
    t0 = time.perf_counter()
    counts = np.bincount(np.asarray(train.cols), minlength=train.shape[1]).astype(np.float64)
    return ScoreFit(lambda u: np.tile(counts, (len(u), 1)), train.shape), {
        "fit_seconds": time.perf_counter() - t0,
        "iter_seconds": None,
    }


def grids(a) -> dict:
    fl = lambda s: [float(x) for x in s.split(",") if x]  # noqa: E731
    methods = {}
    methods["bmczoo"] = (
        fit_bmczoo,
        {
            f"OneClass, {p}": [
                {"prior": p, "alpha": al, "c0": c0, "lam": lam}
                for al in fl(a.alphas)
                for c0 in fl(a.c0s)
                for lam in fl(a.lams)
            ]
            for p in a.priors.split(",")
        },
    )
    peers = {}
    if importable("implicit"):
        peers["implicit ALS"] = (
            fit_als,
            [{"reg": r, "alpha": al} for r in fl(a.als_regs) for al in fl(a.als_alphas)],
        )
        peers["implicit BPR"] = (
            fit_bpr,
            [{"lr": lr, "reg": r} for lr in fl(a.bpr_lrs) for r in fl(a.bpr_regs)],
        )
    else:
        print("implicit: skipped (pip install implicit to compare)", flush=True)
    if importable("cornac"):
        peers["cornac HPF"] = (fit_hpf, [{"hierarchical": h} for h in (True, False)][: a.hpf_grid])
        if not importable("tensorflow"):
            print("cornac WMF: skipped (it needs TensorFlow, which does not import)", flush=True)
    else:
        print("cornac: skipped (pip install cornac to compare)", flush=True)
    peers["most popular"] = (fit_pop, [{}])
    return methods["bmczoo"], peers


# --------------------------------------------------------------------------- tables
def _f(x, fmt="{:.3f}"):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else fmt.format(x)


def _params(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items() if k != "prior") or "—"


def tables(res: dict) -> str:
    s = res["settings"]
    m = res["machine"]
    final = [r for r in res["results"] if r["stage"] == "test"]
    lines = [
        f"ML-100K, every rating an interaction, 20% of each user's pairs held out (seed 0), "
        f"K = {s['K']}; hyper-parameters chosen on a validation split (seed 1). "
        f"bmczoo: Gibbs, one chain, {s['warmup']} + {s['samples']} sweeps, every "
        f"{s['thinning']}th kept; ALS {s['als_iterations']} iterations. {m['cpu']}, "
        f"{m['cpu_count']} CPUs, {m['date']}.",
        "",
        "| method | chosen on validation | val NDCG@10 | P@10 | R@20 | NDCG@10 | MAP@10 | AUC "
        "| ms / iteration |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in final:
        t = r.get("iter_seconds")
        lines.append(
            f"| {r['method']} | {_params(r['params'])} | {_f(r.get('val_ndcg10'))} | {_f(r['p10'])} "
            f"| {_f(r['r20'])} | {_f(r['ndcg10'])} | {_f(r['map10'])} | {_f(r['auc'])} "
            f"| {_f(None if t is None else 1e3 * t, '{:.1f}')} |"
        )
    var = [r for r in res["results"] if r["stage"] == "variant"]
    if var:
        lines += [
            "",
            "The chosen members without column moves (the same parameters, not re-chosen):",
            "",
            "| member | P@10 | R@20 | NDCG@10 | ms / sweep |",
            "|---|---|---|---|---|",
        ]
        for r in var:
            lines.append(
                f"| {r['method']} | {_f(r['p10'])} | {_f(r['r20'])} | "
                f"{_f(r['ndcg10'])} | {_f(1e3 * r['iter_seconds'], '{:.1f}')} |"
            )
    extra = [r for r in res["results"] if r["stage"] == "timing"]
    if extra:
        lines += ["", "| implicit ALS timing (chosen member) | ms / iteration |", "|---|---|"]
        for r in extra:
            lines.append(f"| {r['method']} | {_f(1e3 * r['iter_seconds'], '{:.1f}')} |")
    pt = res.get("paired_timing")
    if pt:
        als = pt["implicit ALS"]["best"]
        rt = res.get("retimed")
        when = (
            f", timed again with --retime on {rt['machine']['date']} (load "
            f"{rt['load_start'][0]:.1f} at its start)"
            if rt
            else ""
        )
        lines += [
            "",
            f"Paired timing (chosen members and ALS in alternation, the fastest of "
            f"{len(pt['implicit ALS']['rounds'])} rounds{when}):",
            "",
            "| method | ms / iteration | / ALS iteration |",
            "|---|---|---|",
        ]
        for m, t in pt.items():
            lines.append(f"| {m} | {1e3 * t['best']:.1f} | {t['best'] / als:.2f} |")
    sel = res.get("selection")
    if sel:
        lines += [
            "",
            "bmczoo's member on validation (one-standard-error rule, the fastest of the tied):",
            "",
            "| member | val NDCG@10 | behind the best | paired SE | tied | ms / sweep |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in sel["members"].items():
            lines.append(
                f"| {name} | {r['val_ndcg10']:.4f} | {r['behind_best']:.4f} | "
                f"{r['paired_se']:.4f} | {'yes' if r['tied'] else 'no'} | "
                f"{1e3 * r['sweep_seconds']:.1f} |"
            )
    if res.get("check"):
        c = res["check"]
        lines += [
            "",
            f"Check: bmczoo's member ({c['bmczoo']}) against the best peer: "
            f"NDCG@10 {c['ndcg10']:.3f} vs {c['peer_ndcg10']:.3f} ({c['peer_ndcg10_by']}), "
            f"P@10 {c['p10']:.3f} vs {c['peer_p10']:.3f} ({c['peer_p10_by']}); sweep "
            f"{1e3 * c['sweep_seconds']:.1f} ms = {c['ratio']:.2f}x an ALS iteration "
            f"({1e3 * c['als_iter_seconds']:.1f} ms, one thread; "
            f"{'paired timing' if c.get('timing') == 'paired' else 'the test fits'}). "
            f"Accuracy: {'holds' if c['accuracy_holds'] else 'fails'}; "
            f"speed (<= 1.5x): {'holds' if c['speed_holds'] else 'fails'}.",
        ]
    return "\n".join(lines)


def check(res: dict) -> dict | None:
    final = [r for r in res["results"] if r["stage"] == "test"]
    ours = [r for r in final if r["model"] == "bmczoo"]
    peers = [r for r in final if r["model"] != "bmczoo"]
    als = [r for r in peers if r["method"] == "implicit ALS"]
    if not ours or not peers:
        return None
    chosen = res.get("selection", {}).get("chosen")
    if chosen is not None and any(r["method"] == chosen for r in ours):
        best = next(r for r in ours if r["method"] == chosen)
    else:  # a run before the selection rule: the best validation NDCG@10
        best = max(ours, key=lambda r: r["val_ndcg10"])
    pn = max(peers, key=lambda r: r["ndcg10"])
    pp = max(peers, key=lambda r: r["p10"])
    out = {
        "bmczoo": best["method"],
        "ndcg10": best["ndcg10"],
        "p10": best["p10"],
        "sweep_seconds": best["iter_seconds"],
        "peer_ndcg10": pn["ndcg10"],
        "peer_ndcg10_by": pn["method"],
        "peer_p10": pp["p10"],
        "peer_p10_by": pp["method"],
        "accuracy_holds": bool(best["ndcg10"] >= pn["ndcg10"] and best["p10"] >= pp["p10"]),
    }
    pt = res.get("paired_timing")
    if pt and best["method"] in pt and "implicit ALS" in pt:
        out["sweep_seconds"] = pt[best["method"]]["best"]
        out["als_iter_seconds"] = pt["implicit ALS"]["best"]
        out["ratio"] = out["sweep_seconds"] / out["als_iter_seconds"]
        out["speed_holds"] = bool(out["ratio"] <= 1.5)
        out["timing"] = "paired"
    elif als:
        out["als_iter_seconds"] = als[0]["iter_seconds"]
        out["ratio"] = best["iter_seconds"] / als[0]["iter_seconds"]
        out["speed_holds"] = bool(out["ratio"] <= 1.5)
    else:
        out["als_iter_seconds"], out["ratio"], out["speed_holds"] = (
            float("nan"),
            float("nan"),
            False,
        )
    return out


def paired_timing(res: dict, a, train, test, variants: bool) -> None:
    """Each chosen bmczoo member and the chosen ALS in alternation, the fastest of
    ``--timing-rounds`` rounds each (the least disturbed figure on a shared machine), into
    ``res["paired_timing"]``; with ``variants`` also the accuracy of the members with the
    column moves off (parameters not re-chosen)."""
    chosen = {r["method"]: r for r in res["results"] if r["stage"] == "test"}
    if not (a.timing_rounds and "implicit ALS" in chosen):
        return
    members = [m for m in chosen if chosen[m]["model"] == "bmczoo"]
    print(f"paired timing: {a.timing_rounds} rounds", flush=True)
    runs = {m: chosen[m]["params"] for m in members + ["implicit ALS"]}
    for m in members:  # the column moves off: what they cost at K = 32 (same parameters)
        if chosen[m]["params"]["prior"] != "normal-wishart" and a.column_moves_every != 0:
            runs[f"{m}, column moves off"] = {**chosen[m]["params"], "moves": 0}
    times = {m: [] for m in runs}
    for i in range(a.timing_rounds):
        for m, pr in runs.items():
            fn = fit_als if m == "implicit ALS" else fit_bmczoo
            fit, t = fn(train, pr, a)
            times[m].append(t["iter_seconds"])
            if variants and i == 0 and "moves" in pr:
                res["results"].append(
                    {
                        "model": "bmczoo",
                        "method": m,
                        "params": pr,
                        "stage": "variant",
                        **t,
                        **metrics(fit, train, test),
                    }
                )
    res["paired_timing"] = {m: {"rounds": t, "best": min(t)} for m, t in times.items()}


def retime(path: Path, a) -> int:
    """``--retime RUN.json``: the paired timing of an earlier run's chosen members and
    ALS again (its settings, the same splits), e.g. on a quieter machine; the file's
    ``paired_timing`` and check are replaced, the machine and load of the new timing kept
    in ``retimed``."""
    import bmczoo as bmc

    res = json.loads(path.read_text())
    for k, v in res["settings"].items():
        if k not in ("timing_rounds", "data"):
            setattr(a, k, v)
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    train, test = data.with_values(np.ones(data.n)).split_per_user(0.2, seed=0)
    load = list(os.getloadavg())
    paired_timing(res, a, train, test, variants=False)
    res["retimed"] = {"machine": machine(), "load_start": load, "rounds": a.timing_rounds}
    res["check"] = check(res)
    path.write_text(json.dumps(res, indent=1, default=float))
    print(tables(res))
    print(f"\nwritten {path}")
    return 0


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", default=str(DEFAULT_DATA))
    p.add_argument(
        "--out",
        help=f"JSON results (default {DEFAULT_OUT.relative_to(HERE.parent)}, "
        "with --quick implicit_topn_quick.json)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="RUN.json",
        help="print the tables of earlier runs (their --out files) and run nothing",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smaller grids and fewer sweeps (20 + 40, alpha 5 only, 2x2 ALS grid)",
    )
    p.add_argument("--K", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--priors", default=",".join(PRIORS))
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--samples", type=int, default=150)
    p.add_argument("--thinning", type=int, default=5)
    p.add_argument("--alphas", default="1,2,5,10")
    p.add_argument("--c0s", default="1")
    p.add_argument("--lams", default="1,2,4,8,16,32")
    p.add_argument(
        "--column-moves-every",
        type=int,
        default=None,
        help="the inverse-gamma and discrete members' column moves: every N sweeps "
        "(0: off; default: each prior's own schedule)",
    )
    p.add_argument(
        "--timing-rounds",
        type=int,
        default=3,
        help="rounds of the paired timing of the chosen members and ALS (0: none)",
    )
    p.add_argument("--als-iterations", type=int, default=15)
    p.add_argument("--als-regs", default="0.1,1,10,30,100")
    p.add_argument("--als-alphas", default="0.25,0.5,1,2,5,10")
    p.add_argument("--bpr-iterations", type=int, default=100)
    p.add_argument("--bpr-lrs", default="0.003,0.01,0.03")
    p.add_argument("--bpr-regs", default="0.001,0.01")
    p.add_argument("--hpf-iterations", type=int, default=100)
    p.add_argument("--hpf-grid", type=int, default=2, help="1: hierarchical only; 2: both")
    p.add_argument(
        "--retime",
        metavar="RUN.json",
        help="time an earlier run's chosen members and ALS again (paired), e.g. on a quieter "
        "machine, and update that file; nothing else is run",
    )
    a = p.parse_args(argv)
    if a.retime:
        return retime(Path(a.retime), a)
    if a.merge:
        for f in a.merge:
            print(f"{f}:")
            print(tables(json.loads(Path(f).read_text())))
            print()
        return 0
    if a.quick:
        a.warmup, a.samples, a.alphas, a.lams = 20, 40, "5", "1"
        a.als_regs, a.als_alphas = "0.1,1", "5,20"
        a.bpr_lrs, a.bpr_regs, a.bpr_iterations = "0.05", "0.01", 50
        a.hpf_iterations, a.hpf_grid = 50, 1
    out = Path(
        a.out or (DEFAULT_OUT.with_name("implicit_topn_quick.json") if a.quick else DEFAULT_OUT)
    )
    out.parent.mkdir(parents=True, exist_ok=True)

    import bmczoo as bmc

    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    data = data.with_values(np.ones(data.n))  # every rating an interaction
    train, test = data.split_per_user(0.2, seed=0)
    fit_tr, val = train.split_per_user(0.2, seed=1)
    print(
        f"{data.shape[0]} users x {data.shape[1]} items: train {train.n} (validation: "
        f"{fit_tr.n} + {val.n}), test {test.n}; {cpu_model()}",
        flush=True,
    )
    ours, peers = grids(a)
    res = {
        "machine": machine(),
        "load_start": list(os.getloadavg()),
        "settings": {k: v for k, v in vars(a).items() if k not in ("out", "merge")},
        "results": [],
    }

    def save():
        res["check"] = check(res)
        out.write_text(json.dumps(res, indent=1, default=float))

    def run(model, method, fn, params, tr, te, stage, per_user=None):
        fit, t = fn(tr, params, a)
        r = {
            "model": model,
            "method": method,
            "params": params,
            "stage": stage,
            **t,
            **metrics(fit, tr, te, per_user),
            "load": os.getloadavg()[0],
        }
        res["results"].append(r)
        save()
        it = r.get("iter_seconds")
        print(
            f"  [{stage}] {method} {_params(params)}: P@10 {r['p10']:.4f} R@20 {r['r20']:.4f} "
            f"NDCG@10 {r['ndcg10']:.4f}, {_f(None if it is None else 1e3 * it, '{:.1f}')} ms/it, "
            f"fit {t['fit_seconds']:.1f} s",
            flush=True,
        )
        return r

    on_val = {}  # bmczoo's members on validation, for select_member
    jobs = [("bmczoo", name, fit_bmczoo, grid) for name, grid in ours[1].items()]
    jobs += [("peer", name, fn, grid) for name, (fn, grid) in peers.items()]
    for model, name, fn, grid in jobs:
        print(f"{name}: {len(grid)} on validation", flush=True)
        best, best_users = None, None
        for pr in grid:
            users = {}
            r = run(model, name, fn, pr, fit_tr, val, "validation", users)
            if best is None or r["ndcg10"] > best["ndcg10"]:
                best, best_users = r, users["ndcg10"]
        if model == "bmczoo":
            on_val[name] = {
                "ndcg10": best["ndcg10"],
                "per_user": best_users,
                "seconds": best["iter_seconds"],
            }
            res["selection"] = select_member(on_val)
        r = run(model, name, fn, best["params"], train, test, "test")
        r["val_ndcg10"] = best["ndcg10"]
        save()
        if name == "implicit ALS":
            for label, extra in (
                ("Cholesky solver (use_cg=False), one thread", {"use_cg": False}),
                ("default threads (num_threads=0)", {"threads": 0}),
            ):
                _, t = fn(train, {**best["params"], **extra}, a)
                res["results"].append(
                    {
                        "model": model,
                        "method": f"ALS, {label}",
                        "stage": "timing",
                        "params": {**best["params"], **extra},
                        **t,
                    }
                )
                save()
    paired_timing(res, a, train, test, variants=True)
    save()
    print()
    print(tables(res))
    print(f"\nwritten {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

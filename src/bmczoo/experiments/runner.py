"""The paper's experiments, resumable cell by cell, with honest hyper-parameter selection.

Three experiments (``bmczoo reproduce NAME``):

* ``simulation-m`` (the paper's Tables 2-3): K = 5, m in {100, 200, 500, 1000};
* ``simulation-K`` (Tables 4-5): m = 500, K in {2, 5, 10, 20};
* ``movielens`` (Table 6): 100K with Gibbs (discrete, inverse gamma) and VB (inverse
  gamma); 1M and 10M with VB (inverse gamma) when those datasets can be loaded.

For every cell and prior the hyper-parameters are chosen on a validation split carved
out of the training data (10% of the observed entries, by validation RMSE) over a grid
around the paper's value (x1/2, x1, x2); the model is then refitted on all training data
and evaluated once: against the true ``theta`` over all entries (simulations) or on the
held-out 20% (MovieLens).  The paper's own hyper-parameters are run too, for comparison.

Every fit is a cached JSON file keyed by its settings: rerunning skips finished fits,
so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from ..data import RatingData
from ..datasets import load_movielens, simulate_paper
from ..inference import fit
from .paper import (
    PAPER_TABLE2,
    PAPER_TABLE3_HYPER,
    PAPER_TABLE4,
    PAPER_TABLE5_HYPER,
    PAPER_TABLE6,
    make_prior,
)

__all__ = ["EXPERIMENTS", "Result", "run_experiment", "format_table", "default_out"]

PRIORS = ("fixed", "gamma", "inverse-gamma", "discrete")
# the hyper-parameter each grid varies (the others stay at the paper's value)
_TUNED = {"fixed": "gamma", "gamma": "beta", "inverse-gamma": "b", "discrete": "eps"}
_GRID = (0.5, 1.0, 2.0)


@dataclasses.dataclass(frozen=True)
class Result:
    """One row of a reproduced table."""

    experiment: str
    setting: str
    prior: str
    method: str
    paper: float
    paper_hyper: dict
    rmse_paper_hyper: float
    selected_hyper: dict
    rmse_selected: float
    n_datasets: int

    @property
    def diff(self) -> float:
        return self.rmse_selected - self.paper


@dataclasses.dataclass(frozen=True)
class _Settings:
    seeds: tuple[int, ...]
    num_warmup: int
    num_samples: int
    thinning: int
    vb_max_iter: int


_FULL = _Settings(seeds=(0, 1, 2, 3), num_warmup=100, num_samples=900, thinning=10, vb_max_iter=200)
_QUICK = _Settings(seeds=(0,), num_warmup=50, num_samples=250, thinning=5, vb_max_iter=60)


def default_out() -> Path:
    """``$BMCZOO_CACHE/experiments`` or ``~/.cache/bmczoo/experiments``."""
    root = os.environ.get("BMCZOO_CACHE") or Path.home() / ".cache" / "bmczoo"
    return Path(root) / "experiments"


def _cached(out: Path, key: dict, compute: Callable[[], float]) -> float:
    """The value stored for ``key`` under ``out``, computing and storing it if absent."""
    blob = json.dumps(key, sort_keys=True, default=float)
    path = out / f"{hashlib.sha1(blob.encode()).hexdigest()[:20]}.json"
    if path.exists():
        return float(json.loads(path.read_text())["value"])
    value = float(compute())
    out.mkdir(parents=True, exist_ok=True)
    # write-then-rename: an interrupted run never leaves a half-written cell
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"key": key, "value": value}, f, sort_keys=True, default=float)
    os.replace(tmp, path)
    return value


def _grid(name: str, paper_hyper: dict) -> list[dict]:
    out = []
    for factor in _GRID:
        h = dict(paper_hyper)
        h[_TUNED[name]] = paper_hyper[_TUNED[name]] * factor
        if name == "discrete" and h["eps"] >= h["C"]:
            continue
        out.append(h)
    return out


def _fit_rmse(train: RatingData, method: str, name: str, hyper: dict, K: int, seed: int, st: _Settings,
              *, evaluate: Callable) -> float:
    prior = make_prior(name, hyper)
    common = dict(K=K, prior=prior, method=method, seed=seed, progress_bar=False)
    if method == "vb":
        f = fit(train, max_iter=st.vb_max_iter, **common)
    else:
        f = fit(train, num_warmup=st.num_warmup, num_samples=st.num_samples, thinning=st.thinning,
                store_factors=True, track=0, **common)
    return evaluate(f)


def _select_and_fit(out: Path, tag: dict, train: RatingData, method: str, name: str, paper_hyper: dict,
                    K: int, seed: int, st: _Settings, evaluate: Callable) -> tuple[dict, float, float]:
    """(selected hyper, RMSE with it, RMSE with the paper's) for one dataset."""
    inner, valid = train.split(0.1, seed=seed + 1000)

    def valid_rmse(f):
        return f.rmse(valid)

    scores = []
    for h in _grid(name, paper_hyper):
        key = {**tag, "stage": "validation", "hyper": h, "settings": dataclasses.asdict(st)}
        scores.append(_cached(out, key, lambda h=h: _fit_rmse(inner, method, name, h, K, seed, st, evaluate=valid_rmse)))
    best = _grid(name, paper_hyper)[int(np.argmin(scores))]

    def final(h):
        key = {**tag, "stage": "test", "hyper": h, "settings": dataclasses.asdict(st)}
        return _cached(out, key, lambda: _fit_rmse(train, method, name, h, K, seed, st, evaluate=evaluate))

    return best, final(best), final(paper_hyper)


def _simulation_rows(experiment, out, st, cells, progress) -> list[Result]:
    rows = []
    for setting, m, K, name, paper_hyper, paper_value in cells:
        picks, sel, ref = [], [], []
        for seed in st.seeds:
            sim = simulate_paper(m, factor_scale="variance", seed=seed)
            all_r, all_c = np.divmod(np.arange(m * m), m)
            truth = sim.theta.ravel()

            def evaluate(f):
                return float(np.sqrt(np.mean((f.predict(all_r, all_c) - truth) ** 2)))

            tag = {"experiment": experiment, "m": m, "K": K, "prior": name, "seed": seed, "scale": "variance"}
            h, r_sel, r_ref = _select_and_fit(out, tag, sim.train, "gibbs", name, paper_hyper, K, seed, st, evaluate)
            picks.append(h), sel.append(r_sel), ref.append(r_ref)
        # report the most often selected value (ties: the first)
        values = [p[_TUNED[name]] for p in picks]
        chosen = dict(picks[int(np.argmax([values.count(v) for v in values]))])
        if len(set(values)) > 1:
            chosen[_TUNED[name]] = "/".join(f"{v:g}" for v in sorted(set(values))) + " (per dataset)"
        rows.append(Result(experiment, setting, name, "gibbs", paper_value, paper_hyper, float(np.mean(ref)),
                           chosen, float(np.mean(sel)), len(st.seeds)))
        if progress:
            print(format_table([rows[-1]], header=False), flush=True)
    return rows


def _movielens_rows(out, st, quick, progress, data_dir) -> list[Result]:
    from ..datasets import DATASETS

    rows = []
    for dataset, method, name, paper_hyper, paper_value in PAPER_TABLE6:
        if quick and dataset != "100k":
            continue
        local = Path(data_dir) / DATASETS[dataset].folder if data_dir is not None else None
        try:
            data = load_movielens(dataset, path=local if local is not None and local.exists() else None)
        except (OSError, ValueError) as e:  # no local copy and no network
            if progress:
                print(f"movielens {dataset}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
            continue
        train, test = data.split(0.2, seed=0)
        K = 10
        tag = {"experiment": "movielens", "dataset": dataset, "method": method, "prior": name, "K": K, "seed": 0}
        h, r_sel, r_ref = _select_and_fit(out, tag, train, method, name, paper_hyper, K, 0, st,
                                          lambda f: f.rmse(test))
        rows.append(Result("movielens", dataset, name, method, paper_value, paper_hyper, r_ref, h, r_sel, 1))
        if progress:
            print(format_table([rows[-1]], header=False), flush=True)
    return rows


def run_experiment(name: str, *, quick: bool = False, out: str | Path | None = None,
                   progress: bool = True, data_dir: str | Path | None = None) -> list[Result]:
    """Run (or resume) one experiment and return its rows.

    Parameters
    ----------
    name : {"simulation-m", "simulation-K", "movielens"}
    quick : bool
        A small version (one dataset, shorter chains, the smallest setting only) that
        finishes in minutes on 2 cores.
    out : path, optional
        Cache folder for the per-fit results (default :func:`default_out`).
    data_dir : path, optional
        ``movielens``: a folder holding the extracted archives (``ml-100k/u.data``,
        ``ml-1m/ratings.dat``, ...); datasets not found there come from the download cache.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    st = _QUICK if quick else _FULL
    out = Path(out) if out is not None else default_out()
    out = out / ("quick" if quick else "full")
    if name == "simulation-m":
        ms = (100,) if quick else (100, 200, 500, 1000)
        cells = [(f"m={m}", m, 5, p, PAPER_TABLE3_HYPER[p][m], PAPER_TABLE2[p][m]) for m in ms for p in PRIORS]
        return _simulation_rows(name, out, st, cells, progress)
    if name == "simulation-K":
        Ks = (2,) if quick else (2, 5, 10, 20)
        m = 100 if quick else 500
        hyper = (lambda p, K: PAPER_TABLE3_HYPER[p][100]) if quick else (lambda p, K: PAPER_TABLE5_HYPER[p][K])
        cells = [(f"K={K}" + (" (m=100, quick)" if quick else ""), m, K, p, hyper(p, K), PAPER_TABLE4[p][K])
                 for K in Ks for p in PRIORS]
        return _simulation_rows(name, out, st, cells, progress)
    return _movielens_rows(out, st, quick, progress, data_dir)


EXPERIMENTS = ("simulation-m", "simulation-K", "movielens")


def _fmt_hyper(h: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in h.items())


def format_table(rows: list[Result], header: bool = True) -> str:
    """The rows as a Markdown table: the paper's RMSE beside ours (selected on validation
    data, and with the paper's hyper-parameters) and the difference."""
    lines = []
    if header:
        lines += [
            "| setting | prior | method | paper | ours (selected) | selected hyper-parameters | diff | ours (paper's hyper) |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        lines.append(
            f"| {r.setting} | {r.prior} | {r.method} | {r.paper:.2f} | {r.rmse_selected:.3f} | "
            f"{_fmt_hyper(r.selected_hyper)} | {r.diff:+.3f} | {r.rmse_paper_hyper:.3f} |"
        )
    return "\n".join(lines)

"""The paper's experiments, resumable fit by fit, with honest hyper-parameter selection.

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

**Starting points of the Gibbs chains.**  The discrete spike-and-slab posterior is
multimodal and a Gibbs chain rarely moves a whole column between the slab and the spike,
so where it starts matters.  For the discrete prior the start is selected like a
hyper-parameter: every grid value is run from the slab (``gamma = C``, every column
active) and from the spike (``gamma = eps``, every column switched off), and the pair
(hyper-parameter, start) with the smallest validation RMSE is refitted; the paper's own
hyper-parameters are run from the start that did better on validation data with them.
The inverse-gamma chains start at ``gamma = 1`` (the prior's ``init_gamma``); the fixed
and gamma priors start at their priors' defaults.

Every fit is a cached JSON file keyed by its settings (data, prior, hyper-parameters,
start, sampler settings): rerunning skips finished fits, so an interrupted run resumes
where it stopped.  ``jobs > 1`` runs the independent fits in that many worker processes
(``spawn``); each fit is seeded by its dataset, so the results do not depend on ``jobs``.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import functools
import hashlib
import json
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

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
    """One row of a reproduced table.

    ``selected_start`` is the Gibbs starting point of the selected fit (``"slab"`` or
    ``"spike"`` for the discrete prior, chosen on validation data; ``"gamma=1"`` for the
    inverse gamma; ``"default"``: the prior's ``init_gamma``), ``paper_hyper_start`` that
    of the fit with the paper's hyper-parameters; with several datasets that disagree,
    each start with its count, e.g. ``"spike x3, slab x1"``.
    """

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
    selected_start: str = "default"
    paper_hyper_start: str = "default"

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


# ----------------------------------------------------------------------------- the cache
def _cache_path(out: Path, key: dict) -> Path:
    blob = json.dumps(key, sort_keys=True, default=float)
    return out / f"{hashlib.sha1(blob.encode()).hexdigest()[:20]}.json"


def _read_cached(out: Path, key: dict) -> float | None:
    path = _cache_path(out, key)
    return float(json.loads(path.read_text())["value"]) if path.exists() else None


def _write_cached(out: Path, key: dict, value: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # write-then-rename: an interrupted run never leaves a half-written cell
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"key": key, "value": value}, f, sort_keys=True, default=float)
    os.replace(tmp, _cache_path(out, key))


# ----------------------------------------------------------------------------- one fit
@dataclasses.dataclass(frozen=True)
class _Task:
    """One fit, described by plain values so that a worker process can rebuild it.

    ``data``: ``("sim", m, seed, factor_scale)`` or ``("movielens", dataset, path)``;
    ``stage``: ``"validation"`` (fit the inner 90% of the training data, RMSE on the
    other 10%) or ``"test"`` (fit all training data, RMSE against the truth / test set).
    """

    out: str
    key_json: str
    data: tuple
    stage: str
    method: str
    prior: str
    hyper_json: str
    K: int
    seed: int
    settings: _Settings
    init_gamma: float | None

    @property
    def key(self) -> dict:
        return json.loads(self.key_json)


@functools.lru_cache(maxsize=2)
def _load(data: tuple):
    """(inner, valid, train, evaluate_test) for a data spec; cached per process."""
    from ..datasets import load_movielens, simulate_paper

    if data[0] == "sim":
        _, m, seed, scale = data
        sim = simulate_paper(m, factor_scale=scale, seed=seed)
        train = sim.train
        all_r, all_c = np.divmod(np.arange(m * m), m)
        truth = sim.theta.ravel()

        def evaluate(f):
            return float(np.sqrt(np.mean((f.predict(all_r, all_c) - truth) ** 2)))

        split_seed = seed + 1000
    else:
        _, dataset, path = data
        train, test = load_movielens(dataset, path=path).split(0.2, seed=0)

        def evaluate(f):
            return f.rmse(test)

        split_seed = 1000
    inner, valid = train.split(0.1, seed=split_seed)
    return inner, valid, train, evaluate


def _compute(task: _Task) -> float:
    """Run one fit (or read it from the cache), store and return its RMSE."""
    out = Path(task.out)
    cached = _read_cached(out, task.key)
    if cached is not None:
        return cached
    from ..inference import fit

    inner, valid, train, evaluate = _load(task.data)
    prior = make_prior(task.prior, json.loads(task.hyper_json))
    st = task.settings
    data = inner if task.stage == "validation" else train
    common = dict(K=task.K, prior=prior, method=task.method, seed=task.seed, progress_bar=False)
    if task.method == "vb":
        f = fit(data, max_iter=st.vb_max_iter, **common)
    else:
        extra = {} if task.init_gamma is None else {"init_gamma": task.init_gamma}
        f = fit(data, num_warmup=st.num_warmup, num_samples=st.num_samples, thinning=st.thinning,
                store_factors=True, track=0, **common, **extra)
    value = float(f.rmse(valid) if task.stage == "validation" else evaluate(f))
    _write_cached(out, task.key, value)
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


def _starts(name: str, method: str, hyper: dict) -> list[tuple[str, float | None]]:
    """The Gibbs starting points tried for a prior: (label, init_gamma); ``None``: the
    prior's own ``init_gamma``, not recorded in the cache key (the fixed and gamma priors,
    and VB, whose start does not depend on the prior)."""
    if method != "gibbs":
        return [("default", None)]
    if name == "discrete":
        return [("slab", float(hyper["C"])), ("spike", float(hyper["eps"]))]
    if name == "inverse-gamma":
        return [("gamma=1", 1.0)]
    return [("default", None)]


# ----------------------------------------------------------------------------- scheduling
class _Unit:
    """Selection and final fits of one prior on one dataset: validation fits over the
    grid x starts, then the refit of the best pair and of the paper's hyper-parameters."""

    def __init__(self, row: int, tag: dict, data: tuple, method: str, name: str, paper_hyper: dict, K: int,
                 seed: int, st: _Settings, out: Path):
        self.row, self.tag, self.data, self.method, self.name = row, tag, data, method, name
        self.paper_hyper, self.K, self.seed, self.st, self.out = paper_hyper, K, seed, st, out
        self.candidates = [(h, s) for h in _grid(name, paper_hyper) for s in _starts(name, method, h)]
        self.valid_tasks = [self._task("validation", h, s) for h, s in self.candidates]
        self.values: dict[str, float] = {}
        self.final_tasks: list[_Task] | None = None
        self.pick = self.paper_start = None

    def _task(self, stage: str, hyper: dict, start: tuple[str, float | None]) -> _Task:
        key = {**self.tag, "stage": stage, "hyper": hyper, "settings": dataclasses.asdict(self.st)}
        if start[1] is not None:
            key["start"], key["init_gamma"] = start
        return _Task(str(self.out), json.dumps(key, sort_keys=True, default=float), self.data, stage, self.method,
                     self.name, json.dumps(hyper, sort_keys=True), self.K, self.seed, self.st, start[1])

    def validation_done(self) -> bool:
        return all(t.key_json in self.values for t in self.valid_tasks)

    def make_finals(self) -> list[_Task]:
        scores = [self.values[t.key_json] for t in self.valid_tasks]
        self.pick = self.candidates[int(np.argmin(scores))]
        # the paper's hyper-parameters, from the start that did better with them on validation data
        own = [(sc, c) for sc, c in zip(scores, self.candidates) if c[0] == self.paper_hyper]
        if own:
            self.paper_start = min(own, key=lambda x: x[0])[1][1]
        else:  # the paper's value is not on the grid (cannot happen with x1 in _GRID)
            self.paper_start = _starts(self.name, self.method, self.paper_hyper)[0]
        tasks = [self._task("test", *self.pick), self._task("test", self.paper_hyper, self.paper_start)]
        self.final_tasks = list({t.key_json: t for t in tasks}.values())
        return self.final_tasks

    def done(self) -> bool:
        return self.final_tasks is not None and all(t.key_json in self.values for t in self.final_tasks)

    def result(self) -> tuple[dict, str, float, str, float]:
        sel = self.values[self._task("test", *self.pick).key_json]
        ref = self.values[self._task("test", self.paper_hyper, self.paper_start).key_json]
        return self.pick[0], self.pick[1][0], sel, self.paper_start[0], ref


class _Serial:
    """The executor interface, running each fit at once in this process (``jobs=1``)."""

    def submit(self, fn, *args):
        f = cf.Future()
        f.set_result(fn(*args))
        return f

    def shutdown(self, **kwargs):
        pass


def _executor(jobs: int):
    if jobs == 1:
        return _Serial()
    # spawn, not fork: a forked child of a process that has initialised JAX can deadlock
    return cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def _run_units(units: list[_Unit], jobs: int, progress: bool, on_row: Callable[[int], None]) -> None:
    """Run every unit's fits (cached ones are read, not recomputed), at most ``jobs`` at
    a time; final fits go first as soon as a unit's validation fits are in, and
    ``on_row(i)`` is called for each row, in order, once all its units are done."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(len(u.valid_tasks) + 2 for u in units), unit="fit", file=sys.stderr, leave=False,
                   dynamic_ncols=True)
    queue = collections.deque((u, t) for u in units for t in u.valid_tasks)
    by_row: dict[int, list[_Unit]] = collections.defaultdict(list)
    for u in units:
        by_row[u.row].append(u)
    rows = sorted(by_row)
    next_row = 0
    running: dict[cf.Future, tuple[_Unit, _Task]] = {}
    pool = _executor(jobs)

    def finish(u: _Unit, t: _Task, value: float):
        nonlocal next_row
        u.values[t.key_json] = value
        if bar is not None:
            bar.update(1)
        if u.final_tasks is None and u.validation_done():
            finals = u.make_finals()
            if bar is not None and len(finals) < 2:
                bar.total -= 2 - len(finals)
                bar.refresh()
            queue.extendleft((u, f) for f in reversed(finals))
        while next_row < len(rows) and all(x.done() for x in by_row[rows[next_row]]):
            if bar is not None:
                bar.clear()
            on_row(rows[next_row])
            next_row += 1

    try:
        while queue or running:
            while queue and len(running) < jobs:
                u, t = queue.popleft()
                cached = _read_cached(Path(t.out), t.key)
                if cached is not None:
                    finish(u, t, cached)
                    continue
                running[pool.submit(_compute, t)] = (u, t)
            if not running:
                continue
            done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for fut in done:
                u, t = running.pop(fut)
                finish(u, t, fut.result())
    finally:
        pool.shutdown(cancel_futures=True)
        if bar is not None:
            bar.close()


def _summarise_starts(starts: list[str]) -> str:
    counts = collections.Counter(starts)
    if len(counts) == 1:
        return starts[0]
    return ", ".join(f"{s} x{n}" for s, n in counts.most_common())


def _summarise(units: list[_Unit], experiment: str, setting: str, paper_value: float, n: int) -> Result:
    u0 = units[0]
    picks, starts, sel, ref_starts, ref = zip(*(u.result() for u in units))
    # report the most often selected value (ties: the first)
    values = [p[_TUNED[u0.name]] for p in picks]
    chosen = dict(picks[int(np.argmax([values.count(v) for v in values]))])
    if len(set(values)) > 1:
        chosen[_TUNED[u0.name]] = "/".join(f"{v:g}" for v in sorted(set(values))) + " (per dataset)"
    return Result(experiment, setting, u0.name, u0.method, paper_value, u0.paper_hyper, float(np.mean(ref)),
                  chosen, float(np.mean(sel)), n, _summarise_starts(list(starts)), _summarise_starts(list(ref_starts)))


def _run_cells(experiment: str, out: Path, st: _Settings, cells: list[tuple], progress: bool,
               jobs: int = 1) -> list[Result]:
    """Simulation cells ``(setting, m, K, prior, paper_hyper, paper_value)``, Gibbs."""
    units = []
    for i, (setting, m, K, name, paper_hyper, _) in enumerate(cells):
        for seed in st.seeds:
            tag = {"experiment": experiment, "m": m, "K": K, "prior": name, "seed": seed, "scale": "variance"}
            units.append(_Unit(i, tag, ("sim", m, seed, "variance"), "gibbs", name, paper_hyper, K, seed, st, out))
    rows: list[Result] = []

    def on_row(i):
        setting, _, _, _, _, paper_value = cells[i]
        rows.append(_summarise([u for u in units if u.row == i], experiment, setting, paper_value, len(st.seeds)))
        if progress:
            print(format_table([rows[-1]], header=False), flush=True)

    _run_units(units, jobs, progress, on_row)
    return rows


def _movielens_rows(out, st, quick, progress, data_dir, jobs) -> list[Result]:
    from ..datasets import DATASETS

    units, meta = [], []
    for dataset, method, name, paper_hyper, paper_value in PAPER_TABLE6:
        if quick and dataset != "100k":
            continue
        local = Path(data_dir) / DATASETS[dataset].folder if data_dir is not None else None
        spec = ("movielens", dataset, str(local) if local is not None and local.exists() else None)
        try:
            _load(spec)
        except (OSError, ValueError) as e:  # no local copy and no network
            if progress:
                print(f"movielens {dataset}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
            continue
        K = 10
        tag = {"experiment": "movielens", "dataset": dataset, "method": method, "prior": name, "K": K, "seed": 0}
        units.append(_Unit(len(meta), tag, spec, method, name, paper_hyper, K, 0, st, out))
        meta.append((dataset, paper_value))
    rows: list[Result] = []

    def on_row(i):
        dataset, paper_value = meta[i]
        rows.append(_summarise([units[i]], "movielens", dataset, paper_value, 1))
        if progress:
            print(format_table([rows[-1]], header=False), flush=True)

    _run_units(units, jobs, progress, on_row)
    return rows


def run_experiment(name: str, *, quick: bool = False, out: str | Path | None = None,
                   progress: bool = True, data_dir: str | Path | None = None, jobs: int = 1) -> list[Result]:
    """Run (or resume) one experiment and return its rows.

    Parameters
    ----------
    name : {"simulation-m", "simulation-K", "movielens"}
    quick : bool
        A small version (one dataset, shorter chains, the smallest setting only) that
        finishes in minutes on 2 cores.
    out : path, optional
        Cache folder for the per-fit results (default :func:`default_out`).
    progress : bool
        A progress bar over the fits (stderr) and each row as soon as it is complete.
    data_dir : path, optional
        ``movielens``: a folder holding the extracted archives (``ml-100k/u.data``,
        ``ml-1m/ratings.dat``, ...); datasets not found there come from the download cache.
    jobs : int
        Fits run at the same time, each in its own worker process (``spawn``); 1 (the
        default) runs them one after another in this process.  The results do not depend
        on ``jobs``.  Each JAX process uses every core for its linear algebra, so more
        jobs than cores rarely helps.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    jobs = int(jobs)
    st = _QUICK if quick else _FULL
    out = Path(out) if out is not None else default_out()
    out = out / ("quick" if quick else "full")
    if name == "simulation-m":
        ms = (100,) if quick else (100, 200, 500, 1000)
        cells = [(f"m={m}", m, 5, p, PAPER_TABLE3_HYPER[p][m], PAPER_TABLE2[p][m]) for m in ms for p in PRIORS]
        return _run_cells(name, out, st, cells, progress, jobs)
    if name == "simulation-K":
        Ks = (2,) if quick else (2, 5, 10, 20)
        m = 100 if quick else 500
        hyper = (lambda p, K: PAPER_TABLE3_HYPER[p][100]) if quick else (lambda p, K: PAPER_TABLE5_HYPER[p][K])
        cells = [(f"K={K}" + (" (m=100, quick)" if quick else ""), m, K, p, hyper(p, K), PAPER_TABLE4[p][K])
                 for K in Ks for p in PRIORS]
        return _run_cells(name, out, st, cells, progress, jobs)
    return _movielens_rows(out, st, quick, progress, data_dir, jobs)


EXPERIMENTS = ("simulation-m", "simulation-K", "movielens")


def _fmt_hyper(h: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in h.items())


def _fmt_start(r: Result) -> str:
    if r.paper_hyper_start == r.selected_start:
        return r.selected_start
    return f"{r.selected_start} (paper's hyper: {r.paper_hyper_start})"


def format_table(rows: list[Result], header: bool = True) -> str:
    """The rows as a Markdown table: the paper's RMSE beside ours (selected on validation
    data, and with the paper's hyper-parameters) and the difference.  ``start`` is the
    Gibbs chains' starting point (chosen on validation data for the discrete prior:
    ``slab`` = every column active, ``spike`` = every column switched off)."""
    lines = []
    if header:
        lines += [
            "| setting | prior | method | paper | ours (selected) | selected hyper-parameters | start | diff "
            "| ours (paper's hyper) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        lines.append(
            f"| {r.setting} | {r.prior} | {r.method} | {r.paper:.2f} | {r.rmse_selected:.3f} | "
            f"{_fmt_hyper(r.selected_hyper)} | {_fmt_start(r)} | {r.diff:+.3f} | {r.rmse_paper_hyper:.3f} |"
        )
    return "\n".join(lines)

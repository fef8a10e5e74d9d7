"""The paper's experiments, resumable fit by fit, with honest hyper-parameter selection.

Three experiments (``bmczoo reproduce NAME``):

* ``simulation-m`` (the paper's Tables 2-3): K = 5, m in {100, 200, 500, 1000};
* ``simulation-K`` (Tables 4-5): m = 500, K in {2, 5, 10, 20};
* ``movielens`` (Table 6): 100K with Gibbs (discrete, inverse gamma) and VB (inverse
  gamma); 1M and 10M with VB (inverse gamma) when those datasets can be loaded; and,
  beyond the paper, the Normal-Wishart rows alone and with learned noise and biases for
  each of those datasets and methods (:data:`~bmczoo.experiments.beyond.MOVIELENS_BEYOND`;
  no paper value), with ``features=True`` also with the datasets' side features and
  implicit feedback where a dataset has its side tables
  (:data:`~bmczoo.experiments.beyond.MOVIELENS_LINKED`).

For every cell and prior the hyper-parameters are chosen on a validation split carved
out of the training data (10% of the observed entries, by validation RMSE) over a grid
around the paper's value (the prior's tuned hyper-parameter x1/2, x1, x2); the model is
then refitted on all training data and evaluated once: against the true ``theta`` over
all entries (simulations) or on the held-out 20% (MovieLens).  The paper's own
hyper-parameters are run too, for comparison.  :func:`run_grid` runs the same selection
for any registered prior on a grid of simulation cells.

**Starting points of the Gibbs chains.**  Each prior names the starts worth comparing
(:meth:`bmczoo.priors.Prior.gibbs_starts`) and the start is selected like a
hyper-parameter: every grid value is run from each start, and the pair (hyper-parameter,
start) with the smallest validation RMSE is refitted; the paper's own hyper-parameters
are run from the start that did best on validation data with them.  The discrete
spike-and-slab posterior, for instance, is multimodal and a Gibbs chain rarely moves a
whole column between the slab and the spike, so it is run from the slab (``gamma = C``,
every column active) and from the spike (``gamma = eps``, every column switched off).

The work is a pipeline of pure functions over frozen descriptions
(:mod:`bmczoo.experiments.tasks`): :func:`plan_grid` / :func:`plan_movielens` give the
rows, each of units (one prior on one dataset) with their validation fits;
:func:`~bmczoo.experiments.execute.run` computes (or reads from the per-fit cache) the
values of fits; :func:`select` gives a unit's test fits; :func:`summarise` one row of the
table.  Every fit is a cached JSON file keyed by its settings (data, prior,
hyper-parameters, start, sampler settings): rerunning skips finished fits, so an
interrupted run resumes where it stopped.  ``jobs > 1`` runs the independent fits in that
many worker processes (``spawn``); each fit is seeded by its dataset, so the results do
not depend on ``jobs``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from .execute import iter_run, prepared, run
from .beyond import MOVIELENS_BEYOND, linked_rows
from .paper import PAPER_TABLE2, PAPER_TABLE3_HYPER, PAPER_TABLE4, PAPER_TABLE5_HYPER, PAPER_TABLE6
from .tasks import (
    FULL,
    QUICK,
    FitTask,
    MovieLensData,
    Pairs,
    Settings,
    SimulationData,
    Unit,
    as_pairs,
    plan_unit,
    prior_class,
)

__all__ = [
    "EXPERIMENTS",
    "Result",
    "GridCell",
    "RowPlan",
    "Finals",
    "run_experiment",
    "run_grid",
    "plan_grid",
    "plan_movielens",
    "run",
    "select",
    "summarise",
    "base_test_task",
    "format_table",
    "default_out",
]

EXPERIMENTS = ("simulation-m", "simulation-K", "movielens")


@dataclasses.dataclass(frozen=True)
class Result:
    """One row of a reproduced table.

    ``selected_start`` is the Gibbs starting point of the selected fit (a label of the
    prior's :meth:`~bmczoo.priors.Prior.gibbs_starts`, chosen on validation data: e.g.
    ``"slab"`` or ``"spike"`` for the discrete prior, ``"gamma=1"`` for the inverse gamma;
    ``"default"``: the prior's ``init_gamma``), ``paper_hyper_start`` that of the fit with
    the paper's hyper-parameters; with several datasets that disagree, each start with
    its count, e.g. ``"spike x3, slab x1"``.

    ``components`` names the model's components beyond the paper's (e.g. ``("learned",
    "biases")``; :attr:`label` is the model's name in the table); ``paper`` is NaN for a
    row the paper does not have (its ``paper_hyper`` are then the hyper-parameters the
    grid is centred on, the prior's defaults).
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
    components: tuple[str, ...] = ()

    @property
    def diff(self) -> float:
        """Our selected RMSE minus the paper's (NaN for a row the paper does not have)."""
        return self.rmse_selected - self.paper

    @property
    def label(self) -> str:
        """The model: the prior's name and its other components, e.g. ``"normal-wishart+learned+biases"``."""
        return "+".join((self.prior, *self.components))


def default_out() -> Path:
    """``$BMCZOO_CACHE/experiments`` or ``~/.cache/bmczoo/experiments``."""
    root = os.environ.get("BMCZOO_CACHE") or Path.home() / ".cache" / "bmczoo"
    return Path(root) / "experiments"


def _default_hyper(cls) -> dict:
    """The hyper-parameters of the prior class's command-line default (its dataclass
    defaults updated by ``cli_defaults``), as the prior reports them (an optional setting
    left at None, e.g. the Normal-Wishart ``nu0``, is not listed)."""
    return cls.from_cli().hyperparameters()


@dataclasses.dataclass(frozen=True)
class GridCell:
    """One simulation cell of a grid: a prior, Gibbs, on ``m x m`` matrices with rank ``K``.

    Attributes
    ----------
    setting : the row's label (e.g. ``"m=100"``).
    m, K : matrix size and latent dimension.
    prior : a name of :func:`bmczoo.priors.registry`.
    hyper : the hyper-parameters the grid is centred on (a mapping or ``(name, value)``
        pairs, kept in the given order); default: the prior class's ``cli_defaults``
        over its dataclass defaults.
    reference : the value the row is compared with (the paper's RMSE), or None (the
        row's reference is then NaN; None, not NaN, so that equal cells compare equal
        under Python 3.13's field-by-field dataclass equality, where NaN != NaN).
    factor_scale : how the simulator reads ``20/sqrt(m)`` (``"variance"`` or ``"sd"``).
    """

    setting: str
    m: int
    K: int
    prior: str
    hyper: Pairs | Mapping | None = None
    reference: float | None = None
    factor_scale: str = "variance"

    def __post_init__(self):
        cls = prior_class(self.prior)
        object.__setattr__(
            self, "hyper", as_pairs(_default_hyper(cls) if self.hyper is None else self.hyper)
        )


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """One row of a table: its units (one per dataset, same prior and cell)."""

    experiment: str
    setting: str
    paper: float
    units: tuple[Unit, ...]


@dataclasses.dataclass(frozen=True)
class Finals:
    """A unit's test fits: the best validation candidate and the paper's hyper-parameters
    from the start that did best with them (the same fit when they coincide)."""

    selected: FitTask
    paper: FitTask

    @property
    def tasks(self) -> tuple[FitTask, ...]:
        """The distinct test fits (by cache key)."""
        same = self.selected.key_json == self.paper.key_json
        return (self.selected,) if same else (self.selected, self.paper)


# ----------------------------------------------------------------------------- plan
def plan_grid(
    cells: Iterable[GridCell], *, settings: Settings, experiment: str = "grid"
) -> list[RowPlan]:
    """The rows of a grid of simulation cells: one unit per dataset seed of ``settings``.

    Parameters
    ----------
    cells : iterable of GridCell
    settings : Settings
    experiment : str
        Part of every cache key.

    Returns
    -------
    list of RowPlan
    """
    rows = []
    for cell in cells:
        units = []
        for seed in settings.seeds:
            tag = {
                "experiment": experiment,
                "m": int(cell.m),
                "K": int(cell.K),
                "prior": cell.prior,
                "seed": int(seed),
                "scale": cell.factor_scale,
            }
            data = SimulationData(int(cell.m), int(seed), cell.factor_scale)
            units.append(
                plan_unit(
                    tag,
                    data,
                    method="gibbs",
                    prior=cell.prior,
                    hyper=cell.hyper,
                    K=cell.K,
                    seed=seed,
                    settings=settings,
                )
            )
        rows.append(
            RowPlan(
                experiment,
                cell.setting,
                math.nan if cell.reference is None else float(cell.reference),
                tuple(units),
            )
        )
    return rows


def plan_movielens(entries: Iterable[tuple], *, settings: Settings, K: int = 10) -> list[RowPlan]:
    """The rows of the MovieLens table, one unit each (seed 0).

    Parameters
    ----------
    entries : iterable of tuples
        ``(MovieLensData, method, prior, hyper-parameters, paper's RMSE)``, optionally
        followed by the likelihood (None: the paper's), the biases (None/False: none;
        True or a :class:`~bmczoo.offsets.Biases`) and the prior's feature links (None:
        none; a mapping of :func:`~bmczoo.experiments.tasks.links_pairs`, e.g.
        ``{"row_features": True, "implicit": True}``: the dataset's side tables and
        implicit feedback).  The hyper-parameters may be None (the prior's command-line
        defaults); the paper's RMSE NaN (a row the paper does not have).  The likelihood,
        biases and links are part of the cache keys unless they are the defaults, so the
        keys of the paper's rows do not depend on components they do not use.
    settings : Settings
    K : int
        Latent dimension.
    """
    rows = []
    for data, method, prior, hyper, paper, *components in entries:
        if len(components) > 3:
            raise ValueError(f"a MovieLens entry has at most 8 items, got {5 + len(components)}")
        likelihood, biases, links = (list(components) + [None] * 3)[:3]
        hyper = _default_hyper(prior_class(prior)) if hyper is None else hyper
        # the links go with the hyper-parameters (plan_unit keeps them apart, off the grid)
        hyper = {**dict(as_pairs(hyper)), **dict(as_pairs(links or ()))}
        tag = {
            "experiment": "movielens",
            "dataset": data.dataset,
            "method": method,
            "prior": prior,
            "K": K,
            "seed": 0,
        }
        unit = plan_unit(
            tag,
            data,
            method=method,
            prior=prior,
            hyper=hyper,
            K=K,
            seed=0,
            settings=settings,
            likelihood=likelihood,
            biases=biases,
        )
        rows.append(RowPlan("movielens", data.dataset, float(paper), (unit,)))
    return rows


# ----------------------------------------------------------------------------- select and summarise
def select(unit: Unit, values: Mapping[str, float]) -> Finals:
    """A unit's test fits given the validation values (by cache key).

    The candidate with the smallest validation RMSE (the first on ties) and the unit's
    ``base_hyper`` (the paper's values) from the start that did best with them.
    """
    scores = [values[t.key_json] for t in unit.candidates]
    best = unit.candidates[int(np.argmin(scores))]
    base = dict(unit.base_hyper)
    own = [(s, t) for s, t in zip(scores, unit.candidates) if dict(t.hyper) == base]
    paper = min(own, key=lambda x: x[0])[1]
    return Finals(dataclasses.replace(best, stage="test"), dataclasses.replace(paper, stage="test"))


def base_test_task(unit: Unit) -> FitTask:
    """The test fit of a unit's ``base_hyper`` from the prior's first (default) start."""
    base = dict(unit.base_hyper)
    return dataclasses.replace(
        next(t for t in unit.candidates if dict(t.hyper) == base), stage="test"
    )


def _summarise_starts(starts: list[str]) -> str:
    counts = collections.Counter(starts)
    if len(counts) == 1:
        return starts[0]
    return ", ".join(f"{s} x{n}" for s, n in counts.most_common())


def summarise(row: RowPlan, finals: Mapping[Unit, Finals], values: Mapping[str, float]) -> Result:
    """The table row of ``row`` from its units' test fits and their values (by cache key).

    RMSEs are averaged over the units (datasets); the reported hyper-parameters are the
    most often selected (ties: the first), with every value of the tuned one listed when
    the datasets disagree.
    """
    u0 = row.units[0]
    picked = [finals[u] for u in row.units]
    order = [k for k, _ in u0.base_hyper]
    picks = [{k: dict(f.selected.hyper)[k] for k in order} for f in picked]
    tuned = prior_class(u0.prior).tuned_name()
    tuned_values = [p[tuned] for p in picks]
    chosen = dict(picks[int(np.argmax([tuned_values.count(v) for v in tuned_values]))])
    if len(set(tuned_values)) > 1:
        chosen[tuned] = "/".join(f"{v:g}" for v in sorted(set(tuned_values))) + " (per dataset)"
    sel = float(np.mean([values[f.selected.key_json] for f in picked]))
    ref = float(np.mean([values[f.paper.key_json] for f in picked]))
    return Result(
        row.experiment,
        row.setting,
        u0.prior,
        u0.method,
        row.paper,
        dict(u0.base_hyper),
        ref,
        chosen,
        sel,
        len(row.units),
        _summarise_starts([f.selected.start for f in picked]),
        _summarise_starts([f.paper.start for f in picked]),
        u0.components,
    )


# ----------------------------------------------------------------------------- drivers
def _progress_bar(progress: bool, total: int):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        unit="fit",
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
        disable=not progress,
    )


def _row_done(row: RowPlan, finals: Mapping[Unit, Finals], values: Mapping[str, float]) -> bool:
    return all(t.key_json in values for u in row.units for t in finals[u].tasks)


def _run_finals(
    rows: list[RowPlan],
    finals: Mapping[Unit, Finals],
    values: dict,
    out: Path,
    jobs: int,
    bar,
    progress: bool,
) -> list[Result]:
    """Phase 2: the test fits; each row is summarised (and printed) once all its fits are in."""
    results: list[Result] = []
    tasks = [t for row in rows for u in row.units for t in finals[u].tasks]
    for task, value in iter_run(tasks, out, jobs):
        values[task.key_json] = value
        bar.update(1)
        while len(results) < len(rows) and _row_done(rows[len(results)], finals, values):
            results.append(summarise(rows[len(results)], finals, values))
            if progress:
                bar.clear()
                print(format_table([results[-1]], header=False), flush=True)
    return results


def _run_rows(rows: list[RowPlan], out: Path, jobs: int, progress: bool) -> list[Result]:
    """Phase 1, every unit's validation fits; then :func:`select`; phase 2, the test fits."""
    units = list(dict.fromkeys(u for row in rows for u in row.units))
    valid = list({t.key_json: t for u in units for t in u.candidates}.values())
    bar = _progress_bar(progress, len(valid) + 2 * len(units))
    try:
        values: dict[str, float] = {}
        for task, value in iter_run(valid, out, jobs):
            values[task.key_json] = value
            bar.update(1)
        finals = {u: select(u, values) for u in units}
        bar.total = len(valid) + len({t.key_json for f in finals.values() for t in f.tasks})
        bar.refresh()
        return _run_finals(rows, finals, values, out, jobs, bar, progress)
    finally:
        bar.close()


def _check_jobs(jobs) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    return int(jobs)


def _folder(out: str | Path | None, quick: bool) -> Path:
    return (Path(out) if out is not None else default_out()) / ("quick" if quick else "full")


def run_grid(
    cells: Iterable[GridCell],
    *,
    quick: bool = True,
    settings: Settings | None = None,
    out: str | Path | None = None,
    jobs: int = 1,
    progress: bool = False,
    experiment: str = "grid",
) -> list[Result]:
    """Select hyper-parameters (and Gibbs start) for each simulation cell, then test.

    Each cell's prior is run over the grid of its tuned hyper-parameter (x1/2, x1, x2 of
    ``cell.hyper``; invalid points skipped) and the prior's Gibbs starts on each dataset
    seed; the best pair on validation data and ``cell.hyper`` itself are refitted on all
    training data and scored against the true ``theta`` over all entries.

    Parameters
    ----------
    cells : iterable of GridCell
    quick : bool
        :data:`~bmczoo.experiments.tasks.QUICK` settings (else ``FULL``) and the cache
        subfolder ``quick`` (else ``full``).
    settings : Settings, optional
        Other sampler settings (e.g. very short chains for a smoke test).
    out : path, optional
        Cache folder (default :func:`default_out`).
    jobs : int
        Fits run at the same time, in worker processes when > 1; results do not depend on it.
    progress : bool
        A progress bar (stderr) and each row printed as soon as it is complete.
    experiment : str
        The experiment's name in the cache keys and the results.

    Returns
    -------
    list of Result
        One per cell, in order.
    """
    jobs = _check_jobs(jobs)
    settings = settings if settings is not None else (QUICK if quick else FULL)
    rows = plan_grid(cells, settings=settings, experiment=experiment)
    return _run_rows(rows, _folder(out, quick), jobs, progress)


def _simulation_cells(name: str, quick: bool) -> list[GridCell]:
    """The cells of ``simulation-m`` or ``simulation-K``: the paper's priors, hyper-parameters
    and RMSEs (quick: m = 100 and the smallest setting only)."""
    if name == "simulation-m":
        ms = (100,) if quick else (100, 200, 500, 1000)
        return [
            GridCell(f"m={m}", m, 5, p, PAPER_TABLE3_HYPER[p][m], PAPER_TABLE2[p][m])
            for m in ms
            for p in PAPER_TABLE2
        ]
    Ks = (2,) if quick else (2, 5, 10, 20)
    m = 100 if quick else 500
    return [
        GridCell(
            f"K={K}" + (" (m=100, quick)" if quick else ""),
            m,
            K,
            p,
            PAPER_TABLE3_HYPER[p][100] if quick else PAPER_TABLE5_HYPER[p][K],
            PAPER_TABLE4[p][K],
        )
        for K in Ks
        for p in PAPER_TABLE4
    ]


def _movielens_entries(
    quick: bool, data_dir: str | Path | None, progress: bool, features: bool = False
) -> list[tuple]:
    """The paper's Table 6 rows whose dataset can be loaded (quick: 100K only), each
    dataset's followed by the rows beyond the paper (:data:`MOVIELENS_BEYOND`, and with
    ``features`` :data:`~bmczoo.experiments.beyond.MOVIELENS_LINKED` where the dataset has
    the side tables they use) for each method the paper ran on it."""
    from ..datasets import DATASETS

    entries = []
    datasets = list(dict.fromkeys(dataset for dataset, *_ in PAPER_TABLE6))
    for dataset in datasets[:1] if quick else datasets:
        local = Path(data_dir) / DATASETS[dataset].folder if data_dir is not None else None
        spec = MovieLensData(dataset, str(local) if local is not None and local.exists() else None)
        try:
            prep = prepared(spec)
        except (OSError, ValueError) as e:  # no local copy and no network
            if progress:
                print(
                    f"movielens {dataset}: skipped ({type(e).__name__}: {str(e).splitlines()[0][:100]})",
                    flush=True,
                )
            continue
        paper_rows = [row for row in PAPER_TABLE6 if row[0] == dataset]
        entries += [
            (spec, method, prior, hyper, paper) for _, method, prior, hyper, paper in paper_rows
        ]
        methods = list(dict.fromkeys(method for _, method, *_ in paper_rows))
        beyond = list(MOVIELENS_BEYOND)
        if features:
            linked, missing = linked_rows(prep.train)
            beyond += linked
            if missing and progress:
                print(f"movielens {dataset}: {missing}", flush=True)
        entries += [
            (spec, method, prior, hyper, math.nan, *components)
            for method in methods
            for prior, hyper, *components in beyond
        ]
    return entries


def _check_rows(name: str, priors, features) -> None:
    """The experiment's name and the options that select its rows (``priors``: the
    simulations'; ``features``: MovieLens')."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    if priors is not None and name == "movielens":
        raise ValueError("priors= selects rows of simulation-m and simulation-K only")
    if not isinstance(features, bool):
        raise ValueError(f"features must be True or False, got {features!r}")
    if features and name != "movielens":
        raise ValueError(
            "features=True adds rows to movielens only (the simulations have no features)"
        )


def run_experiment(
    name: str,
    *,
    quick: bool = False,
    out: str | Path | None = None,
    progress: bool = True,
    data_dir: str | Path | None = None,
    jobs: int = 1,
    settings: Settings | None = None,
    priors: Sequence[str] | None = None,
    features: bool = False,
) -> list[Result]:
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
    settings : Settings, optional
        Other sampler settings (e.g. very short chains for a smoke test; default
        :data:`~bmczoo.experiments.tasks.QUICK` or ``FULL`` by ``quick``).  They are part of
        every cache key, the cache subfolder is still ``quick`` / ``full``.
    priors : sequence of str, optional
        ``simulation-m`` / ``simulation-K``: only the rows of these priors (their registry
        names); default all of the paper's.
    features : bool
        ``movielens``: also the rows of
        :data:`~bmczoo.experiments.beyond.MOVIELENS_LINKED` (the Normal-Wishart prior with
        the dataset's side features and implicit feedback) for the datasets whose side
        tables (``u.user`` / ``u.item``, ``users.dat`` / ``movies.dat``) sit beside the
        ratings.

    Returns
    -------
    list of Result
    """
    _check_rows(name, priors, features)
    jobs = _check_jobs(jobs)
    if name != "movielens":
        cells = _simulation_cells(name, quick)
        if priors is not None:
            unknown = sorted(set(priors) - {c.prior for c in cells})
            if unknown:
                raise ValueError(
                    f"{name} has no rows for {', '.join(unknown)}; its priors are "
                    f"{', '.join(dict.fromkeys(c.prior for c in cells))}"
                )
            cells = [c for c in cells if c.prior in priors]
        return run_grid(
            cells,
            quick=quick,
            settings=settings,
            out=out,
            jobs=jobs,
            progress=progress,
            experiment=name,
        )
    settings = settings if settings is not None else (QUICK if quick else FULL)
    rows = plan_movielens(
        _movielens_entries(quick, data_dir, progress, features), settings=settings
    )
    return _run_rows(rows, _folder(out, quick), jobs, progress)


# ----------------------------------------------------------------------------- the table
def _fmt_hyper(h: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in h.items())


def _fmt_start(r: Result) -> str:
    if r.paper_hyper_start == r.selected_start:
        return r.selected_start
    return f"{r.selected_start} (paper's hyper: {r.paper_hyper_start})"


NO_VALUE = "—"


def _fmt(x: float, spec: str) -> str:
    return NO_VALUE if math.isnan(x) else format(x, spec)


def format_table(rows: list[Result], header: bool = True) -> str:
    """The rows as a Markdown table: the paper's RMSE beside ours (selected on validation
    data, and with the paper's hyper-parameters) and the difference.  ``model`` is the
    prior and any other components (e.g. ``normal-wishart+learned+biases``); a row the
    paper does not have shows ``—`` as the paper's RMSE and the difference, and its
    "paper's hyper" are the hyper-parameters the grid is centred on (the prior's
    defaults).  ``start`` is the Gibbs chains' starting point (chosen on validation data
    among the prior's starts, e.g. for the discrete prior ``slab`` = every column active,
    ``spike`` = every column switched off)."""
    lines = []
    if header:
        lines += [
            "| setting | model | method | paper | ours (selected) | selected hyper-parameters | start | diff "
            "| ours (paper's hyper) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        lines.append(
            f"| {r.setting} | {r.label} | {r.method} | {_fmt(r.paper, '.2f')} | {r.rmse_selected:.3f} | "
            f"{_fmt_hyper(r.selected_hyper)} | {_fmt_start(r)} | {_fmt(r.diff, '+.3f')} | "
            f"{r.rmse_paper_hyper:.3f} |"
        )
    return "\n".join(lines)

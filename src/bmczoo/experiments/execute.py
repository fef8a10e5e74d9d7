"""Running fit tasks: the per-fit JSON cache, one fit, and many fits in worker processes.

Every fit is a JSON file named by a hash of its cache key (:attr:`FitTask.key_json`):
rerunning skips finished fits, so an interrupted run resumes where it stopped.  With
``jobs > 1`` the missing fits run in that many worker processes (``spawn``); each fit is
seeded by its task, so the values do not depend on ``jobs``.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import json
import multiprocessing
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from .tasks import DataSpec, FitTask, Prepared

__all__ = ["prepared", "fit_value", "compute", "iter_run", "run", "read_cached"]


# ----------------------------------------------------------------------------- the cache
def _cache_path(out: Path, task: FitTask) -> Path:
    return out / f"{hashlib.sha1(task.key_json.encode()).hexdigest()[:20]}.json"


def read_cached(out: str | Path, task: FitTask) -> float | None:
    """The cached value of ``task`` in the folder ``out``, or None."""
    path = _cache_path(Path(out), task)
    return float(json.loads(path.read_text())["value"]) if path.exists() else None


def _write_cached(out: Path, task: FitTask, value: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    from ..inference.checkpoint import current_umask

    # write-then-rename: an interrupted run never leaves a half-written cell; the file gets
    # a plain file's permissions (0o666 less the umask), not mkstemp's 0o600
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            json.dump({"key": task.key, "value": value}, f, sort_keys=True, default=float)
        os.replace(tmp, _cache_path(out, task))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ----------------------------------------------------------------------------- one fit
@functools.lru_cache(maxsize=2)
def prepared(data: DataSpec) -> Prepared:
    """``data.prepare()``, cached per process (consecutive fits share a dataset)."""
    return data.prepare()


def fit_value(task: FitTask, *, progress_bar: bool = False) -> float:
    """Run the fit ``task`` describes (no cache) and return its RMSE.

    Parameters
    ----------
    task : FitTask
    progress_bar : bool
        The sampler's progress bar.

    Returns
    -------
    float
        Validation RMSE (stage ``"validation"``) or the dataset's test RMSE (``"test"``).
    """
    from ..inference import fit

    data = prepared(task.data)
    st = task.settings
    common = dict(
        K=task.K,
        prior=task.build_prior(),
        method=task.method,
        seed=task.seed,
        progress_bar=progress_bar,
        likelihood=task.build_likelihood(),
        biases=task.build_biases() or False,
    )
    train = data.inner if task.stage == "validation" else data.train
    if task.method == "vb":
        f = fit(train, max_iter=st.vb_max_iter, **common)
    else:
        from ..inference.options import before_values
        from ..inference.settings import SweepOptions

        # the experiments' sampler is fixed whatever bmc.fit's defaults: each sweep option
        # at the value the cache keys and docs/paper.md's tables describe (its ``before``)
        extra = before_values(SweepOptions)
        # the priors without a move run the plain sweep; False: the paper's sweep for all
        extra["column_moves"] = bool(st.column_moves) and common["prior"].has_column_move
        if task.init_gamma is not None:
            extra["init_gamma"] = task.init_gamma
        # the paper's tables are single-chain runs: one chain whatever bmc.fit's default
        f = fit(
            train,
            num_warmup=st.num_warmup,
            num_samples=st.num_samples,
            thinning=st.thinning,
            num_chains=1,
            store_factors=True,
            track=0,
            **common,
            **extra,
        )
    return float(f.rmse(data.valid) if task.stage == "validation" else data.evaluate(f))


def compute(task: FitTask, out: str | Path) -> float:
    """The value of ``task``: read from the cache folder ``out``, or fitted and stored."""
    cached = read_cached(out, task)
    if cached is not None:
        return cached
    value = fit_value(task)
    _write_cached(Path(out), task, value)
    return value


# ----------------------------------------------------------------------------- many fits
def _unique(tasks: Iterable[FitTask]) -> list[FitTask]:
    return list({t.key_json: t for t in tasks}.values())


def iter_run(
    tasks: Iterable[FitTask], out: str | Path, jobs: int = 1
) -> Iterator[tuple[FitTask, float]]:
    """``(task, value)`` for each distinct task (by cache key), as each becomes known.

    Cached values come first; the missing fits run one after another in this process
    (``jobs == 1``) or in ``jobs`` worker processes (``spawn``), each stored as it finishes.

    Parameters
    ----------
    tasks : iterable of FitTask
    out : path
        The cache folder.
    jobs : int
        Fits run at the same time.

    Yields
    ------
    (FitTask, float)
    """
    missing = []
    for task in _unique(tasks):
        cached = read_cached(out, task)
        if cached is None:
            missing.append(task)
        else:
            yield task, cached
    if jobs == 1:
        for task in missing:
            yield task, compute(task, out)
        return
    # spawn, not fork: a forked child of a process that has initialised JAX can deadlock
    pool = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {pool.submit(compute, task, str(out)): task for task in missing}
        for fut in cf.as_completed(futures):
            yield futures[fut], fut.result()
    finally:
        pool.shutdown(cancel_futures=True)


def run(tasks: Iterable[FitTask], out: str | Path, jobs: int = 1) -> dict[str, float]:
    """The value of every task, by its cache key (:attr:`FitTask.key_json`): cached fits
    are read, missing ones computed (see :func:`iter_run`)."""
    return {task.key_json: value for task, value in iter_run(tasks, out, jobs)}

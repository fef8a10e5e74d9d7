"""Seconds per full Gibbs sweep of bmczoo at MovieLens 100K / 1M / 10M sizes, against SMURFF and myFM.

    python benchmarks/bench_gibbs.py --sizes 100k,1m,10m --K 10 --chains 1 --repeats 5
    python benchmarks/bench_gibbs.py --sizes 1m --K 10,32,64 --chains 1,4 --models plain,full,ig-moves,discrete-moves

Every (size, K, chains, model) is measured in a fresh subprocess: it builds synthetic
ratings with skewed (lognormal users, Zipf-like items) degrees and the MovieLens shape,
``bmczoo.RatingData`` and the Gibbs problem (float32), compiles a ``jax.lax.fori_loop``
of ``gibbs.step`` and times several sweeps per repeat (``--repeats`` repeats after
compilation; the tables show the median and the best per-sweep time), with BLAS on one
thread as ``bmc.fit`` runs its sweeps (:mod:`bmczoo._blas`; ``--blas-threads-default``
times them with OpenBLAS's default threads instead).  ``--hot-path`` sets bmczoo's
sparse-product path (``auto``: on the CPU the compiled Gram kernel at ``K >=
bmczoo.linalg.GRAM_MIN_K`` when it is built; ``bcsr``: JAX's sparse product only); every
result records the path and whether the kernel ran.  Peak memory is
the subprocess's resident-set high-water mark (``ru_maxrss``), so runs do not
contaminate each other.  ``--K`` and ``--chains`` take comma-separated lists.

Models (``--models``, comma-separated):

* ``plain``: the inverse-gamma prior with fixed unit noise, the paper's sweep without
  column moves;
* ``full``: ``NormalWishart()`` rows, ``LearnedNoise()`` and ``Biases()`` (the
  recommended member);
* ``ig-moves``: the inverse-gamma prior with the column moves at the end of every sweep
  (``fuse_column_moves=False``);
* ``discrete-moves``: ``Discrete(1.0, 0.05, 0.07)`` with the column moves, likewise;
* ``ig-fused``, ``discrete-fused``: the same with the moves inside every sweep (where
  ``bmc.fit`` puts them by default; its default for the discrete prior runs them every
  fourth sweep only: ``bench_column_moves.py`` times that schedule).

``--column-moves`` is the same as listing ``ig-moves`` in place of ``plain``.

Peers, each only when importable (they are never dependencies of bmczoo), on the same
synthetic data as bmczoo (same seed):

* SMURFF's BPMF (``--no-smurff`` skips it): ``smurff.TrainSession`` with Normal-Wishart
  priors on both factors and ``AdaptiveNoise(1.0, 10.0)`` (as ``compare_peers.py``), the
  ratings centred by their mean, no test set, one chain, ``--smurff-threads`` OpenMP
  threads (its ``num_threads`` and ``OMP_NUM_THREADS``); at every size of ``--sizes``
  but 10m (``--smurff-10m`` adds it) and every K.  After ``init()`` and two warm-up
  iterations, each repeat times ``--smurff-iters`` iterations (``step()``).
* myFM's Gibbs sampler (``MyFMRegressor`` of rank K on one-hot users and items;
  ``--no-myfm`` skips it), on the 100K data only, every K: each repeat is the difference
  of a fit of ``2 + --myfm-iters`` and one of 2 iterations, divided by ``--myfm-iters``.

When ``../shared/data/ml-100k/u.data`` exists the plain sweep is also timed on the real
MovieLens 100K ratings (``--no-real`` skips it).

After the main table a ratio table gives, for each (size, K, chains): each model's
median and best time per sweep, its ratio to the plain sweep (targets: ``full`` <= 1.4,
``ig-moves`` and ``ig-fused`` <= 1.3, ``discrete-moves`` and ``discrete-fused`` <= 1.5),
SMURFF's time per iteration and SMURFF / model, how many times faster than SMURFF the
model's sweep of all C chains is (target: >= 3 for ``plain`` and ``full`` at K = 10 and
32, judged at one chain).
Targets are judged on the ratio of medians; the ratio of the best times is printed
beside it.  ``--json`` writes the arguments, the load averages, every measurement and
the ratio table.

The machine may be shared: the load average is printed before and after; the best
per-sweep time is the least disturbed estimate.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic import SIZES, load_ml100k, parse_sizes, synthetic_ratings  # noqa: E402
from _peers import importable  # noqa: E402

REAL_100K = HERE.parent.parent / "shared" / "data" / "ml-100k" / "u.data"
# targets per sweep on the 2-core reference machine (seconds), and peak memory (MB)
TARGETS = {"100k": 0.005, "1m": 0.040, "10m": 0.6, "real-100k": 0.005}
MEM_TARGET_MB = {"10m": 2048}
#: largest time per sweep of each model relative to the plain sweep's (same size, K, chains)
PLAIN_RATIO_TARGETS = {
    "full": 1.4,
    "ig-moves": 1.3,
    "discrete-moves": 1.5,
    "ig-fused": 1.3,
    "discrete-fused": 1.5,
}
#: least SMURFF time per iteration / model time per sweep, at one chain, for these (model, K)
SMURFF_RATIO_TARGETS = {
    ("plain", 10): 3.0,
    ("plain", 32): 3.0,
    ("full", 10): 3.0,
    ("full", 32): 3.0,
}
#: warm-up iterations of the peers before (or subtracted from) the timed ones
PEER_WARMUP = 2


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _cpu_s() -> float:
    """CPU seconds of this process, all threads (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _data(name: str, seed: int):
    if name == "real-100k":
        rows, cols, vals, shape = load_ml100k(str(REAL_100K))
        return rows, cols, vals, shape
    m1, m2, n = SIZES[name]
    rows, cols, vals = synthetic_ratings(m1, m2, n, seed=seed)
    return rows, cols, vals, (m1, m2)


# --------------------------------------------------------------------------- workers
#: models a run can time (see the module docstring)
MODELS = ("plain", "full", "ig-moves", "discrete-moves", "ig-fused", "discrete-fused")


def _model(model: str):
    """``(prior, likelihood, biases, column_moves)`` of a model of :data:`MODELS`
    (``column_moves``: False, True, or ``"fused"``: inside the sweep)."""
    import bmczoo as bmc

    if model == "full":
        return (
            bmc.priors.NormalWishart(),
            bmc.likelihoods.LearnedNoise(),
            bmc.offsets.Biases(),
            False,
        )
    if model == "ig-moves":
        return bmc.priors.InverseGamma(), None, None, True
    if model == "discrete-moves":
        return bmc.priors.Discrete(1.0, 0.05, 0.07), None, None, True
    if model == "ig-fused":
        return bmc.priors.InverseGamma(), None, None, "fused"
    if model == "discrete-fused":
        return bmc.priors.Discrete(1.0, 0.05, 0.07), None, None, "fused"
    if model == "plain":
        return bmc.priors.InverseGamma(), None, None, False
    raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")


def worker_bmczoo(
    name: str,
    K: int,
    chains: int,
    repeats: int,
    sweeps: int,
    seed: int,
    model: str = "plain",
    blas_limit: bool = True,
    hot_path: str = "auto",
) -> dict:
    from bmczoo import _blas
    from bmczoo import linalg as kr

    _blas.LIMIT = blas_limit
    with _blas.one_blas_thread(), kr.use_hot_path(hot_path):  # as bmc.fit runs its sweeps
        return _time_bmczoo(name, K, chains, repeats, sweeps, seed, model) | {
            "blas_limit": blas_limit,
            "hot_path": kr.resolve_hot_path(hot_path),
            "gram_kernel": kr.resolve_hot_path(hot_path) == "gram" and K >= kr.GRAM_MIN_K,
        }


def _time_bmczoo(name, K, chains, repeats, sweeps, seed, model) -> dict:
    import jax
    import jax.numpy as jnp

    import bmczoo as bmc
    from bmczoo import _xla
    from bmczoo.inference import gibbs
    from bmczoo.inference.settings import SweepOptions

    t0 = time.perf_counter()
    rows, cols, vals, shape = _data(name, seed)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = bmc.RatingData(rows, cols, vals, shape)
    del rows, cols, vals
    data, _ = data.centered()
    prior, likelihood, biases, column_moves = _model(model)
    if column_moves and not prior.has_column_move:
        raise ValueError(f"model {model!r}: the {type(prior).__name__} prior has no column move")
    problem = gibbs.build_problem(
        data,
        tau=1.0,
        dtype=jnp.float32,
        likelihood=likelihood,
        biases=biases,
        options=SweepOptions(
            column_moves=bool(column_moves),
            column_moves_every=1,
            fuse_column_moves=column_moves == "fused",
        ),
    )
    n = data.n
    del data
    keys = jax.random.split(jax.random.key(seed), chains)
    state = gibbs.init(keys, problem, prior, K)
    jax.block_until_ready(state)
    t_build = time.perf_counter() - t0

    @jax.jit
    def run(state, problem, k):
        return jax.lax.fori_loop(0, k, lambda i, s: gibbs.step(s, problem, prior), state)

    t0 = time.perf_counter()
    compiled = _xla.compile(run.lower(state, problem, 1))  # as bmc.fit compiles its sweeps
    t_compile = time.perf_counter() - t0
    state = jax.block_until_ready(compiled(state, problem, 1))  # warm-up sweep
    t0 = time.perf_counter()
    state = jax.block_until_ready(compiled(state, problem, 1))
    t_one = time.perf_counter() - t0
    if sweeps <= 0:  # about half a second of work per repeat
        sweeps = int(min(50, max(1, round(0.5 / max(t_one, 1e-6)))))
    per_sweep, cpu_sweep = [], []
    for _ in range(repeats):
        c0 = _cpu_s()
        t0 = time.perf_counter()
        state = jax.block_until_ready(compiled(state, problem, sweeps))
        per_sweep.append((time.perf_counter() - t0) / sweeps)
        cpu_sweep.append((_cpu_s() - c0) / sweeps)
    ok = bool(np.all(np.isfinite(np.asarray(state.M)))) and bool(
        np.all(np.isfinite(np.asarray(state.N)))
    )
    return {
        "name": name,
        "engine": "bmczoo" if model == "plain" else f"bmczoo-{model}",
        "model": model,
        "column_moves": column_moves,
        "shape": list(problem.rows.shape),
        "n": n,
        "K": K,
        "chains": chains,
        "sweeps_per_repeat": sweeps,
        "per_sweep": per_sweep,
        "median": float(np.median(per_sweep)),
        "best": float(np.min(per_sweep)),
        "cpu_median": float(np.median(cpu_sweep)),
        "t_generate": t_gen,
        "t_build": t_build,
        "t_compile": t_compile,
        "finite": ok,
        "peak_rss_mb": _rss_mb(),
        "jax": jax.__version__,
        "device": str(jax.devices()[0]),
    }


def worker_myfm(name: str, K: int, repeats: int, n_iter: int, seed: int) -> dict:
    import myfm
    import scipy.sparse as sps

    rows, cols, vals, (m1, m2) = _data(name, seed)
    n = rows.size
    X = sps.csr_matrix(
        (np.ones(2 * n), np.stack([rows, m1 + cols], axis=1).ravel(), np.arange(0, 2 * n + 1, 2)),
        shape=(n, m1 + m2),
    )
    y = vals.astype(np.float64)

    def fit(iters):
        c0 = _cpu_s()
        t0 = time.perf_counter()
        myfm.MyFMRegressor(rank=K, random_seed=seed).fit(X, y, n_iter=iters, n_kept_samples=1)
        return time.perf_counter() - t0, _cpu_s() - c0

    fit(PEER_WARMUP)  # warm-up (imports, allocation)
    per_iter, cpu_iter = [], []
    for _ in range(repeats):
        # difference of two fits cancels the set-up cost
        (w1, c1), (w0, c0) = fit(PEER_WARMUP + n_iter), fit(PEER_WARMUP)
        per_iter.append((w1 - w0) / n_iter)
        cpu_iter.append((c1 - c0) / n_iter)
    return {
        "name": name,
        "engine": f"myfm {getattr(myfm, '__version__', '?')}",
        "model": "myfm",
        "shape": [m1, m2],
        "n": n,
        "K": K,
        "chains": 1,
        "sweeps_per_repeat": n_iter,
        "per_sweep": per_iter,
        "median": float(np.median(per_iter)),
        "best": float(np.min(per_iter)),
        "cpu_median": float(np.median(cpu_iter)),
        "peak_rss_mb": _rss_mb(),
    }


def worker_smurff(name: str, K: int, repeats: int, n_iter: int, seed: int, threads: int) -> dict:
    """SMURFF's BPMF per iteration: ``repeats`` blocks of ``n_iter`` timed ``step()`` calls
    after ``init()`` and :data:`PEER_WARMUP` untimed ones; ``threads`` > 0 sets its OpenMP
    threads (0: its default)."""
    if threads > 0:  # read when the OpenMP runtime starts, at the first parallel region
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import importlib.metadata

    import scipy.sparse as sps
    import smurff

    t0 = time.perf_counter()
    rows, cols, vals, (m1, m2) = _data(name, seed)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = rows.size
    # SMURFF models the ratings as given (no global offset): centre them as bmczoo does
    y = sps.coo_matrix((vals.astype(np.float64) - float(vals.mean()), (rows, cols)), shape=(m1, m2))
    del rows, cols, vals
    has_threads = "num_threads" in inspect.signature(smurff.TrainSession.__init__).parameters
    session = smurff.TrainSession(
        priors=["normal", "normal"],
        num_latent=K,
        burnin=PEER_WARMUP + repeats * n_iter,
        nsamples=1,
        seed=seed,
        verbose=0,
        **({"num_threads": threads} if has_threads and threads > 0 else {}),
    )
    session.addTrainAndTest(y, None, smurff.AdaptiveNoise(1.0, 10.0))
    session.init()
    t_build = time.perf_counter() - t0
    for _ in range(PEER_WARMUP):
        session.step()
    per_iter, cpu_iter = [], []
    for _ in range(repeats):
        c0 = _cpu_s()
        t0 = time.perf_counter()
        for _ in range(n_iter):
            if session.step() is None:
                raise RuntimeError("SMURFF stopped before the timed iterations were done")
        per_iter.append((time.perf_counter() - t0) / n_iter)
        cpu_iter.append((_cpu_s() - c0) / n_iter)
    try:
        version = importlib.metadata.version("smurff")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return {
        "name": name,
        "engine": f"smurff {version}",
        "model": "smurff",
        "shape": [m1, m2],
        "n": n,
        "K": K,
        "chains": 1,
        "sweeps_per_repeat": n_iter,
        "per_sweep": per_iter,
        "median": float(np.median(per_iter)),
        "best": float(np.min(per_iter)),
        "cpu_median": float(np.median(cpu_iter)),
        "t_generate": t_gen,
        "t_build": t_build,
        "peak_rss_mb": _rss_mb(),
        "threads": threads if threads > 0 else None,
        "num_threads_keyword": has_threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


# --------------------------------------------------------------------------- driver
def _spawn(args: list[str], timeout: float) -> dict | None:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    try:
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  [timeout after {timeout:.0f}s: {' '.join(args)}]", flush=True)
        return None
    if out.returncode != 0:
        print(f"  [failed: {' '.join(args)}]\n{out.stderr[-3000:]}", flush=True)
        return None
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    print(
        f"  [no result: {' '.join(args)}]\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}", flush=True
    )
    return None


def _myfm_available() -> bool:
    return importable("myfm")


def _smurff_available() -> bool:
    return importable("smurff")


def _int_list(text: str, what: str) -> list[int]:
    """Positive integers of a comma-separated list (duplicates dropped, order kept)."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise ValueError(
                f"{what} must be comma-separated positive integers, got {text!r}"
            ) from None
        if v < 1:
            raise ValueError(f"{what} must be comma-separated positive integers, got {text!r}")
        if v not in out:
            out.append(v)
    if not out:
        raise ValueError(f"{what} is empty")
    return out


def _fmt_t(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:9.2f} ms" if t < 1 else f"{t:9.3f} s "


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def print_table(results: list[dict]) -> None:
    head = (
        f"{'data':10s} {'engine':21s} {'m1 x m2':>14s} {'n':>11s} {'K':>3s} {'C':>2s} "
        f"{'median/sweep':>13s} {'best/sweep':>13s} {'cpu/sweep':>13s} {'target':>10s} {'peak RSS':>9s} {'compile':>8s} {'gen+build':>9s}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        # the targets are for the plain sweep, one chain, K = 10
        tgt = (
            TARGETS.get(r["name"])
            if r["engine"] == "bmczoo" and r["chains"] == 1 and r["K"] == 10
            else None
        )
        tgt_s = (
            ""
            if tgt is None
            else (
                f"{'ok' if r['best'] <= tgt else 'MISS'} {tgt * 1e3:g}ms"
                if tgt < 1
                else f"{'ok' if r['best'] <= tgt else 'MISS'} {tgt:g}s"
            )
        )
        mem = f"{r['peak_rss_mb']:7.0f}MB"
        if r["name"] in MEM_TARGET_MB and r["engine"].startswith("bmczoo"):
            mem += "*" if r["peak_rss_mb"] > MEM_TARGET_MB[r["name"]] else " "
        comp = f"{r['t_compile']:7.1f}s" if "t_compile" in r else ""
        gb = f"{r['t_generate'] + r['t_build']:8.1f}s" if "t_build" in r else ""
        shape = f"{r['shape'][0]} x {r['shape'][1]}"
        print(
            f"{r['name']:10s} {r['engine'][:21]:21s} {shape:>14s} {r['n']:11,d} {r['K']:3d} {r['chains']:2d} "
            f"{_fmt_t(r['median']):>13s} {_fmt_t(r['best']):>13s} {_fmt_t(r['cpu_median']):>13s} {tgt_s:>10s} {mem:>9s} {comp:>8s} {gb:>9s}"
        )


def _model_of(r: dict) -> str:
    return r.get("model", "plain" if r["engine"] == "bmczoo" else r["engine"].split()[0])


def ratio_rows(results: list[dict]) -> list[dict]:
    """One row per bmczoo measurement on synthetic data: its times, its ratio to the plain
    sweep of the same (size, K, chains) and SMURFF's time per iteration at (size, K) over
    its time per sweep, with the targets that apply (None where a figure is missing)."""
    ours = [r for r in results if r["engine"].startswith("bmczoo") and r["name"] in SIZES]
    smurff = {(r["name"], r["K"]): r for r in results if _model_of(r) == "smurff"}
    rows = []
    for r in ours:
        model = _model_of(r)
        plain = next(
            (
                p
                for p in ours
                if _model_of(p) == "plain"
                and p["name"] == r["name"]
                and p["K"] == r["K"]
                and p["chains"] == r["chains"]
            ),
            None,
        )
        s = smurff.get((r["name"], r["K"]))
        row = {
            "name": r["name"],
            "K": r["K"],
            "chains": r["chains"],
            "model": model,
            "median": r["median"],
            "best": r["best"],
            "vs_plain_median": r["median"] / plain["median"] if plain else None,
            "vs_plain_best": r["best"] / plain["best"] if plain else None,
            "smurff_median": s["median"] if s else None,
            "smurff_best": s["best"] if s else None,
            "smurff_threads": s.get("threads") if s else None,
            "smurff_over_model_median": s["median"] / r["median"] if s else None,
            "smurff_over_model_best": s["best"] / r["best"] if s else None,
        }
        lim = PLAIN_RATIO_TARGETS.get(model)
        row["vs_plain_target"] = lim
        row["vs_plain_ok"] = (
            None if lim is None or plain is None else bool(row["vs_plain_median"] <= lim)
        )
        want = SMURFF_RATIO_TARGETS.get((model, r["K"])) if r["chains"] == 1 else None
        row["smurff_target"] = want
        row["smurff_ok"] = (
            None if want is None or s is None else bool(row["smurff_over_model_median"] >= want)
        )
        rows.append(row)
    order = {m: i for i, m in enumerate(MODELS)}
    rows.sort(
        key=lambda x: (
            list(SIZES).index(x["name"]),
            x["K"],
            x["chains"],
            order.get(x["model"], len(order)),
        )
    )
    return rows


def print_ratios(rows: list[dict]) -> None:
    def ratio(a, b, fmt="{:.2f}"):
        return "-" if a is None else f"{fmt.format(a)} ({fmt.format(b)})"

    def mark(ok, text):
        return "" if ok is None else f"{'ok' if ok else 'MISS'} {text}"

    threads = sorted({r["smurff_threads"] for r in rows if r["smurff_median"] is not None}, key=str)
    print(
        "\nratios, same run: median (best) of the repeats.  'model / plain': the model's time per sweep over the "
        "plain sweep's (same size, K, chains).  'x faster than SMURFF': SMURFF's time per iteration (one chain, "
        f"{'/'.join(str(t or 'default') for t in threads) or '-'} thread(s)) over the model's per sweep of all C "
        "chains.  Targets judged on the medians (SMURFF's at one chain)."
    )
    head = (
        f"{'data':5s} {'K':>3s} {'C':>2s} {'model':15s} {'median/sweep':>13s} {'best/sweep':>13s} "
        f"{'model / plain':>13s} {'target':>12s} {'SMURFF/iter':>13s} {'x faster than SMURFF':>20s} {'target':>10s}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        plain_t = (
            mark(r["vs_plain_ok"], f"<= {r['vs_plain_target']:g}") if r["vs_plain_target"] else ""
        )
        smurff_t = mark(r["smurff_ok"], f">= {r['smurff_target']:g}") if r["smurff_target"] else ""
        print(
            f"{r['name']:5s} {r['K']:3d} {r['chains']:2d} {r['model']:15s} {_fmt_t(r['median']):>13s} "
            f"{_fmt_t(r['best']):>13s} {ratio(r['vs_plain_median'], r['vs_plain_best']):>13s} {plain_t:>12s} "
            f"{_fmt_t(r['smurff_median']):>13s} "
            f"{ratio(r['smurff_over_model_median'], r['smurff_over_model_best'], '{:.1f}'):>20s} {smurff_t:>10s}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="100k,1m,10m", help="comma-separated subset of 100k,1m,10m")
    ap.add_argument(
        "--K", default="10", help="latent dimensions, comma-separated (e.g. 10,32,64; default 10)"
    )
    ap.add_argument(
        "--chains",
        default="1",
        help="chains advanced together (stacked columns), comma-separated (e.g. 1,4; default 1)",
    )
    ap.add_argument(
        "--models",
        default="plain",
        help=f"comma-separated subset of {','.join(MODELS)} (default plain)",
    )
    ap.add_argument(
        "--column-moves", action="store_true", help="the same as listing ig-moves in place of plain"
    )
    ap.add_argument(
        "--repeats", type=int, default=5, help="timed repeats after compilation (default 5)"
    )
    ap.add_argument(
        "--sweeps", type=int, default=0, help="bmczoo sweeps per repeat (0: about 0.5 s of work)"
    )
    ap.add_argument("--seed", type=int, default=0, help="data and sampler seed (default 0)")
    ap.add_argument("--no-smurff", action="store_true", help="skip the SMURFF comparison")
    ap.add_argument(
        "--smurff-iters",
        type=int,
        default=10,
        help="SMURFF iterations per timed repeat (default 10)",
    )
    ap.add_argument(
        "--smurff-threads",
        type=int,
        default=2,
        help="SMURFF's OpenMP threads (default 2; 0: its default)",
    )
    ap.add_argument("--smurff-10m", action="store_true", help="also time SMURFF at the 10m size")
    ap.add_argument("--no-myfm", action="store_true", help="skip the myFM comparison (100K only)")
    ap.add_argument(
        "--myfm-iters", type=int, default=20, help="myFM iterations per timed repeat (default 20)"
    )
    ap.add_argument("--no-real", action="store_true", help="skip the real MovieLens 100K file")
    ap.add_argument(
        "--json",
        type=str,
        default="",
        help="also write the arguments, load, results and ratios here",
    )
    ap.add_argument(
        "--timeout", type=float, default=1800, help="seconds per subprocess (default 1800)"
    )
    ap.add_argument(
        "--blas-threads-default",
        action="store_true",
        help="time bmczoo's sweeps with OpenBLAS's default threads instead of the one thread "
        "bmc.fit gives it while its sweeps run (bmczoo._blas)",
    )
    ap.add_argument(
        "--hot-path",
        default="auto",
        choices=("auto", "bcsr", "segment", "gram"),
        help="bmczoo's sparse-product path (bmczoo.linalg.set_hot_path; default auto: on the "
        "CPU the compiled Gram kernel at K >= bmczoo.linalg.GRAM_MIN_K when it is built)",
    )
    ap.add_argument("--model", default="plain", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=str, default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        ranks = _int_list(args.K, "--K")
        chain_counts = _int_list(args.chains, "--chains")
    except ValueError as e:
        ap.error(str(e))
    for flag in ("repeats", "smurff_iters", "myfm_iters"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.smurff_threads < 0:
        ap.error(f"--smurff-threads must be 0 or more, got {args.smurff_threads}")

    if args.worker:  # internal: one measurement in this (fresh) process
        engine, name = args.worker.split(":", 1)
        K, chains = ranks[0], chain_counts[0]
        if engine == "bmczoo":
            res = worker_bmczoo(
                name,
                K,
                chains,
                args.repeats,
                args.sweeps,
                args.seed,
                args.model,
                blas_limit=not args.blas_threads_default,
                hot_path=args.hot_path,
            )
        elif engine == "smurff":
            res = worker_smurff(
                name, K, args.repeats, args.smurff_iters, args.seed, args.smurff_threads
            )
        else:
            res = worker_myfm(name, K, args.repeats, args.myfm_iters, args.seed)
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    sizes = parse_sizes(args.sizes)
    models = list(dict.fromkeys(m.strip() for m in args.models.split(",") if m.strip()))
    if not models or any(m not in MODELS for m in models):
        ap.error(f"--models must be a subset of {','.join(MODELS)}, got {args.models!r}")
    if args.column_moves:
        models = list(dict.fromkeys("ig-moves" if m == "plain" else m for m in models))
    load_before = list(os.getloadavg())
    print(
        f"bmczoo Gibbs sweep benchmark: K={','.join(map(str, ranks))}, chains={','.join(map(str, chain_counts))}, "
        f"models {','.join(models)}, float32, hot path {args.hot_path}, {os.cpu_count()} CPUs, "
        f"load average before: {_load()}",
        flush=True,
    )

    smurff_sizes: list[str] = []
    if args.no_smurff:
        print("SMURFF: skipped (--no-smurff)")
    elif not _smurff_available():
        print("SMURFF: skipped (smurff is not importable)")
    else:
        smurff_sizes = [s for s in sizes if s != "10m" or args.smurff_10m]
        if len(smurff_sizes) < len(sizes):
            print("SMURFF: 10m skipped (--smurff-10m adds it)")
    want_myfm = False
    if not args.no_myfm and "100k" in sizes:
        want_myfm = _myfm_available()
        if not want_myfm:
            print("myFM: skipped (myfm is not importable)")
    # (engine, data, model, K, chains); the peers right after bmczoo at the same size and K
    jobs: list[tuple[str, str, str, int, int]] = []
    for name in sizes:
        for K in ranks:
            jobs += [("bmczoo", name, m, K, C) for C in chain_counts for m in models]
            if name in smurff_sizes:
                jobs.append(("smurff", name, "smurff", K, 1))
            if want_myfm and name == "100k":
                jobs.append(("myfm", name, "myfm", K, 1))
    if not args.no_real:
        if REAL_100K.exists():
            jobs += [("bmczoo", "real-100k", "plain", K, C) for K in ranks for C in chain_counts]
        else:
            print(f"real MovieLens 100K: skipped ({REAL_100K} not found)")
    common = [
        "--repeats",
        str(args.repeats),
        "--sweeps",
        str(args.sweeps),
        "--seed",
        str(args.seed),
        "--myfm-iters",
        str(args.myfm_iters),
        "--smurff-iters",
        str(args.smurff_iters),
        "--smurff-threads",
        str(args.smurff_threads),
        "--hot-path",
        args.hot_path,
    ] + (["--blas-threads-default"] if args.blas_threads_default else [])
    results = []
    for engine, name, model, K, C in jobs:
        print(f"  running {engine} ({model}) on {name}, K={K}, chains={C} ...", flush=True)
        r = _spawn(
            [
                "--worker",
                f"{engine}:{name}",
                "--model",
                model,
                "--K",
                str(K),
                "--chains",
                str(C),
                *common,
            ],
            args.timeout,
        )
        if r is not None:
            results.append(r)
    print()
    print_table(results)
    load_after = list(os.getloadavg())
    print(
        f"\nload average after: {_load()}  "
        "(best/sweep is the least disturbed estimate on a shared machine; cpu/sweep = CPU seconds of all "
        "threads per sweep or iteration; * = over the 2 GB target)"
    )
    for ours in results:
        if ours["engine"] == "bmczoo" and ours["name"] == "100k":
            theirs = next(
                (r for r in results if _model_of(r) == "myfm" and r["K"] == ours["K"]), None
            )
            if theirs:
                print(
                    f"per-iteration time ratio bmczoo plain sweep / myFM on synthetic 100K (K={ours['K']}, "
                    f"{ours['chains']} chain(s)): median {ours['median'] / theirs['median']:.2f}, "
                    f"best {ours['best'] / theirs['best']:.2f}"
                )
    rows = ratio_rows(results)
    if rows:
        print_ratios(rows)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "argv": list(sys.argv[1:] if argv is None else argv),
                    "cpus": os.cpu_count(),
                    "load_before": load_before,
                    "load_after": load_after,
                    "models": models,
                    "K": ranks,
                    "chains": chain_counts,
                    "smurff_sizes": smurff_sizes,
                    "results": results,
                    "ratios": rows,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

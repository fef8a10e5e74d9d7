"""One-call device check (run by ``benchmarks/gpu_check.sh``): Gibbs sweep times of both hot
paths, build times and device memory per size / K / chains, and an ML-100K fit's test RMSE.

    python benchmarks/gpu_check.py                       # the full table (GPU, ~8 minutes)
    python benchmarks/gpu_check.py --smoke               # tiny sizes, any backend, seconds
    python benchmarks/gpu_check.py --sizes 10m --K 10,64 --chains 1,4 --budget 300

Each size runs in a fresh subprocess (so its device memory is its own): it generates
synthetic ratings of that shape (``benchmarks/_synthetic.py``; not timed as build), builds
``RatingData`` and the Gibbs problem (timed: "build"), then for every K, chain count and
hot path (``bcsr``: JAX's BCSR product; ``segment``: the chunked sorted segment sum of
``bmczoo.linalg``) compiles a ``fori_loop`` of Gibbs steps and times sweeps
after a warm-up sweep.  "peak" is ``jax.devices()[0].memory_stats()["peak_bytes_in_use"]``
of the subprocess so far (it only grows within a size; "-" where the backend has no
memory stats, e.g. CPU), "temp" the compiled program's temporary buffers
(``memory_analysis()``).  Results are printed as they come, so a run cut short by the
budget still shows what it measured; configurations that would start after the budget
are skipped and listed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _synthetic import load_ml100k, synthetic_ratings  # noqa: E402

SIZES = {
    "tiny": (300, 200, 6_000),
    "small": (943, 1682, 20_000),
    "100k": (943, 1682, 100_000),
    "1m": (6040, 3706, 1_000_209),
    "10m": (69_878, 10_677, 10_000_054),
    "netflix": (480_189, 17_770, 100_480_507),
}
# the Netflix shape only with these (K, chains): a BCSR sweep at K = 64 would take seconds
NETFLIX_CONFIGS = {(10, 1), (10, 4), (32, 1)}
ML100K_CANDIDATES = (
    "shared/data/ml-100k/u.data",
    "../shared/data/ml-100k/u.data",
    "data/ml-100k/u.data",
)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


# --------------------------------------------------------------------------- worker
def worker(
    size: str,
    Ks: list[int],
    chains: list[int],
    paths: list[str],
    sweeps: int,
    deadline: float,
    seed: int,
) -> None:
    import jax
    import jax.numpy as jnp

    import bmczoo as bmc
    from bmczoo.inference import gibbs

    dev = jax.devices()[0]

    def peak():
        try:
            st = dev.memory_stats() or {}
        except Exception:
            st = {}
        return st.get("peak_bytes_in_use")

    def emit(**kw):
        print("RESULT " + json.dumps(kw), flush=True)

    m1, m2, n = SIZES[size]
    t0 = time.perf_counter()
    rows, cols, vals = synthetic_ratings(m1, m2, n, seed=seed)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    data = bmc.RatingData(rows, cols, vals, (m1, m2))
    del rows, cols, vals
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    data, _ = data.centered()
    problem = gibbs.build_problem(data, tau=1.0, dtype=jnp.float32)
    jax.block_until_ready(problem)
    t_problem = time.perf_counter() - t0
    del data
    emit(
        kind="build",
        size=size,
        n=n,
        shape=[m1, m2],
        t_generate=t_gen,
        t_ratingdata=t_data,
        t_problem=t_problem,
        peak=peak(),
        device=str(dev),
        platform=dev.platform,
        jax=jax.__version__,
    )
    prior = bmc.priors.InverseGamma()

    @jax.jit
    def run(state, problem, k):
        return jax.lax.fori_loop(0, k, lambda i, s: gibbs.step(s, problem, prior), state)

    for K in Ks:
        for C in chains:
            if size == "netflix" and (K, C) not in NETFLIX_CONFIGS:
                continue
            for path in paths:
                if time.time() > deadline:
                    emit(kind="skipped", size=size, K=K, chains=C, path=path)
                    continue
                prob = dataclasses.replace(
                    problem,
                    rows=problem.rows.with_hot_path(path),
                    cols=problem.cols.with_hot_path(path),
                )
                try:
                    state = gibbs.init(jax.random.split(jax.random.key(seed), C), prob, prior, K)
                    t0 = time.perf_counter()
                    compiled = run.lower(state, prob, 1).compile()
                    t_compile = time.perf_counter() - t0
                    try:
                        ma = compiled.memory_analysis()
                        temp = int(ma.temp_size_in_bytes)
                    except Exception:
                        temp = None
                    state = jax.block_until_ready(compiled(state, prob, 1))  # warm-up
                    t0 = time.perf_counter()
                    state = jax.block_until_ready(compiled(state, prob, 1))
                    one = time.perf_counter() - t0
                    k = int(max(1, min(sweeps, (deadline - time.time()) / 3 / max(one, 1e-6))))
                    t0 = time.perf_counter()
                    state = jax.block_until_ready(compiled(state, prob, k))
                    per = (time.perf_counter() - t0) / k
                    finite = bool(jnp.all(jnp.isfinite(state.M))) and bool(
                        jnp.all(jnp.isfinite(state.N))
                    )
                    emit(
                        kind="sweep",
                        size=size,
                        K=K,
                        chains=C,
                        path=path,
                        sweep=per,
                        first=one,
                        sweeps=k,
                        compile=t_compile,
                        temp=temp,
                        peak=peak(),
                        finite=finite,
                    )
                except Exception as err:  # e.g. out of device memory: report, go on
                    emit(
                        kind="error",
                        size=size,
                        K=K,
                        chains=C,
                        path=path,
                        error=f"{type(err).__name__}: {err}"[:300],
                    )
                del state


def worker_ml100k(path: str, samples: int, seed: int) -> None:
    import jax

    import bmczoo as bmc

    rows, cols, vals, shape = load_ml100k(path)
    rng = np.random.default_rng(seed)
    test_mask = rng.random(rows.size) < 0.2
    train = bmc.RatingData(rows[~test_mask], cols[~test_mask], vals[~test_mask], shape)
    test = bmc.RatingData(rows[test_mask], cols[test_mask], vals[test_mask], shape)
    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=10,
        prior=bmc.priors.InverseGamma(),
        num_warmup=samples // 2,
        num_samples=samples,
        thinning=5,
        num_chains=1,
        seed=seed,
        progress_bar=False,
        test=test,
    )
    t_fit = time.perf_counter() - t0
    print(
        "RESULT "
        + json.dumps(
            dict(
                kind="ml100k",
                rmse=float(fit.rmse(test)),
                seconds=t_fit,
                n_train=train.n,
                n_test=test.n,
                sweeps=samples + samples // 2,
                device=str(jax.devices()[0]),
            )
        ),
        flush=True,
    )


# --------------------------------------------------------------------------- driver
def _mb(x) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f}MB"


def _ms(t) -> str:
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.3f} s"


def _stream(args: list[str], timeout: float):
    """Run a worker, yield its RESULT dicts as they are printed (stderr passed through)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.time() + timeout
    try:
        for line in proc.stdout:
            if line.startswith("RESULT "):
                yield json.loads(line[len("RESULT ") :])
            if time.time() > end:
                proc.kill()
                print(f"  [{' '.join(args[:2])}: killed at the budget]", flush=True)
                break
        proc.wait(timeout=max(1.0, end - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        print(f"  [{' '.join(args[:2])}: killed at the budget]", flush=True)
    if proc.returncode not in (0, None, -9):
        err = proc.stderr.read()[-3000:]
        print(f"  [{' '.join(args[:2])} failed, rc={proc.returncode}]\n{err}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes",
        default="100k,1m,10m,netflix",
        help=f"comma-separated subset of {','.join(SIZES)}",
    )
    ap.add_argument("--K", default="10,32,64")
    ap.add_argument("--chains", default="1,4")
    ap.add_argument("--paths", default="bcsr,segment")
    ap.add_argument(
        "--sweeps", type=int, default=10, help="timed sweeps per configuration (fewer if slow)"
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=420.0,
        help="seconds for the whole check (no new config after)",
    )
    ap.add_argument(
        "--ml100k", default=os.environ.get("BMCZOO_ML100K", ""), help="path of ml-100k/u.data"
    )
    ap.add_argument("--ml100k-samples", type=int, default=200)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes and K: checks the script runs (any backend)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker == "ml100k":
        return worker_ml100k(a.ml100k, a.ml100k_samples, a.seed)
    if a.worker:
        return worker(
            a.worker, _ints(a.K), _ints(a.chains), a.paths.split(","), a.sweeps, a.deadline, a.seed
        )
    if a.smoke:
        a.sizes, a.K, a.chains, a.sweeps, a.ml100k_samples = "tiny,small", "2,3", "1,2", 3, 20
    start = time.time()
    deadline = start + a.budget
    sizes = [s.strip() for s in a.sizes.split(",") if s.strip()]
    for s in sizes:
        if s not in SIZES:
            raise SystemExit(f"unknown size {s!r}; choose from {', '.join(SIZES)}")
    ml = a.ml100k or next((p for p in ML100K_CANDIDATES if Path(p).exists()), "")
    print(
        f"gpu_check: sizes {sizes}, K {a.K}, chains {a.chains}, paths {a.paths}, budget {a.budget:.0f}s",
        flush=True,
    )
    rows = []
    # the ML-100K fit first (small, and the RMSE is wanted even when the large sizes time out)
    if ml and Path(ml).exists():
        for r in _stream(
            [
                "--worker",
                "ml100k",
                "--ml100k",
                ml,
                "--ml100k-samples",
                str(a.ml100k_samples),
                "--seed",
                str(a.seed),
            ],
            max(30.0, deadline - time.time()),
        ):
            print(
                f"ML-100K ({ml}): Gibbs K=10, {r['sweeps']} sweeps, 80/20 random split: test RMSE {r['rmse']:.4f} "
                f"({r['seconds']:.1f}s incl. compile, {r['device']})",
                flush=True,
            )
    else:
        print("ML-100K: no u.data found (--ml100k PATH or BMCZOO_ML100K); skipped", flush=True)
    for s in sizes:
        left = deadline - time.time()
        if left < 10:
            print(f"{s}: skipped (budget spent)", flush=True)
            continue
        args = [
            "--worker",
            s,
            "--K",
            a.K,
            "--chains",
            a.chains,
            "--paths",
            a.paths,
            "--sweeps",
            str(a.sweeps),
            "--deadline",
            str(deadline),
            "--seed",
            str(a.seed),
        ]
        for r in _stream(args, left + 30):
            if r["kind"] == "build":
                print(
                    f"{s}: {r['shape'][0]} x {r['shape'][1]}, {r['n']:,} ratings on {r['device']} (jax {r['jax']}): "
                    f"generate {r['t_generate']:.1f}s, RatingData {r['t_ratingdata']:.1f}s, problem "
                    f"{r['t_problem']:.1f}s (build {r['t_ratingdata'] + r['t_problem']:.1f}s), peak {_mb(r['peak'])}",
                    flush=True,
                )
            elif r["kind"] == "sweep":
                rows.append(r)
                print(
                    f"  {s:8s} K={r['K']:<3d} C={r['chains']}  {r['path']:8s} sweep {_ms(r['sweep']):>10s} "
                    f"(first {_ms(r['first'])}, {r['sweeps']} timed)  compile {r['compile']:.1f}s  "
                    f"temp {_mb(r['temp'])}  peak {_mb(r['peak'])}{'' if r['finite'] else '  NON-FINITE'}",
                    flush=True,
                )
            elif r["kind"] == "skipped":
                print(
                    f"  {s:8s} K={r['K']:<3d} C={r['chains']}  {r['path']:8s} skipped (budget)",
                    flush=True,
                )
            else:
                print(
                    f"  {s:8s} K={r['K']:<3d} C={r['chains']}  {r['path']:8s} ERROR {r['error']}",
                    flush=True,
                )
    if rows:
        print("\nsummary (sweep time; segment / bcsr):")
        print(f"{'size':8s} {'K':>3s} {'C':>2s} {'bcsr':>11s} {'segment':>11s} {'ratio':>6s}")
        keyed = {(r["size"], r["K"], r["chains"], r["path"]): r["sweep"] for r in rows}
        for s, K, C in dict.fromkeys((r["size"], r["K"], r["chains"]) for r in rows):
            b, g = keyed.get((s, K, C, "bcsr")), keyed.get((s, K, C, "segment"))
            ratio = f"{g / b:6.2f}" if b and g else ""
            print(
                f"{s:8s} {K:3d} {C:2d} {_ms(b) if b else '-':>11s} {_ms(g) if g else '-':>11s} {ratio}"
            )
    print(f"\ngpu_check: done in {time.time() - start:.0f}s", flush=True)


if __name__ == "__main__":
    main()

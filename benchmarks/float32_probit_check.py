"""The float32 probit and ordered-probit fits on ML-100K run to the end.

    python benchmarks/float32_probit_check.py                    # both parts
    python benchmarks/float32_probit_check.py --part probit --priors gamma
    python benchmarks/float32_probit_check.py --part probit --old-routing --priors inverse-gamma

(a) ``--part probit``: binarised ML-100K (``liked = rating >= 4``, ``data.split(0.2,
seed=0)``), ``bmc.fit(train, K=10, likelihood=Probit(), method="gibbs", num_warmup=100,
num_samples=400, seed=0, num_chains=1)`` for the priors ``InverseGamma(1, 0.1)``,
``Gamma()``, ``Discrete()``, ``NormalWishart()``, in float32 and float64: every fit must run
to the end, and the float32 test AUC must be within ``--auc-tol`` (0.005) of the float64
one.

(b) ``--part ordered``: the official fold u3 (test = lines 40001-60000 of ``u.data``),
``NormalWishart()`` + ``OrderedProbit()`` + ``biases=True``, K = 10, 4 chains, 100 + 400
sweeps, seed 0, float32: must run to the end (test RMSE of the expected level printed).

``--old-routing`` restores the truncated-normal sampler's routing without the guard on tiny
probabilities (``truncnorm._BULK_MIN_P = 0``) and logs every latent draw made from the
generator's smallest uniform (``u = tiny``): with it the float32 probit fit fails, and the
log shows a ``u = tiny`` draw at the failing sweep -- the cause.

Exit status 0 when every check passes, 1 otherwise.  JAX's persistent compilation cache
(``--cache``, default ``.jax_cache/`` of the repository) is used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL_100K = REPO.parent / "shared" / "data" / "ml-100k"
PRIORS = ("inverse-gamma", "gamma", "discrete", "normal-wishart")


def make_prior(name):
    import bmczoo as bmc

    return {
        "inverse-gamma": lambda: bmc.priors.InverseGamma(1.0, 0.1),
        "gamma": bmc.priors.Gamma,
        "discrete": bmc.priors.Discrete,
        "normal-wishart": bmc.priors.NormalWishart,
        "fixed": bmc.priors.Fixed,
    }[name]()


def official_fold(data, fold, path):
    """``(train, test)`` of an official fold: ``data.official_split`` when available, else
    the u1..u5 rule of ``mku.sh`` (test = the fold's block of 20,000 lines of u.data)."""
    if hasattr(data, "official_split"):
        return data.official_split(fold)
    import numpy as np

    k = int(fold[1])
    idx = np.arange(data.n)
    test = (idx >= 20000 * (k - 1)) & (idx < 20000 * k)
    return data.subset(np.flatnonzero(~test)), data.subset(np.flatnonzero(test))


def log_tiny_uniforms():
    """Wrap the latent draw so that every call with a ``u = tiny`` entry prints a line."""
    import jax
    import jax.numpy as jnp

    from bmczoo.likelihoods import truncnorm

    original = truncnorm.sample_uniform

    def logged(u, mean, lo, hi):
        z = original(u, mean, lo, hi)
        tiny = jnp.finfo(u.dtype).tiny
        jax.debug.callback(
            lambda nt, nbad: (
                print(f"  latent draw: {int(nt)} u = tiny, {int(nbad)} non-finite z", flush=True)
                if nt
                else None
            ),
            jnp.sum(u <= tiny),
            jnp.sum(~jnp.isfinite(z)),
        )
        return z

    truncnorm.sample_uniform = logged


def run_fit(train, test, prior, likelihood, dtype, chains, warmup, samples, biases=False):
    import bmczoo as bmc

    t0 = time.perf_counter()
    try:
        fit = bmc.fit(
            train,
            K=10,
            prior=make_prior(prior),
            likelihood=likelihood,
            method="gibbs",
            num_warmup=warmup,
            num_samples=samples,
            seed=0,
            num_chains=chains,
            dtype=dtype,
            biases=biases,
            progress_bar=False,
        )
    except (FloatingPointError, ValueError) as err:
        return None, f"{type(err).__name__}: {err}", time.perf_counter() - t0
    return fit, None, time.perf_counter() - t0


def part_probit(a, data, out):
    import numpy as np

    import bmczoo as bmc
    from bmczoo.evaluation import auc

    binary = data.with_values((np.asarray(data.values) >= 4).astype(np.float64))
    train, test = binary.split(0.2, seed=0)
    ok = True
    print("| prior | float32 AUC | float64 AUC | |diff| | float32 s | float64 s |")
    print("|---|---|---|---|---|---|")
    for prior in a.priors:
        res = {}
        for dt in a.dtypes:
            fit, err, sec = run_fit(
                train, test, prior, bmc.likelihoods.Probit(), dt, 1, a.warmup, a.samples
            )
            res[dt] = {
                "seconds": sec,
                "error": err,
                "auc": None
                if fit is None
                else auc(test.values, fit.predict_proba(test.rows, test.cols)),
            }
            if err:
                ok = False
                print(f"  {prior} {dt}: {err}", flush=True)
        diff = None
        if all(res.get(d, {}).get("auc") is not None for d in ("float32", "float64")):
            diff = abs(res["float32"]["auc"] - res["float64"]["auc"])
            ok &= diff <= a.auc_tol

        def f(x, fmt="{:.4f}"):
            return "-" if x is None else fmt.format(x)

        print(
            f"| {prior} | {f(res.get('float32', {}).get('auc'))} | {f(res.get('float64', {}).get('auc'))} | "
            f"{f(diff)} | {f(res.get('float32', {}).get('seconds'), '{:.0f}')} | "
            f"{f(res.get('float64', {}).get('seconds'), '{:.0f}')} |",
            flush=True,
        )
        out["probit"][prior] = dict(res, auc_diff=diff)
    return ok


def part_ordered(a, data, out):
    import bmczoo as bmc

    train, test = official_fold(data, "u3", a.data)
    fit, err, sec = run_fit(
        train,
        test,
        "normal-wishart",
        bmc.likelihoods.OrderedProbit(),
        "float32",
        4,
        a.warmup,
        a.samples,
        biases=True,
    )
    rmse = None if fit is None else fit.rmse(test)
    print(
        f"ordered probit, u3, NormalWishart + biases, 4 chains, float32: "
        f"{err or f'ran to the end, test RMSE {rmse:.4f}'} ({sec:.0f} s)",
        flush=True,
    )
    out["ordered"] = {"error": err, "rmse": rmse, "seconds": sec}
    return err is None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data", default=str(REAL_100K), help="ML-100K folder or u.data (default ../shared)"
    )
    ap.add_argument("--part", choices=("probit", "ordered", "all"), default="all")
    ap.add_argument("--priors", nargs="+", choices=PRIORS, default=list(PRIORS))
    ap.add_argument(
        "--dtypes", nargs="+", choices=("float32", "float64"), default=["float32", "float64"]
    )
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--auc-tol", type=float, default=0.005)
    ap.add_argument(
        "--old-routing",
        action="store_true",
        help="the sampler without the tiny-probability guard, logging u = tiny draws",
    )
    ap.add_argument(
        "--cache", default=str(REPO / ".jax_cache"), help="persistent compilation cache folder"
    )
    ap.add_argument("--out", help="results JSON")
    a = ap.parse_args(argv)

    import jax

    jax.config.update("jax_compilation_cache_dir", a.cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    import bmczoo as bmc
    from bmczoo.likelihoods import truncnorm

    if a.old_routing:
        truncnorm._BULK_MIN_P = 0.0
        log_tiny_uniforms()
    data = bmc.datasets.load_movielens("100k", a.data, download=False)
    print(
        f"ML-100K {data.shape}, {data.n} ratings; {a.warmup} + {a.samples} sweeps; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    out = {"settings": {k: v for k, v in vars(a).items()}, "probit": {}}
    ok = True
    if a.part in ("probit", "all"):
        ok &= part_probit(a, data, out)
    if a.part in ("ordered", "all"):
        ok &= part_ordered(a, data, out)
    print("all checks passed" if ok else "CHECK FAILED", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Ordinal and binary likelihoods on ML-100K: Gaussian vs ordered probit, probit vs logistic regression.

    python benchmarks/ordinal_movielens.py --out ordinal.json
    python benchmarks/ordinal_movielens.py --warmup 20 --samples 40 --chains 1 --out quick.json

The split is ``compare_peers.load_split``: the ``numpy.random.default_rng(seed)``
permutation of the ratings, the first 80% train, the rest test (the README's tables).
Every bmczoo fit is ``NormalWishart()`` rows, ``biases=True``, rank ``--K`` (10), Gibbs with
``--warmup`` burn-in + ``--samples`` kept sweeps (every one averaged) in ``--chains``
chains side by side; no setting is chosen on the test data.

(a) Stars 1-5.  ``LearnedNoise()`` (Gaussian, the README's recommended member) against
``OrderedProbit()`` (levels and cut points learned from the data):

* test RMSE of the expected rating (the Gaussian's posterior predictive mean, clipped to
  [1, 5] as the fit does; the ordered probit's ``sum_l l P(Y = l)``);
* level log-loss, the mean ``-log P(Y = y)`` of the test ratings.  The ordered probit's
  level probabilities are exact (``fit.log_predictive_density``).  The Gaussian has a
  density, not level probabilities: its predictive is discretised,
  ``P(level l) = Phi((u_l - m) / s) - Phi((d_l - m) / s)`` with ``(d_l, u_l)`` the
  mid-points to the adjacent levels (``-inf`` / ``+inf`` for 1 and 5), ``m`` and ``s``
  the predictive mean and sd of ``fit.predict(..., return_std=True)`` (a moment-matched
  Gaussian of the predictive; ``bmczoo.evaluation.gaussian_level_proba``).

(b) Binary, ``liked = rating >= 4``.  ``Probit()`` on the binarised training ratings:
test AUC, log-loss and accuracy at 0.5 of ``fit.predict_proba``; beside it the two star
models of (a) scored on the same binary outcome (``P(level >= 4)`` from their level
probabilities), and a baseline: L2-regularised logistic regression on one-hot user and
item indicators (biases only; scikit-learn's ``LogisticRegression``, ``C`` = 1, when
importable, else the same objective by ``scipy.optimize``).

Prints a markdown table and writes every number (and the seconds of each fit, wall clock
including compilation) as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_peers import REAL_100K, load_split  # noqa: E402  (the README's split, one copy)


def _fit(train, test, likelihood, a):
    import bmczoo as bmc

    t0 = time.perf_counter()
    fit = bmc.fit(
        train,
        K=a.K,
        prior=bmc.priors.NormalWishart(),
        likelihood=likelihood,
        biases=True,
        num_warmup=a.warmup,
        num_samples=a.samples,
        thinning=1,
        num_chains=a.chains,
        test=test,
        seed=a.seed,
        progress_bar=False,
    )
    return fit, time.perf_counter() - t0


def _binary_from_levels(probs, levels, threshold):
    """``P(level >= threshold)`` from (P, L) level probabilities."""
    return probs[:, np.asarray(levels) >= threshold].sum(axis=1)


def logistic_onehot(rows, cols, y, shape, rows_te, cols_te, C: float = 1.0):
    """``P(y = 1)`` at the test entries of an L2-regularised logistic regression (penalty
    ``||w||^2 / (2 C)``, intercept unpenalised) on one-hot users and items."""
    import scipy.sparse as sps

    m1, m2 = shape

    def onehot(r, c):
        n = r.size
        ind = np.stack([r, m1 + c], axis=1).ravel()
        return sps.csr_matrix((np.ones(2 * n), ind, np.arange(0, 2 * n + 1, 2)), shape=(n, m1 + m2))

    X, Xte = onehot(rows, cols), onehot(rows_te, cols_te)
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        LogisticRegression = None
    if LogisticRegression is not None:
        model = LogisticRegression(C=C, max_iter=2000).fit(X, y)
        return model.predict_proba(Xte)[:, 1], "scikit-learn LogisticRegression"
    from scipy.optimize import minimize
    from scipy.special import expit, log_expit

    s = 2.0 * y - 1.0

    def objective(params):
        b, w = params[0], params[1:]
        f = s * (X @ w + b)
        grad_f = -s * expit(-f)
        return (
            -np.sum(log_expit(f)) + 0.5 * w @ w / C,
            np.concatenate([[grad_f.sum()], X.T @ grad_f + w / C]),
        )

    res = minimize(
        objective, np.zeros(1 + m1 + m2), jac=True, method="L-BFGS-B", options={"maxiter": 2000}
    )
    return expit(Xte @ res.x[1:] + res.x[0]), "scipy L-BFGS"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data", default=str(REAL_100K), help="ratings table (default: ../shared ML-100K u.data)"
    )
    ap.add_argument("--K", type=int, default=10, help="rank (default 10)")
    ap.add_argument("--warmup", type=int, default=100, help="burn-in sweeps (default 100)")
    ap.add_argument("--samples", type=int, default=400, help="kept sweeps (default 400)")
    ap.add_argument("--chains", type=int, default=4, help="chains side by side (default 4)")
    ap.add_argument(
        "--threshold", type=float, default=4.0, help="liked = rating >= THRESHOLD (default 4)"
    )
    ap.add_argument("--seed", type=int, default=0, help="split and sampler seed (default 0)")
    ap.add_argument("--out", required=True, help="results JSON")
    a = ap.parse_args(argv)
    import bmczoo as bmc
    from bmczoo.evaluation import classification_metrics, gaussian_level_proba, level_log_loss

    path = Path(a.data)
    if not path.exists():
        print(f"ordinal_movielens: {path} not found", file=sys.stderr)
        return 2
    tr, te, rows, cols, vals, shape = load_split(path, a.seed)
    train = bmc.RatingData(rows[tr], cols[tr], vals[tr], shape)
    test = bmc.RatingData(rows[te], cols[te], vals[te], shape)
    levels = np.unique(vals[tr])
    level_idx = np.searchsorted(levels, vals[te])
    y_te = (vals[te] >= a.threshold).astype(np.float64)
    print(
        f"data {path} ({shape[0]} x {shape[1]}, {vals.size} ratings, 80/20 split seed {a.seed}); K={a.K}, "
        f"{a.warmup} burn-in + {a.samples} kept sweeps, {a.chains} chains; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = {
        "settings": {
            k: getattr(a, k)
            for k in ("data", "K", "warmup", "samples", "chains", "threshold", "seed")
        },
        "load_before": os.getloadavg()[0],
        "rows": [],
    }

    # (a) stars: Gaussian (learned noise) vs ordered probit
    gauss, sec = _fit(train, test, bmc.likelihoods.LearnedNoise(), a)
    mean, sd = gauss.predict(test.rows, test.cols, return_std=True)
    pg = gaussian_level_proba(mean, sd, levels)
    rg = {
        "model": "Gaussian LearnedNoise (stars)",
        "seconds": sec,
        "rmse": gauss.rmse(test),
        "level_log_loss": level_log_loss(pg, level_idx),
        **classification_metrics(y_te, _binary_from_levels(pg, levels, a.threshold)),
    }
    results["rows"].append(rg)
    print(f"gaussian: {rg}", flush=True)
    del gauss

    op, sec = _fit(train, test, bmc.likelihoods.OrderedProbit(), a)
    po = op.predict_proba(test.rows, test.cols)
    ro = {
        "model": "OrderedProbit (stars)",
        "seconds": sec,
        "rmse": op.rmse(test),
        "level_log_loss": -op.log_predictive_density(test),
        "level_log_loss_from_proba": level_log_loss(po, level_idx),
        "cuts_mean": np.asarray(op.samples["cuts"]).reshape(-1, levels.size - 1).mean(0).tolist()
        if "cuts" in op.samples
        else None,
        **classification_metrics(y_te, _binary_from_levels(po, levels, a.threshold)),
    }
    results["rows"].append(ro)
    print(f"ordered probit: {ro}", flush=True)
    del op

    # (b) binary: probit vs logistic regression on one-hot users and items
    btrain = bmc.RatingData(rows[tr], cols[tr], (vals[tr] >= a.threshold).astype(np.float64), shape)
    btest = bmc.RatingData(rows[te], cols[te], y_te, shape)
    pb, sec = _fit(btrain, btest, bmc.likelihoods.Probit(), a)
    rp = {
        "model": "Probit (binarised)",
        "seconds": sec,
        "threshold_fitted": pb.info.likelihood.threshold,
        **classification_metrics(y_te, pb.predict_proba(btest.rows, btest.cols)),
    }
    results["rows"].append(rp)
    print(f"probit: {rp}", flush=True)
    del pb

    t0 = time.perf_counter()
    p_lr, how = logistic_onehot(rows[tr], cols[tr], btrain.values, shape, rows[te], cols[te])
    rl = {
        "model": f"logistic regression, one-hot users + items ({how}, C=1)",
        "seconds": time.perf_counter() - t0,
        **classification_metrics(y_te, p_lr),
    }
    results["rows"].append(rl)
    print(f"logistic: {rl}", flush=True)
    results["load_after"] = os.getloadavg()[0]

    def f(x, fmt="{:.4f}"):
        return "—" if x is None else fmt.format(x)

    print(
        f"\n| model | test RMSE (stars) | level log-loss | AUC (>= {a.threshold:g}) | log-loss (>= {a.threshold:g}) "
        "| accuracy | seconds |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results["rows"]:
        print(
            f"| {r['model']} | {f(r.get('rmse'))} | {f(r.get('level_log_loss'))} | {f(r['auc'])} | "
            f"{f(r['log_loss'])} | {f(r['accuracy'])} | {f(r['seconds'], '{:.0f}')} |"
        )
    Path(a.out).expanduser().parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).expanduser().write_text(json.dumps(results, indent=2))
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""ML-100K as a user x item x time array: bmczoo's matrix and tensor (CP) members against
SMURFF's matrix and tensor BPMF, test RMSE and milliseconds per sweep, one run.

    python benchmarks/tensors.py                      # K = 10, 100 + 400 sweeps, one chain
    python benchmarks/tensors.py --bins 20 --K 10 --out tensors.json
    python benchmarks/tensors.py --no-peers           # bmczoo only

The data: ML-100K's ratings with each rating's time cut into ``--bins`` equal-count bins
of the timestamps (:meth:`bmczoo.data.TensorData.from_ratings`), split 80/20 as the
README's tables (``split(0.2, seed=0)``: the same ratings for the matrix and the array).
Every member and peer runs ``--warmup`` + ``--samples`` sweeps, one chain, every draw
after the warm-up averaged, rank ``K``; nothing is chosen on the test ratings.

bmczoo's members (``bmc.fit`` on a ``RatingData`` or a ``TensorData``):

* ``matrix-bpmf``: Normal-Wishart rows and learned noise (the BPMF model SMURFF runs);
* ``matrix-ig``: the inverse-gamma column scales, learned noise and biases;
* ``tensor-ig``: the CP model with the inverse-gamma column scales and learned noise
  (without the column moves, whose scale walk runs every sweep);
* ``tensor-ig-biases``: the same with a bias per mode (user, item, time bin);
* ``tensor-discrete-biases``: the discrete prior (its column moves every fourth sweep)
  with learned noise and biases per mode;
* ``tensor-nw``: Normal-Wishart rows per mode (each mode's mean and precision: the model
  of SMURFF's tensor BPMF, Xiong et al.'s BPTF without its time-smoothness prior) and
  learned noise;
* ``tensor-nw-biases``: the same with biases per mode.

Peers (only when importable; never dependencies): SMURFF's ``TrainSession`` with normal
(Normal-Wishart) priors on every mode and its ``AdaptiveNoise``, on the matrix
(``scipy.sparse``) and on the array (``smurff.SparseTensor``), the ratings centred by
their training mean as bmczoo does.  Timing: bmczoo's milliseconds per sweep after
compilation (the fit's own timing: the kept sweeps' wall time); SMURFF's wall time of
the whole session over its iterations.  The machine (CPU model) is recorded.
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

from _peers import cpu_model, importable  # noqa: E402

REAL_100K = HERE.parent.parent / "shared" / "data" / "ml-100k"
MEMBERS = (
    "matrix-bpmf",
    "matrix-ig",
    "tensor-ig",
    "tensor-ig-biases",
    "tensor-discrete-biases",
    "tensor-nw",
    "tensor-nw-biases",
)


def member(name: str) -> dict:
    import bmczoo as bmc

    learned = bmc.likelihoods.LearnedNoise()
    return {
        "matrix-bpmf": dict(prior=bmc.priors.NormalWishart(), likelihood=learned),
        "matrix-ig": dict(prior=bmc.priors.InverseGamma(), likelihood=learned, biases=True),
        "tensor-ig": dict(prior=bmc.priors.InverseGamma(), likelihood=learned, column_moves=False),
        "tensor-ig-biases": dict(
            prior=bmc.priors.InverseGamma(), likelihood=learned, biases=True, column_moves=False
        ),
        "tensor-discrete-biases": dict(
            prior=bmc.priors.Discrete(), likelihood=learned, biases=True
        ),
        "tensor-nw": dict(prior=bmc.priors.NormalWishart(), likelihood=learned),
        "tensor-nw-biases": dict(prior=bmc.priors.NormalWishart(), likelihood=learned, biases=True),
    }[name]


def run_member(name, data, K, warmup, samples, seed):
    """``(test RMSE, ms per sweep after compilation)`` of one bmczoo member."""
    import bmczoo as bmc

    train, test = data["tensor" if name.startswith("tensor") else "matrix"]
    fit = bmc.fit(
        train,
        K=K,
        test=test,
        num_warmup=warmup,
        num_samples=samples,
        thinning=1,
        num_chains=1,
        seed=seed,
        progress_bar=False,
        **member(name),
    )
    if name.startswith("tensor"):
        ms = 1e3 * float(np.mean(fit.sweep_seconds[1:]))
    else:
        ms = 1e3 * float(fit.run_stats()["sweep_seconds"])
    return fit.rmse(test), ms


def run_smurff(data, key, K, warmup, samples, seed):
    """SMURFF's BPMF on the matrix (``key="matrix"``) or the array (``"tensor"``)."""
    import pandas as pd
    import scipy.sparse as sps
    import smurff

    train, test = data[key]
    mean = float(np.mean(train.values))
    if key == "matrix":
        ytr = sps.coo_matrix((train.values - mean, (train.rows, train.cols)), shape=train.shape)
        yte = sps.coo_matrix((test.values - mean, (test.rows, test.cols)), shape=test.shape)
        priors = ["normal", "normal"]
    else:

        def frame(t):
            cols = {f"m{d}": t.indices[:, d].astype(np.int64) for d in range(t.ndim)}
            return pd.DataFrame({**cols, "value": np.asarray(t.values, np.float64) - mean})

        ytr = smurff.SparseTensor(frame(train), train.shape)
        yte = smurff.SparseTensor(frame(test), test.shape)
        priors = ["normal"] * train.ndim
    t0 = time.perf_counter()
    session = smurff.TrainSession(
        priors=priors, num_latent=K, burnin=warmup, nsamples=samples, seed=seed, verbose=0
    )
    session.addTrainAndTest(ytr, yte, smurff.AdaptiveNoise(1.0, 10.0))
    predictions = session.run()
    seconds = time.perf_counter() - t0
    lo, hi = float(np.min(train.values)), float(np.max(train.values))
    pred = np.clip(np.array([p.pred_avg for p in predictions]) + mean, lo, hi)
    y = np.array([p.val for p in predictions]) + mean
    return float(np.sqrt(np.mean((pred - y) ** 2))), 1e3 * seconds / (warmup + samples)


def load(path, bins: int):
    import bmczoo as bmc

    ratings = bmc.datasets.load_movielens("100k", path, download=False)
    tensor = bmc.TensorData.from_ratings(ratings, time_bins=bins)
    return {"matrix": ratings.split(0.2, seed=0), "tensor": tensor.split(0.2, seed=0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(REAL_100K), help="the ml-100k folder")
    ap.add_argument("--bins", type=int, default=20, help="equal-count time bins (default 20)")
    ap.add_argument("--K", type=int, default=10, help="rank (default 10)")
    ap.add_argument("--warmup", type=int, default=100, help="warm-up sweeps (default 100)")
    ap.add_argument("--samples", type=int, default=400, help="kept sweeps (default 400)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", default=",".join(MEMBERS), help="comma-separated members")
    ap.add_argument("--no-peers", action="store_true", help="skip SMURFF")
    ap.add_argument("--out", help="write the results as JSON here")
    a = ap.parse_args(argv)
    data = load(a.data, a.bins)
    rows = []
    machine = {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_start": list(os.getloadavg())}
    print(f"# ML-100K, {a.bins} time bins, K = {a.K}, {a.warmup} + {a.samples} sweeps, one chain")
    print(f"# {machine['cpu']}, {machine['cpus']} CPUs")
    todo = [(m, "bmczoo") for m in a.members.split(",") if m]
    if not a.no_peers and importable("smurff"):
        todo += [("smurff-matrix", "smurff"), ("smurff-tensor", "smurff")]
    for name, lib in todo:
        if lib == "bmczoo":
            rmse, ms = run_member(name, data, a.K, a.warmup, a.samples, a.seed)
        else:
            rmse, ms = run_smurff(data, name.split("-")[1], a.K, a.warmup, a.samples, a.seed)
        rows.append({"member": name, "rmse": rmse, "ms_per_sweep": ms})
        print(f"{name:>24s}  rmse {rmse:.4f}  {ms:7.2f} ms/sweep", flush=True)
    machine["load_end"] = list(os.getloadavg())
    if a.out:
        Path(a.out).write_text(
            json.dumps({"args": vars(a), "machine": machine, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A subset of ``benchmarks/robustness.py``: the latent-Gaussian (probit, ordered-probit)
paths in float32 on the paper's simulation, where the truncated-normal sampler draws the
most extreme uniforms, for two priors with and without biases.

Every fit must run to the end with finite predictions, and each must beat the baseline
that ignores the model: the probit's test AUC above 1/2 (chance), the ordered probit's
RMSE below that of predicting the training mean level everywhere.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "robustness", REPO / "benchmarks" / "robustness.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_latent_gaussian_cells_run_to_the_end(tmp_path):
    robustness = _script()
    out = tmp_path / "matrix.json"
    rc = robustness.main(
        [
            "--data",
            "sim",
            "--priors",
            "inverse-gamma",
            "normal-wishart",
            "--likelihoods",
            "probit",
            "ordered",
            "--biases",
            "both",
            "--seeds",
            "0",
            "--sweeps",
            "300",
            "--sim-m",
            "100",
            "--nice",
            "0",
            "--out",
            str(out),
        ]
    )
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == 8
    failures = [
        (c["prior"], c["likelihood"], c["biases"], r["error"])
        for c in cells
        for r in c["seeds"].values()
        if r["error"]
    ]
    assert not failures and rc == 0, failures

    class A:
        sim_m = 100

    (train, test) = robustness.load_data("sim", A)["ordered"]
    constant_rmse = float(np.sqrt(np.mean((test.values - np.mean(train.values)) ** 2)))
    for c in cells:
        metric = c["seeds"]["0"]["metric"]
        if c["likelihood"] == "probit":
            assert metric > 0.5, c
        else:
            assert metric < constant_rmse, (c, constant_rmse)

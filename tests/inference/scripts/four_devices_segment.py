"""Run by ``tests/inference/test_hot_path.py`` in a child process with four CPU devices:
a Gibbs run and a VB run sharded over four devices with the segment-sum hot path (whose
padding entries of the blocks must add nothing), and, where the compiled Gram kernel is
built, a Gibbs run with biases and learned noise sharded on the "gram" path (the kernel
at every K here), against the one-device BCSR runs; prints the largest differences as
JSON."""

from __future__ import annotations

import json

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bmczoo as bmc  # noqa: E402
from bmczoo import _native  # noqa: E402
from bmczoo import linalg as kr  # noqa: E402


def main():
    assert len(jax.devices()) == 4, jax.devices()
    sim = bmc.datasets.simulate_paper(43, seed=2, m2=30)  # not multiples of 4: padding rows
    tr = sim.train
    train = tr.subset(np.flatnonzero((tr.rows != 5) & (tr.cols != 7)))  # an empty row and column
    out = {}
    runs = {
        "gibbs": (
            dict(K=3, num_warmup=4, num_samples=8, thinning=2, num_chains=2, store_factors=True),
            ("M", "N", "gamma"),
        ),
        "vb": (dict(K=3, method="vb", max_iter=6, tol=0.0, num_chains=2), ("m", "n", "elbo")),
    }
    if _native.available():
        kr.GRAM_MIN_K = 1  # before anything is traced
        runs["gibbs-gram"] = (
            dict(
                K=3,
                num_warmup=4,
                num_samples=8,
                thinning=2,
                num_chains=2,
                store_factors=True,
                biases=True,
                likelihood=bmc.likelihoods.LearnedNoise(),
            ),
            ("M", "N", "gamma", "tau", "row_bias", "col_bias"),
        )
    for name, (kw, fields) in runs.items():
        kw = dict(
            kw, progress_bar=False, seed=3, dtype=jnp.float64, prior=bmc.priors.InverseGamma()
        )
        with kr.use_hot_path("bcsr"):
            one = bmc.fit(train, **kw)
        with kr.use_hot_path("gram" if name == "gibbs-gram" else "segment"):
            four = bmc.fit(train, devices=jax.devices(), **kw)
        for f in fields:
            a = one.samples[f] if name != "vb" else getattr(one, f)
            b = four.samples[f] if name != "vb" else getattr(four, f)
            out[f"{name}/{f}"] = (
                float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                if np.shape(a) == np.shape(b)
                else 1e9
            )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

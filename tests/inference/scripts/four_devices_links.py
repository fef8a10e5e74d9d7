"""Run by ``tests/inference/test_sharding_links.py`` in a child process with four CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, set before JAX starts): Gibbs fits
of the Normal-Wishart prior with feature links on one device, sharded over four devices and
over three devices with checkpoints (43 x 30 with an empty row and an empty column: padding
rows on both meshes); prints the largest relative differences of every draw as JSON.

The runs: side features and implicit feedback on both sides, with learned noise and biases
(the rows' link has more rows than features, ``X`` and ``X^T`` split by blocks; the columns'
has fewer, the dense ``X V`` split by rows), and side features of the columns only (the rows
unlinked).  Without an argument: the first run, on one device and on four; with ``full``:
also its checkpointed run on three devices, and the second run; with ``segment``: every
sparse product (the ratings' and the link's blocks) on the segment-sum hot path."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bmczoo as bmc  # noqa: E402
from four_devices import compare, data  # noqa: E402  (this folder is on sys.path: the 43 x 30 problem of test_sharding)

RUNS = {
    "side+implicit": dict(
        prior=bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
    ),
    "cols-side": dict(prior=bmc.priors.NormalWishart(col_features=True, a_B=2.0)),
}


def with_features(train):
    """The 43 x 30 problem with side features: 3 real-valued ones per row, 4 binary per column."""
    rng = np.random.default_rng(11)
    m1, m2 = train.shape
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3)))
    cf = bmc.data.Features.from_dense(rng.integers(0, 2, size=(m2, 4)).astype(float))
    return train.with_features(rf, cf)


def main():
    assert len(jax.devices()) == 4, jax.devices()
    train = with_features(data())
    test = train.subset(np.arange(25))
    out = {"devices": len(jax.devices())}
    kw = dict(
        K=3,
        num_warmup=10,
        num_samples=30,
        thinning=3,
        num_chains=2,
        progress_bar=False,
        seed=7,
        store_factors=True,
        test=test,
        dtype=jnp.float64,
    )
    full = "full" in sys.argv[1:]
    if "segment" in sys.argv[1:]:  # the GPUs' hot path (segment sums) for every sparse product
        bmc.linalg.set_hot_path("segment")
    for name, extra in RUNS.items() if full else list(RUNS.items())[:1]:
        one = bmc.fit(train, **extra, **kw)
        others = {"four": bmc.fit(train, devices=jax.devices(), **extra, **kw)}
        if full and name == "side+implicit":
            with tempfile.TemporaryDirectory() as tmp:
                others["three_checkpointed"] = bmc.fit(
                    train,
                    devices=jax.devices()[:3],
                    checkpoint=os.path.join(tmp, "c.npz"),
                    checkpoint_every=9,
                    **extra,
                    **kw,
                )
        compare(out, name, one, others)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

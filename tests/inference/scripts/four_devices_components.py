"""Run by ``tests/inference/test_gibbs_components.py`` in a child process with four CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``, set before JAX starts):
the same Gibbs fit with the Normal-Wishart prior, learned noise and biases on one device,
sharded over four devices and over three devices with checkpoints (43 x 30: padding rows
on both meshes, with an empty row and an empty column); prints the largest relative
differences of every draw as JSON."""

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


def main():
    assert len(jax.devices()) == 4, jax.devices()
    train = data()
    test = train.subset(np.arange(25))
    out = {"devices": len(jax.devices())}
    kw = dict(
        K=3,
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
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
    one = bmc.fit(train, **kw)
    four = bmc.fit(train, devices=jax.devices(), **kw)
    with tempfile.TemporaryDirectory() as tmp:
        three_ck = bmc.fit(
            train,
            devices=jax.devices()[:3],
            checkpoint=os.path.join(tmp, "c.npz"),
            checkpoint_every=9,
            **kw,
        )
    compare(out, "", one, {"four": four, "three_checkpointed": three_ck})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

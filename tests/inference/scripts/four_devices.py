"""Run by ``tests/inference/test_sharding.py`` in a child process with four CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, which must be set before JAX
starts): the same fits on one device and sharded over four; prints the largest
differences as JSON.  Without an argument: the discrete prior with the column moves, and
VB; with ``more``: the gamma prior over-relaxed and the inverse-gamma prior with the moves
and biases; with ``fused``: the column moves inside the sweep (``fuse_column_moves``); with
``anneal``: the annealed switch's run."""

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


def data():
    # 43 x 30 (not multiples of 4: padding rows), with an empty row and an empty column
    sim = bmc.datasets.simulate_paper(43, seed=2, m2=30)
    tr = sim.train
    keep = (tr.rows != 5) & (tr.cols != 7)
    return tr.subset(np.flatnonzero(keep))


def compare(out: dict, name: str, one, others: dict) -> None:
    """Into ``out``: the largest relative difference of every draw of ``one`` (a fit on one
    device) from each fit of ``others`` (tag -> fit), of the predictions and the RMSE
    traces, and whether their draws have the same names and shapes (no padding rows); keys
    ``{name}/{tag}/...`` (``{tag}/...`` without a name)."""
    pre = f"{name}/" if name else ""
    out[f"{pre}keys"] = sorted(one.samples)
    for tag, other in others.items():
        out[f"{pre}{tag}/same_keys"] = sorted(other.samples) == sorted(one.samples)
        for k in one.samples:
            a, b = np.asarray(one.samples[k]), np.asarray(other.samples[k])
            out[f"{pre}{tag}/shape/{k}"] = list(a.shape) == list(b.shape)
            scale = max(float(np.max(np.abs(a))), 1.0)
            out[f"{pre}{tag}/{k}"] = float(np.max(np.abs(a - b))) / scale
        out[f"{pre}{tag}/pred_mean"] = float(np.max(np.abs(one.pred_mean - other.pred_mean)))
        out[f"{pre}{tag}/rmse_draw"] = float(
            np.max(np.abs(np.asarray(one.rmse_draw) - np.asarray(other.rmse_draw)))
        )
        if one.switches is not None:  # the same switches accepted (the counts are equal)
            out[f"{pre}{tag}/switches"] = float(np.max(np.abs(one.switches - other.switches)))


# the Gibbs runs of each part (name, prior, settings).  The discrete prior runs the column
# moves (reflected spike/slab flips: psum-ed marginals and Gram matrices, padded draws);
# "more": the gamma prior's over-relaxed row updates (they read the current factors) and
# the inverse-gamma prior's log-scale walk with biases; "anneal" (a slow test): only the
# annealed switch: sharded half sweeps, the work over padded rows, the biases' residual per
# device, with learned noise; eps close to C so that its three-step switches are accepted
# on these data, without the column moves (with eps ~ C their reflections are aimed by
# eigenvectors of a nearly degenerate Gram matrix, which amplifies the psum's rounding: two
# float64 runs part after ~30 sweeps); "fused": the moves inside the sweep, the discrete
# prior's (a full T applied to the sums) and the inverse-gamma prior's every other sweep
# with biases and learned noise.  VB runs with the first part only.
PARTS = {
    "": (("discrete", bmc.priors.Discrete(1.0, 0.5, 0.3), dict(column_moves=True)),),
    "more": (
        ("gamma", bmc.priors.Gamma(beta=10.0), dict(overrelax=-0.7)),
        ("ig_moves_biases", bmc.priors.InverseGamma(), dict(column_moves=True, biases=True)),
    ),
    "fused": (
        (
            "discrete_fused",
            bmc.priors.Discrete(1.0, 0.5, 0.3),
            dict(column_moves=True, fuse_column_moves=True),
        ),
        (
            "ig_fused_biases",
            bmc.priors.InverseGamma(),
            dict(
                column_moves=True,
                fuse_column_moves=True,
                column_moves_every=2,
                biases=True,
                likelihood=bmc.likelihoods.LearnedNoise(),
            ),
        ),
    ),
    "anneal": (
        (
            "discrete_anneal",
            bmc.priors.Discrete(1.0, 0.5, 0.9),
            dict(
                column_moves=False,
                anneal_steps=3,
                anneal_every=4,
                biases=True,
                likelihood=bmc.likelihoods.LearnedNoise(),
            ),
        ),
    ),
}


def main():
    assert len(jax.devices()) == 4, jax.devices()
    train = data()
    test = train.subset(np.arange(25))
    out = {"devices": len(jax.devices())}
    kw = dict(
        K=4,
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
    part = sys.argv[1] if len(sys.argv) > 1 else ""
    if part not in PARTS:
        raise SystemExit(f"unknown argument {part!r}: none, 'more', 'fused' or 'anneal'")
    runs = PARTS[part]
    for name, prior, extra in runs:
        one = bmc.fit(train, prior=prior, **extra, **kw)
        four = bmc.fit(train, prior=prior, devices=jax.devices(), **extra, **kw)
        with tempfile.TemporaryDirectory() as tmp:
            four_ck = bmc.fit(
                train,
                prior=prior,
                devices=jax.devices()[:3],
                checkpoint=os.path.join(tmp, "c.npz"),
                checkpoint_every=9,
                **extra,
                **kw,
            )
        compare(out, name, one, {"four": four, "three_checkpointed": four_ck})
        if one.switches is not None:
            out[f"{name}/accepted"] = int(np.min(one.switches[:, 0]))
    for name, prior in (("vb_ig", bmc.priors.InverseGamma()),) if part == "" else ():
        vkw = dict(
            K=4,
            method="vb",
            max_iter=15,
            tol=0.0,
            num_chains=2,
            progress_bar=False,
            seed=7,
            test=test,
            dtype=jnp.float64,
        )
        one = bmc.fit(train, prior=prior, **vkw)
        four = bmc.fit(train, prior=prior, devices=jax.devices(), **vkw)
        for f in ("m", "n", "V_diag", "W_diag", "elbo"):
            a, b = getattr(one, f), getattr(four, f)
            out[f"{name}/{f}"] = float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(a))), 1.0)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

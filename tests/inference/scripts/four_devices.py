"""The one multi-device script of the tests: run in a child process with four CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, which must be set before JAX
starts; ``tests/inference/_devices.py:run_four_devices`` starts it), it fits the 43 x 30
problem (not multiples of 4: padding rows; an empty row and an empty column) on one device
and sharded, and prints the largest differences as JSON.

The first argument names the case (the test that runs it):

- none: the discrete prior with the column moves, and VB (``test_sharding``);
- ``more``: the gamma prior over-relaxed and the inverse-gamma prior with the moves and
  biases; ``fused``: the column moves inside the sweep (``fuse_column_moves``);
  ``anneal``: the annealed switch's run (``test_sharding``);
- ``components``: the Normal-Wishart prior, learned noise and biases, also resumed from
  checkpoints on three devices (``test_gibbs_components``);
- ``vb-components``: VB with the components' combinations (``test_vb_components``);
- ``links``: feature links, side features and implicit feedback on both sides with learned
  noise and biases; with ``full`` also its checkpointed run on three devices and side
  features of the columns only; with ``segment`` every sparse product on the segment-sum
  hot path (``test_sharding_links``);
- ``hot-paths``: the segment-sum hot path (and the compiled Gram kernel where it is built)
  sharded against the one-device BCSR runs (``test_hot_path``).
"""

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
from bmczoo import _native  # noqa: E402
from bmczoo import linalg as kr  # noqa: E402


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


GIBBS = dict(
    num_warmup=10,
    num_samples=30,
    thinning=3,
    num_chains=2,
    progress_bar=False,
    seed=7,
    store_factors=True,
    dtype=jnp.float64,
)


def sharded_fits(train, kw: dict, *, checkpointed: bool = True) -> tuple:
    """The fit on one device and ``{"four": ..., "three_checkpointed": ...}`` sharded (the
    latter resumed from checkpoints every 9 iterations on three devices)."""
    one = bmc.fit(train, **kw)
    others = {"four": bmc.fit(train, devices=jax.devices(), **kw)}
    if checkpointed:
        with tempfile.TemporaryDirectory() as tmp:
            others["three_checkpointed"] = bmc.fit(
                train,
                devices=jax.devices()[:3],
                checkpoint=os.path.join(tmp, "c.npz"),
                checkpoint_every=9,
                **kw,
            )
    return one, others


def rel(a, b) -> float:
    """The largest difference of ``b`` from ``a`` relative to ``a``'s largest value (at least 1)."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(a))), 1.0)


def gibbs_parts(out: dict, part: str) -> None:
    """The cases of ``test_sharding``: the runs of :data:`PARTS`, and VB with the first."""
    train = data()
    test = train.subset(np.arange(25))
    for name, prior, extra in PARTS[part]:
        one, others = sharded_fits(train, dict(GIBBS, K=4, test=test, prior=prior, **extra))
        compare(out, name, one, others)
        if one.switches is not None:
            out[f"{name}/accepted"] = int(np.min(one.switches[:, 0]))
    if part == "":
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
            prior=bmc.priors.InverseGamma(),
        )
        one = bmc.fit(train, **vkw)
        four = bmc.fit(train, devices=jax.devices(), **vkw)
        for f in ("m", "n", "V_diag", "W_diag", "elbo"):
            out[f"vb_ig/{f}"] = rel(getattr(one, f), getattr(four, f))


def components(out: dict) -> None:
    """``test_gibbs_components``: the Normal-Wishart prior, learned noise and biases."""
    train = data()
    kw = dict(
        GIBBS,
        K=3,
        test=train.subset(np.arange(25)),
        prior=bmc.priors.NormalWishart(),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
    )
    one, others = sharded_fits(train, kw)
    compare(out, "", one, others)


def vb_components(out: dict) -> None:
    """``test_vb_components``: VB with the components' combinations, one device and four."""
    train = data()
    test = train.subset(np.arange(25))
    lik = bmc.likelihoods
    cases = [
        ("nw-learned-bias", bmc.priors.NormalWishart(), lik.LearnedNoise(temper=0.8), True),
        ("ig-tempered-bias", bmc.priors.InverseGamma(1.0, 0.1), lik.Tempered(), True),
        ("gamma-learned", bmc.priors.Gamma(beta=10.0), lik.LearnedNoise(), False),
    ]
    for name, prior, likelihood, biases in cases:
        kw = dict(
            K=4,
            method="vb",
            max_iter=12,
            tol=0.0,
            num_chains=2,
            progress_bar=False,
            seed=7,
            test=test,
            dtype=jnp.float64,
            prior=prior,
            likelihood=likelihood,
            biases=biases,
        )
        one = bmc.fit(train, **kw)
        four = bmc.fit(train, devices=jax.devices(), **kw)

        def most(a: dict, b: dict) -> float:
            return max([rel(v, b[k]) for k, v in a.items()] or [0.0])

        out[f"{name}/elbo"] = rel(one.elbo, four.elbo)
        out[f"{name}/m"] = rel(one.m, four.m)
        out[f"{name}/n"] = rel(one.n, four.n)
        out[f"{name}/rmse"] = rel(one.rmse_trace, four.rmse_trace)
        out[f"{name}/q_prior"] = most(one.q_prior, four.q_prior)
        out[f"{name}/q_noise"] = most(one.q_noise, four.q_noise)
        out[f"{name}/q_biases"] = most(one.q_biases, four.q_biases)
        out[f"{name}/pred"] = rel(
            one.predict(test.rows, test.cols), four.predict(test.rows, test.cols)
        )


# the runs of ``links``: the rows' link has more rows than features (``X`` and ``X^T`` split
# by blocks), the columns' fewer (the dense ``X V`` split by rows); then the columns only
LINK_RUNS = {
    "side+implicit": dict(
        prior=bmc.priors.NormalWishart(row_features=True, col_features=True, implicit=True),
        likelihood=bmc.likelihoods.LearnedNoise(),
        biases=True,
    ),
    "cols-side": dict(prior=bmc.priors.NormalWishart(col_features=True, a_B=2.0)),
}


def with_features(train):
    """The problem with side features: 3 real-valued ones per row, 4 binary per column."""
    rng = np.random.default_rng(11)
    m1, m2 = train.shape
    rf = bmc.data.Features.from_dense(rng.normal(size=(m1, 3)))
    cf = bmc.data.Features.from_dense(rng.integers(0, 2, size=(m2, 4)).astype(float))
    return train.with_features(rf, cf)


def links(out: dict, full: bool) -> None:
    """``test_sharding_links``: Gibbs with feature links."""
    train = with_features(data())
    test = train.subset(np.arange(25))
    for name, extra in LINK_RUNS.items() if full else list(LINK_RUNS.items())[:1]:
        kw = dict(GIBBS, K=3, test=test, **extra)
        one, others = sharded_fits(train, kw, checkpointed=full and name == "side+implicit")
        compare(out, name, one, others)


def hot_paths(out: dict) -> None:
    """``test_hot_path``: four devices on the segment-sum path (whose padding entries of the
    blocks must add nothing) and, where the compiled kernel is built, on the "gram" path
    with biases and learned noise, against the one-device BCSR runs (absolute differences)."""
    train = data()
    runs = {
        "gibbs": (
            dict(K=3, num_warmup=4, num_samples=8, thinning=2, num_chains=2, store_factors=True),
            ("M", "N", "gamma"),
        ),
        "vb": (dict(K=3, method="vb", max_iter=6, tol=0.0, num_chains=2), ("m", "n", "elbo")),
    }
    if _native.available():
        kr.GRAM_MIN_K = 1  # before anything is traced: the kernel at every K here
        runs["gibbs-gram"] = (
            dict(runs["gibbs"][0], biases=True, likelihood=bmc.likelihoods.LearnedNoise()),
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


CASES = ("", "more", "fused", "anneal", "components", "vb-components", "links", "hot-paths")


def main():
    assert len(jax.devices()) == 4, jax.devices()
    case = sys.argv[1] if len(sys.argv) > 1 else ""
    flags = set(sys.argv[2:])
    if case not in CASES or not flags <= {"full", "segment"}:
        raise SystemExit(f"unknown arguments {sys.argv[1:]!r}: a case of {CASES} and flags")
    out = {"devices": len(jax.devices())}
    if "segment" in flags:  # the GPUs' hot path (segment sums) for every sparse product
        bmc.linalg.set_hot_path("segment")
    if case in PARTS:
        gibbs_parts(out, case)
    elif case == "components":
        components(out)
    elif case == "vb-components":
        vb_components(out)
    elif case == "links":
        links(out, "full" in flags)
    else:
        hot_paths(out)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

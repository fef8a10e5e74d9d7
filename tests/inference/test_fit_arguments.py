"""Every invalid argument of ``bmc.fit`` raises a ValueError that names it."""

import jax.numpy as jnp
import pytest

import bmczoo as bmc


@pytest.fixture(scope="module")
def train():
    return bmc.datasets.simulate_paper(12, seed=0).train


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(seed=1.5), "seed"),
        (dict(seed=-1), "seed"),
        (dict(num_warmup=2.7), "num_warmup"),
        (dict(num_warmup=True), "num_warmup"),
        (dict(track=-1), "track"),
        (dict(track=None), "track"),
        (dict(clip=1), "clip"),
        (dict(clip=(1.0,)), "clip"),
        (dict(clip=(2.0, 1.0)), "clip"),
        (dict(predict=([1],)), "predict"),
        (dict(predict=([1], [99])), "predict"),
        (dict(center="no"), "center"),
        (dict(progress_bar="yes"), "progress_bar"),
        (dict(store_factors="yes"), "store_factors"),
        (dict(dtype=jnp.int32), "dtype"),
        (dict(dtype=jnp.float16), "dtype"),
        (dict(method="svi", learning_rate=-1.0), "learning_rate"),
        (dict(method="map", guide="bogus"), "guide"),
        (dict(lam=3.0, noise_sd=-5.0), "noise_sd"),
        (dict(lam=0.0), "lam"),
        (dict(method="vb", max_iter=0), "max_iter"),
        (dict(method="vb", num_chains=0), "num_chains"),
        (dict(devices=["cpu"]), "devices"),
    ],
)
def test_bad_argument_names_itself(train, kw, name):
    with pytest.raises(ValueError, match=name):
        bmc.fit(train, 2, **{"progress_bar": False, **kw})


def test_positional_arguments_follow_the_api(train):
    # API.md: fit(train, K, prior, method, num_warmup, num_samples, thinning, num_chains, ...)
    f = bmc.fit(train, 2, bmc.priors.Fixed(), "gibbs", 3, 4, 2, 1, progress_bar=False)
    assert f.meta["num_warmup"] == 3 and f.meta["num_samples"] == 4 and f.meta["thinning"] == 2


def test_float64_is_honoured_without_global_x64(train):
    for method in ("gibbs", "vb"):
        f = bmc.fit(train, 2, method=method, num_warmup=2, num_samples=2, thinning=1, progress_bar=False,
                    dtype=jnp.float64)
        assert f.meta["dtype"] == "float64"


def test_get_prior_errors():
    with pytest.raises(ValueError, match="string"):
        bmc.priors.get_prior(1)
    with pytest.raises(ValueError, match="foo"):
        bmc.priors.get_prior("fixed", foo=1.0)
    with pytest.raises(ValueError, match="unknown prior"):
        bmc.priors.get_prior("nope")


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(init_gamma=[1.0, 2.0, 3.0]), "init_gamma must be a positive number or an array of K=2"),
        (dict(method="vb", thinning=0), "thinning"),
        (dict(method="vb", num_warmup=-1), "num_warmup"),
        (dict(method="vb", init_gamma=-1.0), "init_gamma"),
        (dict(method="svi", num_chains=0), "num_chains"),
        (dict(method="gibbs", max_iter=0), "max_iter"),
        (dict(method="gibbs", tol=-1.0), "tol"),
        (dict(method="gibbs", subsample_size=0), "subsample_size"),
        (dict(method="vb", num_steps=0), "num_steps"),
        (dict(method="vb", overrelax=-0.5), "overrelax applies to method='gibbs'"),
        (dict(overrelax=1.0), r"overrelax must be in \(-1, 1\)"),
        (dict(overrelax="a lot"), "overrelax must be a number"),
    ],
)
def test_arguments_are_checked_whatever_the_method(kw, match):
    """A bad value is reported even when the chosen method does not use the argument."""
    train = bmc.datasets.simulate_paper(20, seed=1).train
    with pytest.raises(ValueError, match=match):
        bmc.fit(train, 2, progress_bar=False, **kw)


def test_rank_posterior_threshold_is_checked():
    train = bmc.datasets.simulate_paper(20, seed=1).train
    fit = bmc.fit(train, 2, method="vb", max_iter=3, progress_bar=False)
    for bad in ("x", None, float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            fit.rank_posterior(bad)

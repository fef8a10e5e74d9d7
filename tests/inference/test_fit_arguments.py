"""Every invalid argument of ``bmc.fit`` raises an error that names it: ``TypeError`` for a
wrong type, ``ValueError`` for a wrong value, and ``ValueError`` naming the argument and
the method for an argument of another method."""

import jax.numpy as jnp
import pytest

import bmczoo as bmc


@pytest.fixture(scope="module")
def train():
    return bmc.datasets.simulate_paper(12, seed=0).train


@pytest.mark.parametrize(
    "kw, name, error",
    [
        (dict(seed=1.5), "seed", TypeError),
        (dict(seed=-1), "seed", ValueError),
        (dict(num_warmup=2.7), "num_warmup", TypeError),
        (dict(num_warmup=True), "num_warmup", TypeError),
        (dict(track=-1), "track", ValueError),
        (dict(track=None), "track", TypeError),
        (dict(clip=1), "clip", TypeError),
        (dict(clip=(1.0,)), "clip", TypeError),
        (dict(clip=(2.0, 1.0)), "clip", ValueError),
        (dict(predict=([1],)), "predict", TypeError),
        (dict(predict=([1], [99])), "predict", ValueError),
        (dict(center="no"), "center", TypeError),
        (dict(progress_bar="yes"), "progress_bar", TypeError),
        (dict(store_factors="yes"), "store_factors", ValueError),
        (dict(gamma_sampler="fast"), "gamma_sampler", ValueError),
        (dict(row_draw="fast"), "row_draw", ValueError),
        (dict(row_draw=1), "row_draw", TypeError),
        (dict(dtype=jnp.int32), "dtype", ValueError),
        (dict(dtype=jnp.float16), "dtype", ValueError),
        (dict(method="svi", learning_rate=-1.0), "learning_rate", ValueError),
        (dict(method="map", guide="bogus"), "guide", ValueError),
        (dict(lam=3.0, noise_sd=-5.0), "noise_sd", ValueError),
        (dict(lam=0.0), "lam", ValueError),
        (dict(method="vb", max_iter=0), "max_iter", ValueError),
        (dict(method="vb", num_chains=0), "num_chains", ValueError),
        (dict(devices=["cpu"]), "devices", ValueError),
    ],
)
def test_bad_argument_names_itself(train, kw, name, error):
    # a wrong type is a TypeError and only that (no ValueError), a wrong value a ValueError
    with pytest.raises(error, match=name) as info:
        bmc.fit(train, 2, **{"progress_bar": False, **kw})
    other = ValueError if error is TypeError else TypeError
    assert not isinstance(info.value, other)


def test_mcmc_methods_run_four_chains_by_default(train):
    assert bmc.inference.Gibbs().num_chains == 4 and bmc.inference.NUTS().num_chains == 4
    assert bmc.inference.VB().restarts == 1
    fit = bmc.fit(train, 2, num_warmup=2, num_samples=4, thinning=1, progress_bar=False)
    assert jnp.asarray(fit.samples["gamma"]).shape[0] == 4


@pytest.mark.parametrize("value", [2.5, True, "3", None])
def test_K_of_the_wrong_type_is_a_type_error(train, value):
    with pytest.raises(TypeError, match="K must be a positive integer") as info:
        bmc.fit(train, K=value, progress_bar=False)
    assert not isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(n_chains=4),
            "fit() got an unexpected keyword argument 'n_chains'; did you mean 'num_chains'?",
        ),
        (dict(num_step=10), "unexpected keyword argument 'num_step'; did you mean 'num_steps'?"),
        (
            dict(method="vb", max_iters=3),
            "unexpected keyword argument 'max_iters'; did you mean 'max_iter'?",
        ),
        (
            dict(progressbar=False),
            "unexpected keyword argument 'progressbar'; did you mean 'progress_bar'?",
        ),
        (dict(zzz=1), "unexpected keyword argument 'zzz'"),
    ],
)
def test_unknown_argument_is_named_with_the_closest_valid_name(train, kw, message):
    with pytest.raises(TypeError) as info:
        bmc.fit(train, 2, **kw)
    assert str(info.value) == message or str(info.value).endswith(message)
    assert "did you mean" not in message or "did you mean" in str(info.value)
    if "zzz" in kw:
        assert "did you mean" not in str(info.value)


def test_unknown_argument_with_a_settings_object_is_a_type_error(train):
    with pytest.raises(TypeError, match="'n_chains'; did you mean 'num_chains'"):
        bmc.fit(train, 2, method=bmc.inference.Gibbs(num_samples=2, thinning=1), n_chains=2)


def test_positional_arguments_follow_the_api(train):
    # API.md: fit(train, K, prior, method, num_warmup, num_samples, thinning, num_chains, ...)
    f = bmc.fit(train, 2, bmc.priors.Fixed(), "gibbs", 3, 4, 2, 1, progress_bar=False)
    assert f.meta["num_warmup"] == 3 and f.meta["num_samples"] == 4 and f.meta["thinning"] == 2


def test_float64_is_honoured_without_global_x64(train):
    for method, kw in (
        ("gibbs", dict(num_warmup=2, num_samples=2, thinning=1)),
        ("vb", dict(max_iter=2)),
    ):
        f = bmc.fit(train, 2, method=method, progress_bar=False, dtype=jnp.float64, **kw)
        assert f.meta["dtype"] == "float64" and f.info.dtype == "float64"


def test_get_prior_errors():
    with pytest.raises(TypeError, match="string"):
        bmc.priors.get_prior(1)
    with pytest.raises(ValueError, match="foo"):
        bmc.priors.get_prior("fixed", foo=1.0)
    with pytest.raises(ValueError, match="unknown prior"):
        bmc.priors.get_prior("nope")


@pytest.mark.parametrize(
    "kw, match",
    [
        (
            dict(init_gamma=[1.0, 2.0, 3.0]),
            "init_gamma must be a positive number or an array of K=2",
        ),
        (dict(method="vb", thinning=0), "thinning"),
        (dict(method="vb", num_warmup=-1), "num_warmup"),
        (dict(method="vb", init_gamma=-1.0), "init_gamma"),
        (dict(method="svi", num_chains=0), "num_chains"),
        (dict(method="gibbs", max_iter=0), "max_iter"),
        (dict(method="gibbs", tol=-1.0), "tol"),
        (dict(method="gibbs", subsample_size=0), "subsample_size"),
        (dict(method="vb", num_steps=0), "num_steps"),
        (
            dict(method="vb", overrelax=-0.5),
            "overrelax= applies to method='gibbs', not to method='vb'",
        ),
        (dict(overrelax=1.0), r"overrelax must be in \(-1, 1\)"),
    ],
)
def test_arguments_are_checked_whatever_the_method(kw, match):
    """A bad value, or an argument the chosen method does not take, is reported."""
    train = bmc.datasets.simulate_paper(20, seed=1).train
    with pytest.raises(ValueError, match=match):
        bmc.fit(train, 2, progress_bar=False, **kw)


def test_a_setting_of_the_wrong_type_is_a_type_error():
    train = bmc.datasets.simulate_paper(20, seed=1).train
    with pytest.raises(TypeError, match="overrelax must be a number"):
        bmc.fit(train, 2, progress_bar=False, overrelax="a lot")


def test_rank_posterior_threshold_is_checked():
    train = bmc.datasets.simulate_paper(20, seed=1).train
    fit = bmc.fit(train, 2, method="vb", max_iter=3, progress_bar=False)
    for bad, error in (("x", TypeError), (True, TypeError), (float("nan"), ValueError)):
        with pytest.raises(error, match="threshold"):
            fit.rank_posterior(bad)


# every method-specific argument, with a valid value, and the methods that take it
_OWN = {
    "num_warmup": ("gibbs", "nuts"),
    "num_samples": ("gibbs", "nuts"),
    "thinning": ("gibbs", "nuts"),
    "num_chains": ("gibbs", "nuts", "vb"),
    "devices": ("gibbs", "vb"),
    "chain_method": ("gibbs",),
    "overrelax": ("gibbs",),
    "init_gamma": ("gibbs",),
    "track": ("gibbs", "nuts"),
    "store_factors": ("gibbs",),
    "gamma_sampler": ("gibbs",),
    "row_draw": ("gibbs",),
    "checkpoint": ("gibbs", "vb"),
    "checkpoint_every": ("gibbs", "vb"),
    "max_iter": ("vb",),
    "tol": ("vb",),
    "target_accept_prob": ("nuts",),
    "guide": ("svi",),
    "num_steps": ("svi", "map"),
    "learning_rate": ("svi", "map"),
    "subsample_size": ("svi", "map"),
    "num_draws": ("svi",),
}
_VALUE = {
    "num_warmup": 1,
    "num_samples": 2,
    "thinning": 1,
    "num_chains": 1,
    "chain_method": "vectorized",
    "overrelax": 0.0,
    "init_gamma": 1.0,
    "track": 2,
    "store_factors": True,
    "gamma_sampler": "jax",
    "row_draw": "two-solves",
    "checkpoint": "x.npz",
    "checkpoint_every": 5,
    "max_iter": 2,
    "tol": 0.0,
    "target_accept_prob": 0.9,
    "guide": "bogus",
    "num_steps": 3,
    "learning_rate": -1.0,
    "subsample_size": 2,
    "num_draws": 3,
}


@pytest.mark.parametrize("method", ["gibbs", "vb", "nuts", "svi", "map"])
def test_cross_method_arguments_name_the_argument_and_the_method(train, method):
    import jax

    values = {**_VALUE, "devices": jax.devices()[:1]}
    for name, owners in _OWN.items():
        if method in owners:
            continue
        with pytest.raises(
            ValueError, match=rf"{name}= applies to method=.*not to method='{method}'"
        ):
            bmc.fit(train, 2, method=method, progress_bar=False, **{name: values[name]})


def test_the_issue_example_is_rejected(train):
    with pytest.raises(ValueError, match="guide= applies to method='svi', not to method='gibbs'"):
        bmc.fit(train, method="gibbs", guide="bogus")
    with pytest.raises(ValueError, match="learning_rate= .* not to method='gibbs'"):
        bmc.fit(train, method="gibbs", learning_rate=-1)


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        (dict(seed=1.5), TypeError, "seed"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(num_warmup=2.7), TypeError, "num_warmup"),
        (dict(num_warmup=-1), ValueError, "num_warmup"),
        (dict(K="2"), TypeError, "K"),
        (dict(K=0), ValueError, "K"),
        (dict(center="no"), TypeError, "center"),
        (dict(method="vb", tol="small"), TypeError, "tol"),
        (dict(method="vb", tol=-1.0), ValueError, "tol"),
        (dict(method=3), TypeError, "method"),
        (dict(method="mcmc"), ValueError, "method"),
    ],
)
def test_types_raise_type_error_values_value_error(train, kw, exc, name):
    kw = {"K": 2, **kw}
    with pytest.raises(exc, match=name) as info:
        bmc.fit(train, progress_bar=False, **kw)
    if exc is ValueError:
        assert not isinstance(info.value, TypeError)


def test_settings_objects_are_validated_once_and_pick_the_driver(train):
    s = bmc.inference.Gibbs(
        num_warmup=2,
        num_samples=4,
        thinning=2,
        num_chains=2,
        column_moves=True,
        column_moves_every=1,
    )
    f = bmc.fit(train, 2, method=s, progress_bar=False)
    assert isinstance(f, bmc.inference.GibbsFit) and f.info.settings is s and f.num_kept == 2
    # column_moves=None and column_moves_every=None (the defaults) are resolved for the
    # prior: a copy, the rest as given
    auto = bmc.inference.Gibbs(num_warmup=2, num_samples=4, thinning=2, num_chains=2)
    g = bmc.fit(train, 2, method=auto, prior=bmc.priors.Fixed(), progress_bar=False)
    assert (
        g.info.settings.as_dict()
        == {**auto.as_dict(), "column_moves": False, "column_moves_every": 1}
        and auto.column_moves is None
    )
    v = bmc.fit(train, 2, method=bmc.inference.VB(max_iter=3), progress_bar=False)
    assert isinstance(v, bmc.inference.VBFit) and v.num_iter <= 3
    with pytest.raises(ValueError, match="thinning=3 > num_samples=2"):
        bmc.inference.Gibbs(num_samples=2, thinning=3)
    with pytest.raises(ValueError, match="give num_samples to it"):
        bmc.fit(train, 2, method=s, num_samples=3)
    with pytest.raises(ValueError, match="chain_method='sequential' is not available"):
        bmc.inference.Gibbs(checkpoint="x.npz", chain_method="sequential")


def test_conjugate_gibbs_binds_its_model(train):
    """ConjugateGibbs reads the model's arguments through the model it was given."""
    import jax
    from numpyro.infer import MCMC

    def renamed(data, K, prior):  # not matrix_completion's signature
        pass

    mcmc = MCMC(
        bmc.inference.ConjugateGibbs(renamed), num_warmup=1, num_samples=2, progress_bar=False
    )
    with pytest.raises(ValueError, match="has no argument ratings"):
        mcmc.run(jax.random.key(0), train, 2, bmc.priors.Fixed())

    def wrapper(ratings, K, prior, noise_sd=0.5):  # same semantics, another default
        return bmc.models.matrix_completion(ratings, K, prior, noise_sd=noise_sd)

    kernel = bmc.inference.ConjugateGibbs(wrapper)
    assert kernel.model.__wrapped__ is wrapper  # the observed site hidden: no factor draws
    assert bmc.inference.ConjugateGibbs(wrapper, store_factors=True).model is wrapper
    mcmc = MCMC(kernel, num_warmup=1, num_samples=2, progress_bar=False)
    mcmc.run(jax.random.key(0), train, 2, bmc.priors.Fixed())
    assert float(mcmc.last_state.problem.tau) == pytest.approx(
        4.0
    )  # 1 / 0.5^2 from the model's default

"""Settings errors carry their parameter: ``param`` (``bmc.fit``'s argument name),
``value``, ``reason`` and ``method``, so that a caller names the argument its own way
without reading the message; each is also the ``TypeError`` or ``ValueError`` that code
catching the built-ins expects."""

from __future__ import annotations

import pickle

import pytest

import bmczoo as bmc
from bmczoo.inference import errors as er
from bmczoo.inference import settings as st

# (method, keyword arguments of bmc.fit, the argument named, the value named, the type)
_BAD = [
    ("gibbs", dict(num_warmup=-1), "num_warmup", -1, er.SettingsValueError),
    ("gibbs", dict(num_warmup=True), "num_warmup", True, er.SettingsTypeError),
    ("gibbs", dict(num_samples=0), "num_samples", 0, er.SettingsValueError),
    ("gibbs", dict(thinning=2.5), "thinning", 2.5, er.SettingsTypeError),
    ("gibbs", dict(num_chains=0), "num_chains", 0, er.SettingsValueError),
    ("gibbs", dict(overrelax=1.0), "overrelax", 1.0, er.SettingsValueError),
    ("gibbs", dict(overrelax="a lot"), "overrelax", "a lot", er.SettingsTypeError),
    ("gibbs", dict(column_moves="yes"), "column_moves", "yes", er.SettingsTypeError),
    ("gibbs", dict(column_moves_every=0), "column_moves_every", 0, er.SettingsValueError),
    ("gibbs", dict(fuse_column_moves=1), "fuse_column_moves", 1, er.SettingsTypeError),
    ("gibbs", dict(anneal_steps=-1), "anneal_steps", -1, er.SettingsValueError),
    ("gibbs", dict(anneal_every=0), "anneal_every", 0, er.SettingsValueError),
    ("gibbs", dict(gamma_sampler="fast"), "gamma_sampler", "fast", er.SettingsValueError),
    ("gibbs", dict(row_draw=1), "row_draw", 1, er.SettingsTypeError),
    ("gibbs", dict(chain_method="pmap"), "chain_method", "pmap", er.SettingsValueError),
    ("gibbs", dict(init_gamma=-1.0), "init_gamma", -1.0, er.SettingsValueError),
    ("gibbs", dict(track=-1), "track", -1, er.SettingsValueError),
    ("gibbs", dict(store_factors="yes"), "store_factors", "yes", er.SettingsValueError),
    ("gibbs", dict(checkpoint=3), "checkpoint", 3, er.SettingsTypeError),
    ("gibbs", dict(checkpoint_every=0), "checkpoint_every", 0, er.SettingsValueError),
    ("vb", dict(max_iter=0), "max_iter", 0, er.SettingsValueError),
    ("vb", dict(tol=-1.0), "tol", -1.0, er.SettingsValueError),
    ("vb", dict(tol="small"), "tol", "small", er.SettingsTypeError),
    ("vb", dict(num_chains=0), "num_chains", 0, er.SettingsValueError),  # VB's restarts
    ("nuts", dict(target_accept_prob=1.0), "target_accept_prob", 1.0, er.SettingsValueError),
    ("svi", dict(guide="bogus"), "guide", "bogus", er.SettingsValueError),
    ("svi", dict(learning_rate=0.0), "learning_rate", 0.0, er.SettingsValueError),
    ("map", dict(num_steps=0), "num_steps", 0, er.SettingsValueError),
    ("map", dict(subsample_size=0), "subsample_size", 0, er.SettingsValueError),
    ("svi", dict(num_draws=0), "num_draws", 0, er.SettingsValueError),
    ("svi", dict(guide=3), "guide", 3, er.SettingsTypeError),
    ("nuts", dict(target_accept_prob="x"), "target_accept_prob", "x", er.SettingsTypeError),
]


@pytest.mark.parametrize("method, kw, param, value, error", _BAD)
def test_bad_setting_names_its_parameter(method, kw, param, value, error):
    with pytest.raises(error) as info:
        st.settings_for(method, **kw)
    e = info.value
    assert isinstance(e, er.SettingsError)
    assert (e.param, e.value, e.method) == (param, value, method)
    # a wrong type is a TypeError only, a wrong value a ValueError only
    assert isinstance(e, TypeError) != isinstance(e, ValueError)
    assert param in str(e)  # the library's message names it too
    assert e.reason and e.reason in str(e)
    if (method, param) != ("vb", "num_chains"):  # "restarts (num_chains) must be ..."
        # the fields say all the message says: a caller's own spelling loses nothing
        assert str(e) == e.describe()


def test_the_reason_is_the_message_without_the_name_and_the_value():
    with pytest.raises(er.SettingsValueError) as info:
        st.settings_for("gibbs", num_samples=0)
    e = info.value
    assert str(e) == "num_samples must be a positive integer, got 0"
    assert e.reason == "must be a positive integer"
    assert e.describe(name=str.upper) == "NUM_SAMPLES must be a positive integer, got 0"


def test_an_error_about_two_arguments_spells_both_as_asked():
    with pytest.raises(er.SettingsValueError) as info:
        bmc.inference.Gibbs(num_samples=5, thinning=10)
    e = info.value
    assert str(e) == "thinning=10 > num_samples=5 keeps no draw"
    assert (e.param, e.value, e.others) == ("thinning", 10, {"num_samples": 5})
    spelled = e.describe(name=lambda p: f"<{p}>", setting=lambda p, v: f"<{p}> {v}")
    assert spelled == "<thinning> 10 > <num_samples> 5 keeps no draw"


@pytest.mark.parametrize(
    "prior, kw, param, needle",
    [
        (bmc.priors.Fixed(), dict(column_moves=True), "column_moves", "no column move"),
        (bmc.priors.InverseGamma(), dict(anneal_steps=3), "anneal_steps", "no spike and slab"),
    ],
)
def test_an_option_the_prior_cannot_honour_names_its_parameter(prior, kw, param, needle):
    with pytest.raises(er.SettingsValueError, match=needle) as info:
        bmc.inference.Gibbs(**kw).for_prior(prior)
    e = info.value
    assert e.param == param and f"{param}" in str(e)
    assert f"<{param}>" in e.describe(name=lambda p: f"<{p}>", setting=lambda p, v: f"<{p}>")


def test_an_argument_of_another_method_names_the_methods_that_take_it():
    with pytest.raises(er.WrongMethodError) as info:
        st.settings_for("svi", num_chains=2)
    e = info.value
    assert isinstance(e, ValueError) and not isinstance(e, TypeError)
    assert (e.param, e.value, e.method) == ("num_chains", 2, "svi")
    assert e.methods == ("gibbs", "vb", "nuts") and "num_steps" in e.accepted
    assert str(e).startswith("num_chains= applies to method='gibbs' or 'vb' or 'nuts', not to")


def test_an_unknown_argument_names_the_closest_one():
    with pytest.raises(er.UnknownArgumentError) as info:
        st.settings_for("gibbs", n_chains=2)
    e = info.value
    assert isinstance(e, TypeError) and not isinstance(e, ValueError)
    assert (e.param, e.suggestion) == ("n_chains", "num_chains")
    assert (
        str(e) == "fit() got an unexpected keyword argument 'n_chains'; did you mean 'num_chains'?"
    )
    assert e.describe(name=lambda p: "--" + p) == (
        "--n_chains is not an argument of fit(); did you mean --num_chains?"
    )


def test_bmc_fit_raises_the_same_errors():
    train = bmc.datasets.simulate_paper(12, seed=0).train
    with pytest.raises(er.SettingsValueError) as info:
        bmc.fit(train, 2, method="vb", max_iter=0, progress_bar=False)
    assert (info.value.param, info.value.method) == ("max_iter", "vb")
    with pytest.raises(er.UnknownArgumentError):
        bmc.fit(train, 2, num_step=3, progress_bar=False)


@pytest.mark.parametrize(
    "build",
    [
        lambda: st.settings_for("gibbs", num_samples=0),
        lambda: bmc.inference.Gibbs(num_samples=5, thinning=10),
        lambda: st.settings_for("vb", num_samples=3),
        lambda: st.settings_for("gibbs", n_chains=3),
    ],
)
def test_errors_survive_pickling(build):
    """The experiment runner's worker processes send errors back pickled."""
    with pytest.raises(er.SettingsError) as info:
        build()
    e = info.value
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and str(back) == str(e) and back.__dict__ == e.__dict__


def test_exported_where_users_look():
    for name in er.__all__:
        assert getattr(st, name) is getattr(er, name)
        assert name in st.__all__

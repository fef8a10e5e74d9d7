"""The prior zoo's construction, registry, immutability, log_prob and init_gamma."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.stats as st

import bmczoo as bmc
from bmczoo.priors import Discrete, Fixed, Gamma, InverseGamma, Prior, get_prior

# ----------------------------------------------------------------------------- construction
# (class, field) pairs of every positive hyper-parameter
FIELDS = [
    (Fixed, "gamma"),
    (InverseGamma, "a"),
    (InverseGamma, "b"),
    (Gamma, "beta"),
    (Discrete, "C"),
    (Discrete, "p"),
    (Discrete, "eps"),
]
FIELD_IDS = [f"{cls.__name__}.{f}" for cls, f in FIELDS]

BAD_SCALARS = {
    "negative": -1.0,
    "negative-int": -2,
    "zero": 0.0,
    "zero-int": 0,
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "np-nan": np.float64("nan"),
    "True": True,
    "False": False,
    "string": "0.5",
    "empty-string": "",
    "None": None,
    "list": [0.5],
    "complex": 0.5 + 0j,
}


@pytest.mark.parametrize("bad", list(BAD_SCALARS.values()), ids=list(BAD_SCALARS))
@pytest.mark.parametrize("cls, field", FIELDS, ids=FIELD_IDS)
def test_invalid_hyperparameter_raises_value_error(cls, field, bad):
    with pytest.raises(ValueError, match=field):
        cls(**{field: bad})


# numpy-typed bad values: np.bool_ is a bool (not a number), a complex numpy scalar must not
# be silently truncated to its real part, a length-2 array is not a scalar
BAD_NUMPY = {
    "np.True_": np.True_,
    "np.complex128": np.complex128(0.5 + 0.1j),
    "array-2": np.array([0.5, 0.6]),
}


@pytest.mark.parametrize("bad", list(BAD_NUMPY.values()), ids=list(BAD_NUMPY))
@pytest.mark.parametrize("cls, field", FIELDS, ids=FIELD_IDS)
def test_invalid_numpy_hyperparameter_raises_value_error(cls, field, bad):
    with pytest.raises(ValueError, match=field):
        cls(**{field: bad})


@pytest.mark.parametrize("p", [1.0, 1, 1.5, 1 + 1e-12])
def test_discrete_p_at_least_one_raises(p):
    with pytest.raises(ValueError, match="p"):
        Discrete(p=p)


@pytest.mark.parametrize("C, eps", [(1.0, 1.0), (1.0, 2.0), (0.05, 0.05), (0.01, 0.5)])
def test_discrete_eps_not_below_C_raises(C, eps):
    with pytest.raises(ValueError, match="eps"):
        Discrete(C=C, eps=eps)


def test_valid_construction_and_defaults():
    assert Fixed().gamma == 1.0
    assert (InverseGamma().a, InverseGamma().b) == (1.0, 0.01)
    assert Gamma().beta == 100.0
    d = Discrete()
    assert (d.C, d.p, d.eps) == (1.0, 0.05, 0.05)
    # numpy scalars and ints are fine
    assert Fixed(gamma=np.float32(2.0)).gamma == 2.0
    assert InverseGamma(a=2, b=np.int64(3)).b == 3
    Discrete(C=2.0, p=0.999, eps=1.999)


@pytest.mark.parametrize("value", [np.float64(2.0), np.float32(2.0), 2, np.int64(2)])
def test_numpy_scalar_hyperparameters_hash_like_floats(value):
    """Priors are static arguments of jitted functions: equal hyper-parameters, equal
    priors, equal hashes, whatever numeric type the user passed."""
    assert Fixed(gamma=value) == Fixed(gamma=2.0)
    assert hash(Fixed(gamma=value)) == hash(Fixed(gamma=2.0))


@pytest.mark.parametrize("value", [np.array(2.0), jnp.asarray(2.0)], ids=["np-0d", "jax-0d"])
def test_array_scalar_hyperparameter_is_rejected_or_hashable(value):
    """A 0-d array hyper-parameter must either be refused (ValueError) or be stored so that
    the prior stays hashable (e.g. converted to float): never an unhashable prior."""
    try:
        prior = Fixed(gamma=value)
    except ValueError:
        return
    assert hash(prior) == hash(Fixed(gamma=2.0))


# ----------------------------------------------------------------------------- registry
@pytest.mark.parametrize(
    "name, cls",
    [
        ("fixed", Fixed),
        ("inverse-gamma", InverseGamma),
        ("inverse_gamma", InverseGamma),
        ("Inverse-Gamma", InverseGamma),
        ("gamma", Gamma),
        ("GAMMA", Gamma),
        ("discrete", Discrete),
    ],
)
def test_get_prior_by_name(name, cls):
    p = get_prior(name)
    assert type(p) is cls
    assert p == cls()


def test_get_prior_passes_hyperparameters():
    assert get_prior("discrete", eps=0.07, p=0.2) == Discrete(eps=0.07, p=0.2)
    assert get_prior("inverse-gamma", a=2.0, b=0.5) == InverseGamma(a=2.0, b=0.5)
    assert get_prior("gamma", beta=3.0).beta == 3.0
    assert get_prior("fixed", gamma=0.5).gamma == 0.5
    with pytest.raises(ValueError):
        get_prior("discrete", eps=2.0)


@pytest.mark.parametrize("name", ["lasso", "", "inversegamma", "normal"])
def test_get_prior_unknown_name(name):
    with pytest.raises(ValueError, match="unknown prior"):
        get_prior(name)


def test_names_are_unique_and_exposed():
    names = [Fixed.name, InverseGamma.name, Gamma.name, Discrete.name]
    assert names == ["fixed", "inverse-gamma", "gamma", "discrete"]
    assert bmc.priors.get_prior is get_prior


# ----------------------------------------------------------------------------- frozen / hashable
ALL = [
    Fixed(gamma=0.5),
    InverseGamma(a=2.0, b=0.3),
    Gamma(beta=7.0),
    Discrete(C=2.0, p=0.1, eps=0.01),
]
IDS = [p.name for p in ALL]


@pytest.mark.parametrize("prior", ALL, ids=IDS)
def test_frozen_and_hashable(prior):
    assert isinstance(prior, Prior)
    field = dataclasses.fields(prior)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(prior, field, 1.0)
    clone = dataclasses.replace(prior)
    assert clone == prior and hash(clone) == hash(prior)
    assert len({prior, clone}) == 1
    assert prior.hyperparameters() == dataclasses.asdict(prior)
    assert str(prior).startswith(prior.name + "(")


def test_different_hyperparameters_differ():
    assert Fixed(gamma=1.0) != Fixed(gamma=2.0)
    assert Discrete(p=0.1) != Discrete(p=0.2)
    assert InverseGamma() != Gamma()


@pytest.mark.parametrize("prior", ALL, ids=IDS)
def test_prior_is_a_valid_jit_static_argument(prior):
    calls = []

    def f(prior, x):
        calls.append(1)
        return prior.vb_update(x, 20).inv_mean

    jf = jax.jit(f, static_argnums=0)
    x = jnp.ones(3)
    jf(prior, x)
    jf(dataclasses.replace(prior), x)  # equal prior: cache hit, no retrace
    assert len(calls) == 1


# ----------------------------------------------------------------------------- log_prob
def test_inverse_gamma_log_prob(x64):
    a, b = 2.5, 0.3
    g = np.array([1e-3, 0.1, 1.0, 40.0])
    np.testing.assert_allclose(
        InverseGamma(a=a, b=b).log_prob(jnp.asarray(g), 50),
        st.invgamma.logpdf(g, a, scale=b),
        rtol=1e-12,
    )


@pytest.mark.parametrize("d", [11, 2625, 12000])
def test_gamma_log_prob_uses_shape_d_plus_1_over_2(x64, d):
    beta = 3.0
    g = np.array([1e-2, 0.5, 1.0, (d + 1) / beta**2, 3 * d / beta**2])
    np.testing.assert_allclose(
        Gamma(beta=beta).log_prob(jnp.asarray(g), d),
        st.gamma.logpdf(g, (d + 1) / 2, scale=2 / beta**2),
        rtol=1e-11,
    )


def test_discrete_log_prob_is_a_pmf(x64):
    prior = Discrete(C=2.0, p=0.2, eps=0.1)
    lp = np.asarray(prior.log_prob(jnp.array([2.0, 0.1, 1.0, 0.0]), 10))
    np.testing.assert_allclose(lp[:2], [math.log(0.2), math.log(0.8)], rtol=1e-14)
    assert np.all(lp[2:] == -np.inf)
    np.testing.assert_allclose(np.exp(lp[0]) + np.exp(lp[1]), 1.0, rtol=1e-14)


def test_fixed_log_prob_is_a_point_mass():
    lp = np.asarray(Fixed(gamma=0.5).log_prob(jnp.array([0.5, 0.6, 1.0]), 10))
    assert lp[0] == 0.0 and np.all(lp[1:] == -np.inf)


@pytest.mark.parametrize(
    "prior", [InverseGamma(a=2.0, b=0.3), Gamma(beta=2.0)], ids=["inverse-gamma", "gamma"]
)
def test_continuous_log_prob_integrates_to_one(x64, prior):
    d = 8
    t = np.linspace(-30, 30, 200_001)  # integrate on log scale
    lp = np.asarray(prior.log_prob(jnp.asarray(np.exp(t)), d)) + t
    np.testing.assert_allclose(np.sum(np.exp(lp)) * (t[1] - t[0]), 1.0, rtol=1e-8)


# ----------------------------------------------------------------------------- init_gamma
@pytest.mark.parametrize(
    "prior",
    ALL + [InverseGamma(a=1e-3, b=1e-6), Gamma(beta=0.01)],
    ids=IDS + ["inverse-gamma-tiny", "gamma-small-beta"],
)
@pytest.mark.parametrize("d", [11, 12000])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_init_gamma(x64, prior, d, dtype):
    g = prior.init_gamma(5, d, dtype)
    assert g.shape == (5,) and g.dtype == dtype
    g_np = np.asarray(g)
    assert np.all(np.isfinite(g_np)) and np.all(g_np > 0)
    assert np.all(g_np == g_np[0]), "deterministic start: the same value for every h"
    # the starting value is in the prior's support
    assert np.all(np.isfinite(np.asarray(prior.log_prob(g.astype(jnp.float64), d))))
    np.testing.assert_array_equal(np.asarray(prior.init_gamma(5, d, dtype)), g_np)


def test_init_gamma_default_dtype_is_float32():
    for prior in ALL:
        assert prior.init_gamma(3, 20).dtype == jnp.float32


# ----------------------------------------------------------------------------- NumPyro sites
@pytest.mark.parametrize("prior", ALL, ids=IDS)
def test_sample_latents_sites(prior):
    m1, m2, K = 6, 5, 3
    with numpyro.handlers.trace() as tr, numpyro.handlers.seed(rng_seed=0):
        gamma, M, N = prior.sample_latents(m1, m2, K)
    assert gamma.shape == (K,) and M.shape == (m1, K) and N.shape == (m2, K)
    assert {"gamma", "M", "N"} <= set(tr)
    assert tr["gamma"]["value"].shape == (K,)
    assert np.all(np.asarray(gamma) > 0)

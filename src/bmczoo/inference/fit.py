"""``bmc.fit``: a thin front door over the settings objects and their drivers.

``fit`` checks the arguments common to every method, composes the model from its
components (prior, likelihood, offsets), builds the method's settings object from the
method-specific arguments (:func:`bmczoo.inference.settings.settings_for`: an argument
that does not belong to the method is an error naming both), prepares the data, and
hands over to the driver of that settings type (:data:`DRIVERS`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._checks import check_bool, check_dtype, check_int, check_K, check_prior, check_ratings
from ..data import RatingData, TensorData
from ..likelihoods import Likelihood
from ..models.matrix_completion import model_likelihood
from ..offsets import Context, GlobalMean, Offset, get_biases, looks_like_ratings
from ..priors import Discrete, NormalWishart, Prior
from . import settings as st
from .baselines import fit_map, fit_nuts, fit_svi, x64_context
from .gibbs.driver import fit_gibbs
from .problem import Prepared
from .results import FitInfo, FitResult, GibbsFit, MAPFit, MCMCFit, NUTSFit, SVIFit, VBFit
from .settings import Settings, all_argument_names, check_known, settings_for
from .vb.driver import fit_vb

__all__ = [
    "fit",
    "GibbsFit",
    "NUTSFit",
    "MCMCFit",
    "VBFit",
    "SVIFit",
    "MAPFit",
    "FitResult",
    "looks_like_ratings",
]


#: the driver of each settings type: ``(prepared data, info, progress_bar) -> result``
DRIVERS = {
    st.Gibbs: fit_gibbs,
    st.VB: fit_vb,
    st.NUTS: fit_nuts,
    st.SVI: fit_svi,
    st.MAP: fit_map,
}


def _sampled_offsets(context, settings: Settings, train: RatingData, test, predict, dtype) -> tuple:
    """The sampled offsets of ``context=`` (a tuple, empty for None or False), checked
    against the method and the data."""
    if context is None or context is False:
        return ()
    off = Context() if context is True else context
    if not isinstance(off, Offset):
        raise TypeError(f"context must be True, False or a bmczoo.offsets.Context, got {context!r}")
    if settings.method not in ("gibbs", "vb", "nuts"):
        raise ValueError(
            f"context= is fitted by method='gibbs', 'vb' and 'nuts' only, not {settings.method!r}"
        )
    if predict is not None:
        raise ValueError(
            "with context=, give the entries to predict as test= (a RatingData holding their "
            "context): predict=(rows, cols) carries none"
        )
    if test is not None and check_ratings(test, "test").context is None:
        raise ValueError("test has no per-rating context: context= needs it at the test ratings")
    # a clear error without train.context, with an unknown group or a rating with two
    # features of one group
    off.arrays(train.context, train.n, dtype)
    off = off.bind(train.context)
    if test is not None:
        off.check_columns(test.context, "test.context")
    return (off,)


def _prepare(train: RatingData, test, predict, offsets: GlobalMean, sampled: tuple = ()):
    fit_data, shift = offsets.prepare(train)
    # entries whose posterior mean is accumulated: the test entries first, then predict=
    pr, pc = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    test_values = np.zeros(0)
    if test is not None:
        test = check_ratings(test, "test")
        if test.shape != train.shape:
            raise ValueError(f"test has shape {test.shape}, train has {train.shape}")
        pr.append(test.rows), pc.append(test.cols)
        test_values = np.asarray(test.values, np.float64)
    if predict is not None:
        if not (isinstance(predict, (tuple, list)) and len(predict) == 2):
            raise TypeError(f"predict must be a pair (rows, cols), got {type(predict).__name__}")
        r, c = train.check_entries(*predict, name="predict")
        pr.append(r), pc.append(c)
    context = test.context if sampled and test is not None else None
    prep = Prepared(train, fit_data, np.concatenate(pr), np.concatenate(pc), test_values, context)
    return prep, shift


def _fit_argument_names() -> set[str]:
    import inspect

    return {n for n, p in inspect.signature(fit).parameters.items() if p.kind is not p.VAR_KEYWORD}


def _method_settings(method, positional: dict, kwargs: dict) -> Settings:
    check_known(kwargs, _fit_argument_names() | all_argument_names())
    given = {k: v for k, v in positional.items() if v is not None}
    if isinstance(method, Settings):
        extra = sorted({**given, **kwargs})
        if extra:
            raise ValueError(
                f"method is a settings object ({type(method).__name__}); give "
                f"{', '.join(extra)} to it, not to fit"
            )
        return method
    return settings_for(method, **given, **kwargs)


def fit(
    train: RatingData,
    K: int = 5,
    prior: Prior | None = None,
    method: str | Settings = "gibbs",
    num_warmup: int | None = None,
    num_samples: int | None = None,
    thinning: int | None = None,
    num_chains: int | None = None,
    lam: float | None = None,
    noise_sd: float = 1.0,
    seed: int = 0,
    progress_bar: bool = True,
    test: RatingData | None = None,
    devices=None,
    *,
    predict: tuple | None = None,
    center: bool = True,
    clip: str | bool | tuple[float, float] = "auto",
    dtype=None,
    likelihood: Likelihood | None = None,
    biases=False,
    context=None,
    **method_kwargs,
) -> FitResult:
    """Fit the low-rank model to ``train``.

    Parameters
    ----------
    train : RatingData
    K : int
        Latent dimension, ``1 <= K <= min(m1, m2)``.
    prior : bmczoo.priors.Prior, default ``Discrete()``
    method : {"gibbs", "vb", "svi", "nuts", "map"} or a settings object
        Conjugate blocked Gibbs; closed-form mean-field CAVI; NumPyro SVI with an autoguide;
        NumPyro NUTS (small problems); ``AutoDelta``.  A :mod:`bmczoo.inference.settings`
        object (``bmc.inference.Gibbs(num_samples=2000)``, ...) gives method and settings.
    num_warmup, num_samples, thinning, num_chains : int, optional
        Gibbs/NUTS: ``num_warmup + num_samples`` sweeps per chain, every ``thinning``-th
        post-warm-up draw kept (defaults 100, 900, 10, 4: four chains, vectorised, so that
        R-hat compares chains).  VB: ``num_chains`` random starts run side by side, the
        highest final ELBO kept (default 1).
    lam, noise_sd : float
        Shorthand for ``likelihood=bmc.likelihoods.Tempered(lam, noise_sd)``.
    seed : int
        Seed of ``jax.random.key``.
    progress_bar : bool
        Show a progress bar (tqdm) while sampling or iterating.
    test : RatingData, optional
        Entries whose posterior mean is computed during the fit and whose RMSE is
        recorded per iteration (the paper's Figures 1 and 4).
    devices : sequence of jax devices or a one-axis ``jax.sharding.Mesh``, optional
        Gibbs and VB: shard every sweep / iteration over these devices.
    predict : (rows, cols), optional
        Further entries whose posterior mean is computed during the fit.
    center, clip :
        The offsets component (:class:`bmczoo.offsets.GlobalMean`): fit ``Y - mean(Y)``;
        clip predictions (``"auto"``: to the observed range of star ratings).
    dtype : {float32, float64}, optional
        Default float32 (float64 when ``jax_enable_x64`` is on).
    likelihood : bmczoo.likelihoods.Likelihood, optional
        Default the paper's :class:`~bmczoo.likelihoods.Tempered`;
        :class:`~bmczoo.likelihoods.LearnedNoise` learns the noise level;
        :class:`~bmczoo.likelihoods.Probit` (values 0/1) and
        :class:`~bmczoo.likelihoods.OrderedProbit` (ordinal levels) observe the values
        through a latent Gaussian (then ``predict`` is the expected level and
        ``predict_proba`` gives the level probabilities).
    biases : bool or bmczoo.offsets.Biases
        Row and column biases ``b_i + c_j`` (``True``: the default ``Biases()``).
    context : bool or bmczoo.offsets.Context, optional
        Gibbs: per-rating covariates ``x_k . w`` from ``train.context`` (``True``: the
        default ``Context()``); ``test`` must then carry its ratings' context.
    **method_kwargs :
        The method's other settings (:mod:`bmczoo.inference.settings`); an argument of
        another method raises ``ValueError`` naming it and the method, an argument that no
        method takes ``TypeError`` naming it and the closest valid name.

    Returns
    -------
    GibbsFit, NUTSFit, VBFit, SVIFit or MAPFit (:mod:`bmczoo.inference.results`)
    """
    positional = dict(
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=thinning,
        num_chains=num_chains,
        devices=devices,
    )
    if isinstance(train, TensorData):  # the CP model of an N-way array
        settings = _method_settings(method, positional, method_kwargs)
        model = dict(likelihood=likelihood, lam=lam, noise_sd=noise_sd, biases=biases)
        run = dict(seed=seed, dtype=dtype, center=center, clip=clip, progress_bar=progress_bar)
        if predict is not None or context not in (None, False):
            raise ValueError("predict= and context= are not implemented for a TensorData")
        return _fit_tensor(train, K, prior, settings, test, {**model, **run, "kw": method_kwargs})
    train = check_ratings(train, "train")
    dt = check_dtype(dtype)
    settings = _method_settings(method, positional, method_kwargs)
    likelihood, offsets = _observation_model(train, likelihood, lam, noise_sd, center, clip)
    _check_method(likelihood, settings)
    sampled = _sampled_offsets(context, settings, train, test, predict, dt)
    prep, shift = _prepare(train, test, predict, offsets, sampled)
    components = dict(likelihood=likelihood, biases=get_biases(biases), offsets=sampled)
    info = _compose(
        train, K, prior, settings, shift, center=center, seed=seed, dtype=dt, components=components
    )
    check_bool("progress_bar", progress_bar)
    with x64_context(dt):
        return _with_training(DRIVERS[type(settings)](prep, info, progress_bar), train)


def _fit_tensor(train: TensorData, K, prior, settings, test, opts: dict):
    """``bmc.fit`` on a :class:`~bmczoo.data.TensorData`: Gibbs on the CP model
    (:mod:`bmczoo.inference.tensor`), with the column-scale priors, the Gaussian
    likelihoods and biases per mode; mean-field VB (:mod:`bmczoo.inference.tensor.vb`:
    column-scale priors, Gaussian likelihoods, no biases); NUTS, SVI and MAP on its
    NumPyro model (column-scale priors).  The result holds the training entries (``seen_index``)."""
    from .tensor.fit import (
        check_tensor_settings,
        fit_tensor,
        fit_tensor_nuts,
        fit_tensor_svi,
    )
    from .tensor.vb_fit import fit_tensor_vb

    check_tensor_settings(settings, opts["kw"])
    dt = check_dtype(opts["dtype"])
    prior = Discrete() if prior is None else check_prior(prior)
    if not prior.has_column_scales and (not isinstance(prior, NormalWishart) or prior.linked_sides):
        raise ValueError(
            f"the {prior.name} prior{' with features' if not prior.has_column_scales else ''}"
            " is not implemented for a TensorData yet"
        )
    likelihood = model_likelihood(opts["likelihood"], opts["lam"], opts["noise_sd"])
    if likelihood.latent or likelihood.weighted or likelihood.all_pairs:
        raise ValueError(
            f"the {likelihood.name} likelihood is not implemented for a TensorData yet"
        )
    if test is not None:
        if not isinstance(test, TensorData):
            raise TypeError(f"test must be a TensorData like train, got {type(test).__name__}")
        if test.shape != train.shape:
            raise ValueError(f"test has shape {test.shape}, train has {train.shape}")
    fit_data, shift = GlobalMean(center=opts["center"], clip=opts["clip"]).prepare(train)
    info = FitInfo(
        method=settings.method,
        prior=prior,
        likelihood=likelihood,
        K=check_int("K", K, minimum=1),
        shape=train.shape,
        shift=shift,
        center=opts["center"],
        seed=check_int("seed", opts["seed"], minimum=0),
        dtype=jnp.dtype(dt).name,
        settings=settings.for_prior(prior),
        tau=likelihood.precision(train.n),
        biases=get_biases(opts["biases"]),
    )
    check_bool("progress_bar", opts["progress_bar"])
    drivers = {st.NUTS: fit_tensor_nuts, st.SVI: fit_tensor_svi, st.MAP: fit_tensor_svi}
    drivers[st.VB] = fit_tensor_vb
    run = drivers.get(type(settings), fit_tensor)
    if run is not fit_tensor and not prior.has_column_scales:
        raise ValueError(
            f"method={settings.method!r} on a TensorData takes a column-scale prior, not "
            f"{prior.name}"
        )
    with x64_context(dt):
        result = run(fit_data, info, test, opts["progress_bar"])
    result.seen_index = train.indices
    return result


def _observation_model(train: RatingData, likelihood, lam, noise_sd, center, clip):
    """The likelihood and the offsets a fit uses.  A latent likelihood fits the levels as
    they are (no centring, no clipping) and reads its levels (and a probit's threshold, the
    analogue of centring) from the data."""
    likelihood = model_likelihood(likelihood, lam, noise_sd)
    offsets = GlobalMean(center=center, clip=clip)  # checks center and clip in every case
    if likelihood.all_pairs:  # the values are the observed pairs' strengths, as they are
        check_bool("center", center)
        likelihood.check_values(train.values)
        return likelihood, GlobalMean(center=False, clip=False)
    if likelihood is None or not likelihood.latent:
        return likelihood, offsets
    check_bool("center", center)
    likelihood = likelihood if likelihood.bound else likelihood.bind(train.values, center=center)
    likelihood.level_index(train.values)
    return likelihood, GlobalMean(center=False, clip=False)


def _check_method(likelihood: Likelihood, settings: Settings) -> None:
    """A clear error where the likelihood is not implemented for the method."""
    if settings.method in likelihood.unsupported_methods:
        raise ValueError(
            f"the {likelihood.name} likelihood is not implemented for method="
            f"{settings.method!r}; use another method (method='gibbs', for one)"
        )


def _with_training(result: FitResult, train: RatingData) -> FitResult:
    """The training ratings (shared, not copied) on the result: the pattern for
    ``recommend(exclude_seen=True)``, the values for ``to_arviz(log_likelihood=True)``
    and their per-rating table (not saved by ``fit.save``)."""
    result.seen_rows, result.seen_cols, result.seen_values = train.rows, train.cols, train.values
    result.seen_context = train.context
    return result


def _compose(
    train: RatingData,
    K,
    prior,
    settings: Settings,
    shift,
    *,
    center,
    seed,
    dtype,
    components: dict,
) -> FitInfo:
    """The model's components (``likelihood``, ``biases``, ``offsets``) and the run's
    settings, checked, as the fit's typed info."""
    prior = Discrete() if prior is None else check_prior(prior)
    return FitInfo(
        method=settings.method,
        prior=prior,
        K=check_K(K, train.shape),
        shape=train.shape,
        shift=shift,
        center=center,
        seed=check_int("seed", seed, minimum=0),
        dtype=jnp.dtype(dtype).name,
        settings=settings.for_prior(prior),
        tau=components["likelihood"].precision(train.n),
        **components,
    )

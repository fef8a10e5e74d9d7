"""Inference settings as validated objects, one class per method (NumPyro's MCMC/SVI split).

Each settings object is checked once, when built; the driver of a fit is picked by the
settings' type (:data:`DRIVERS` in :mod:`bmczoo.inference.fit`).  ``bmc.fit(...,
method="gibbs", num_samples=...)`` builds :class:`Gibbs` from its keyword arguments and
rejects an argument that belongs to another method, naming the method's arguments (an
argument that no method takes is a ``TypeError`` naming the closest valid one)::

    bmc.fit(train, K=10, prior=prior, method=bmc.inference.Gibbs(num_samples=2000, num_chains=4))

Every error of a setting is a :class:`~bmczoo.inference.errors.SettingsError` (a
``TypeError`` for a wrong type, a ``ValueError`` for a wrong value) whose ``param`` is
``bmc.fit``'s name of the argument: callers name it their own way from that field, never
from the message's wording.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from typing import Any, ClassVar

import numpy as np

from .._checks import check_bool, check_choice, check_int, check_path, check_real
from .._rng import GAMMA_SAMPLERS
from ..linalg import ROW_DRAWS
from .errors import (
    SettingsError,
    SettingsTypeError,
    SettingsValueError,
    UnknownArgumentError,
    WrongMethodError,
)
from .errors import checked as _checked
from .errors import literal as _literal

__all__ = [
    "Settings",
    "Gibbs",
    "SweepOptions",
    "VB",
    "NUTS",
    "SVI",
    "MAP",
    "SETTINGS",
    "settings_for",
    "check_overrelax",
    "SettingsError",
    "SettingsValueError",
    "SettingsTypeError",
    "WrongMethodError",
    "UnknownArgumentError",
]


def _int(param: str, value, minimum: int, label: str | None = None) -> int:
    """``value`` as an int >= ``minimum`` (:func:`bmczoo._checks.check_int`)."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )
    return _checked(check_int, param, value, f"must be {what}", label=label, minimum=minimum)


def _choice(param: str, value, choices) -> str:
    """``value`` as one of ``choices`` (:func:`bmczoo._checks.check_choice`)."""
    what = f"must be one of {tuple(choices)}"
    return _checked(check_choice, param, value, what, choices, type_reason=f"{what} (a string)")


def _real(param: str, value, what: str, **bounds) -> float:
    """``value`` as a finite float within ``bounds`` (:func:`bmczoo._checks.check_real`,
    whose ``what`` for those bounds is given: ``"finite and >= 0"``)."""
    return _checked(
        check_real,
        param,
        value,
        f"must be {what}",
        type_reason=f"must be a real number, {what}",
        **bounds,
    )


def check_overrelax(rho) -> float:
    """``rho`` as a float in (-1, 1), else an error naming ``overrelax``."""
    if isinstance(rho, (bool, np.bool_)) or not isinstance(
        rho, (numbers.Real, np.floating, np.integer)
    ):
        raise SettingsTypeError("overrelax", rho, "must be a number in (-1, 1)")
    rho = float(rho)
    if not -1.0 < rho < 1.0:
        raise SettingsValueError("overrelax", rho, "must be in (-1, 1) (0: plain Gibbs)")
    return rho


def _check_init_gamma(value):
    if value is None:
        return None
    try:
        g = np.asarray(value, np.float64)
    except (ValueError, TypeError):
        raise SettingsTypeError(
            "init_gamma", value, "must be a positive number or an array of them"
        ) from None
    if g.ndim > 1 or not np.all(np.isfinite(g) & (g > 0)):
        raise SettingsValueError("init_gamma", value, "must be finite and > 0")
    return float(g) if g.ndim == 0 else tuple(float(x) for x in g)


def _check_track(track):
    if isinstance(track, (numbers.Integral, np.integer)) and not isinstance(
        track, (bool, np.bool_)
    ):
        if track < 0:
            raise SettingsValueError("track", track, "must be >= 0 or (rows, cols)")
        return int(track)
    if not (isinstance(track, (tuple, list)) and len(track) == 2):
        raise SettingsTypeError(
            "track", track, "must be a number of entries or a pair (rows, cols)"
        )
    return (np.asarray(track[0]), np.asarray(track[1]))


def _check_mcmc(s) -> None:
    _int("num_warmup", s.num_warmup, 0)
    _int("num_samples", s.num_samples, 1)
    _int("thinning", s.thinning, 1)
    _int("num_chains", s.num_chains, 1)
    if s.thinning > s.num_samples:
        raise SettingsValueError(
            "thinning",
            s.thinning,
            "{thinning} > {num_samples} keeps no draw",
            others={"num_samples": s.num_samples},
        )


def _check_checkpoint(s) -> None:
    if s.checkpoint is not None:
        _checked(check_path, "checkpoint", s.checkpoint, "must be a file path")
    _int("checkpoint_every", s.checkpoint_every, 1)


def _mesh(devices):
    if devices is None:
        return None
    from .sharding import make_mesh

    return make_mesh(devices)


@dataclasses.dataclass(frozen=True, eq=False)
class Settings:
    """Base class: ``method`` names the driver (``bmc.fit(method=...)``)."""

    method: ClassVar[str] = ""

    @classmethod
    def argument_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (metadata, reports)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "devices":
                v = None if v is None else int(v.devices.size)
            elif f.name == "track" and not isinstance(v, int):
                v = "entries"
            elif f.name == "checkpoint" and v is not None:
                v = str(v)
            out[f.name] = v
        return out

    def for_prior(self, prior) -> "Settings":
        """The settings as they apply to ``prior`` (choices left to the prior resolved)."""
        return self


def check_column_moves(value) -> bool | None:
    """``column_moves``: True, False or None (the moves where the prior has one)."""
    if value is not None and not isinstance(value, (bool, np.bool_)):
        raise SettingsTypeError(
            "column_moves", value, "must be True, False or None (on where the prior has a move)"
        )
    return None if value is None else bool(value)


def check_anneal(steps, every) -> tuple[int, int]:
    """``anneal_steps`` (an int >= 0; 0: no annealed switch) and ``anneal_every`` (an int
    >= 1), else an error naming the argument."""
    return _int("anneal_steps", steps, 0), _int("anneal_every", every, 1)


def check_spike_and_slab(prior, steps: int | None = None) -> None:
    """Raise unless ``prior``'s column scales have a slab to switch with
    (:meth:`~bmczoo.priors.Prior.column_block`): what the annealed switch needs
    (``anneal_steps``, ``steps`` where known)."""
    import jax.numpy as jnp

    if not (prior.has_column_move and prior.column_block(jnp.ones(1)) is not None):
        name = _literal(prior.name or type(prior).__name__)
        raise SettingsValueError(
            "anneal_steps",
            steps,
            f"the {name} prior has no spike and slab to switch between "
            "({names[anneal_steps]} > 0 needs the discrete prior)",
            others={},
        )


def check_column_moves_every(value) -> int | None:
    """``column_moves_every``: the column moves run every that many sweeps (an int >= 1;
    None: the prior's :attr:`~bmczoo.priors.Prior.column_moves_every`)."""
    return None if value is None else _int("column_moves_every", value, 1)


def resolve_column_moves(value, prior) -> bool:
    """``column_moves`` for ``prior``: None means where the prior has a column move."""
    return bool(prior.has_column_move) if value is None else bool(value)


def resolve_column_moves_every(value, prior) -> int:
    """``column_moves_every`` for ``prior``: None means the prior's own schedule (1 without
    a prior)."""
    if value is not None:
        return value
    return 1 if prior is None else int(prior.column_moves_every)


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """What a Gibbs sweep adds to its plain blocks, checked when built (the fields of
    :class:`Gibbs` of the same names; :class:`~bmczoo.inference.ConjugateGibbs` and
    :func:`bmczoo.inference.gibbs.build_problem` take them through this object).

    Parameters
    ----------
    overrelax : float
        Adler's over-relaxation of the row draws, in (-1, 1); 0 is plain Gibbs.
    column_moves : bool or None
        The moves that change ``gamma_h`` with its column; None: wherever the prior has one.
    column_moves_every : int or None
        Sweeps between two rounds of column moves (1: every sweep); None: the prior's
        :attr:`~bmczoo.priors.Prior.column_moves_every` (4 for the discrete prior, else 1).
    fuse_column_moves : bool
        Run each side's column moves inside the sweep, between the sparse products of its
        half sweep and its draw (the default: they reuse those products and cost no pass
        over the ratings); False: at the end of the sweep.  Both are exact; their draws
        differ.
    anneal_steps, anneal_every : int
        Steps of the discrete prior's annealed switch (0: none) and sweeps between switches.
    gamma_sampler : {"jax", "one-hash"}
        The sampler of the sweep's gamma variates (the inverse-gamma and gamma priors'
        scales, the Wishart draws, a learned noise precision, the bias variances):
        ``"one-hash"`` (the default: :func:`bmczoo._rng.standard_gamma`, one threefry hash
        per rejection round, a faster first compilation) or ``"jax"``
        (``jax.random.gamma``: the same law, other draws).
    row_draw : {"bordered", "two-solves"}
        How each row is drawn from its Gaussian conditional: ``"bordered"`` (the default:
        one Cholesky factorisation of the precision bordered by the right-hand side, which
        gives the first triangular solve, and one solve; :func:`bmczoo.linalg.draw_rows`)
        or ``"two-solves"`` (the factorisation of the precision and two solves: the same
        law, other rounding).
    """

    overrelax: float = 0.0
    column_moves: bool | None = None
    column_moves_every: int | None = None
    fuse_column_moves: bool = True
    anneal_steps: int = 0
    anneal_every: int = 50
    gamma_sampler: str = "one-hash"
    row_draw: str = "bordered"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __post_init__(self):
        object.__setattr__(self, "overrelax", check_overrelax(self.overrelax))
        object.__setattr__(self, "column_moves", check_column_moves(self.column_moves))
        object.__setattr__(
            self, "column_moves_every", check_column_moves_every(self.column_moves_every)
        )
        object.__setattr__(
            self,
            "fuse_column_moves",
            _checked(
                check_bool, "fuse_column_moves", self.fuse_column_moves, "must be True or False"
            ),
        )
        steps, every = check_anneal(self.anneal_steps, self.anneal_every)
        object.__setattr__(self, "anneal_steps", steps)
        object.__setattr__(self, "anneal_every", every)
        _choice("gamma_sampler", self.gamma_sampler, GAMMA_SAMPLERS)
        _choice("row_draw", self.row_draw, ROW_DRAWS)

    def for_prior(self, prior) -> "SweepOptions":
        """The options for ``prior``: ``column_moves=None`` resolved (True where the prior
        has a column move) and ``column_moves_every=None`` (the prior's schedule); an
        error when ``prior`` lacks what an option needs."""
        if self.anneal_steps:
            check_spike_and_slab(prior, self.anneal_steps)
        if self.column_moves and not prior.has_column_move:
            name = _literal(prior.name or type(prior).__name__)
            raise SettingsValueError(
                "column_moves",
                True,
                f"the {name} prior has no column move ({{column_moves}} needs a prior with "
                "column scales that defines column_proposal; leave it unset for the moves "
                "wherever the prior has one)",
                others={},
            )
        return dataclasses.replace(
            self,
            column_moves=resolve_column_moves(self.column_moves, prior),
            column_moves_every=resolve_column_moves_every(self.column_moves_every, prior),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Gibbs(Settings):
    """Conjugate blocked Gibbs sampling (:mod:`bmczoo.inference.gibbs`).

    ``num_warmup + num_samples`` sweeps per chain, every ``thinning``-th post-warm-up draw
    kept; ``chain_method`` as in NumPyro's ``MCMC`` (``"vectorized"`` advances all chains
    in one batched sweep); ``overrelax`` in (-1, 1): Adler over-relaxed row updates (0:
    plain Gibbs); ``column_moves``: add to each sweep the moves that change ``gamma_h``
    together with its column (docs/algorithms.md, "Column moves"; priors that define
    ``column_proposal``: the discrete, inverse-gamma and gamma priors); None (the
    default): on wherever the prior has a move, the plain sweep for the others; False:
    the paper's plain sweep; ``column_moves_every``: the moves run every that many sweeps
    (None, the default: the prior's schedule, every fourth sweep for the discrete prior and
    every sweep for the others); ``fuse_column_moves``: the moves run inside the sweep,
    each side's between its sparse products and its draw, reusing them (True, the default;
    False: at its end; both exact, different draws); ``anneal_steps`` > 0 (the discrete prior): every
    ``anneal_every`` sweeps, one spike/slab switch annealed over that many steps
    (:func:`bmczoo.inference.gibbs.annealed_switch`; 0, the default: none);
    ``gamma_sampler``: ``"one-hash"`` (the default: the sweep's gamma variates from one
    threefry hash per rejection round, a faster first compilation) or ``"jax"``
    (``jax.random.gamma``: the same law, other draws); ``row_draw``: ``"bordered"`` (the
    default: one Cholesky factorisation and one triangular solve per row) or
    ``"two-solves"`` (two solves: the same law, other rounding); ``init_gamma``: starting gamma (default the prior's); ``track``: entries
    whose theta is kept per draw (a number of random training entries, or (rows, cols));
    ``store_factors``: keep M, N of each kept draw, with the biases, a feature link's ``B``
    and feature-driven biases' weights (``"auto"``: when those of all kept draws of all
    chains take < 256 MiB);
    ``checkpoint``/``checkpoint_every``: save and resume (``.npz``); ``devices``: shard
    each sweep over these devices.

    Parameters
    ----------
    num_warmup, num_samples : int
        Warm-up sweeps and sweeps after warm-up, per chain.
    thinning : int
        Keep every ``thinning``-th post-warm-up draw.
    num_chains : int
        Number of chains.
    chain_method : {"vectorized", "sequential", "parallel"}
        As in NumPyro's ``MCMC``.
    overrelax : float
        Adler's over-relaxation of the row draws, in (-1, 1); 0 is plain Gibbs.
    column_moves : bool or None
        The moves that change ``gamma_h`` with its column; None: wherever the prior has one.
    column_moves_every : int or None
        Sweeps between two rounds of column moves (1: every sweep; None: the prior's).
    fuse_column_moves : bool
        The column moves inside the sweep, reusing its sparse products (the default; False:
        at its end).
    anneal_steps, anneal_every : int
        Steps of the discrete prior's annealed switch (0: none) and sweeps between switches.
    gamma_sampler : {"jax", "one-hash"}
        The sampler of the sweep's gamma variates: ``bmczoo._rng.standard_gamma`` (the
        default, a faster first compilation) or ``jax.random.gamma`` (other draws).
    row_draw : {"bordered", "two-solves"}
        How the rows are drawn: one factorisation of the bordered precision and one
        triangular solve per row (the default) or two solves (the same law, other rounding).
    init_gamma : optional
        Starting column scales (default the prior's).
    track : int or (rows, cols)
        Entries whose theta is kept per draw.
    store_factors : bool or "auto"
        Keep ``M``, ``N`` of each kept draw (and the other draws of a factor's size: the
        biases, a feature link's ``B``, feature-driven biases' weights); ``"auto"``: when
        they take < 256 MiB for all kept draws of all chains.
    checkpoint : str or os.PathLike, optional
        Checkpoint file (``.npz``).
    checkpoint_every : int
        Sweeps between checkpoints.
    devices : sequence of jax.Device, optional
        Shard each sweep over these devices.
    """

    num_warmup: int = 100
    num_samples: int = 900
    thinning: int = 10
    num_chains: int = 4
    chain_method: str = "vectorized"
    overrelax: float = 0.0
    column_moves: bool | None = None
    column_moves_every: int | None = None
    fuse_column_moves: bool = True
    anneal_steps: int = 0
    anneal_every: int = 50
    gamma_sampler: str = "one-hash"
    row_draw: str = "bordered"
    init_gamma: Any = None
    track: Any = 8
    store_factors: Any = "auto"
    checkpoint: Any = None
    checkpoint_every: int = 100
    devices: Any = None
    method: ClassVar[str] = "gibbs"

    @property
    def sweep_options(self) -> SweepOptions:
        """The options of the sweep itself, as a ``SweepOptions`` (checked when the settings
        were built)."""
        return self._sweep_options

    def for_prior(self, prior) -> "Gibbs":
        """``column_moves=None`` resolved (True where ``prior`` has a column move) and
        ``column_moves_every=None`` (the prior's schedule)."""
        options = self.sweep_options.for_prior(prior)
        if (options.column_moves, options.column_moves_every) == (
            self.column_moves,
            self.column_moves_every,
        ):
            return self
        return dataclasses.replace(
            self,
            column_moves=options.column_moves,
            column_moves_every=options.column_moves_every,
        )

    def __post_init__(self):
        _check_mcmc(self)
        _choice("chain_method", self.chain_method, ("vectorized", "sequential", "parallel"))
        options = SweepOptions(**{f: getattr(self, f) for f in SweepOptions.field_names()})
        for f in SweepOptions.field_names():
            object.__setattr__(self, f, getattr(options, f))
        object.__setattr__(self, "_sweep_options", options)
        object.__setattr__(self, "init_gamma", _check_init_gamma(self.init_gamma))
        object.__setattr__(self, "track", _check_track(self.track))
        if not (isinstance(self.store_factors, (bool, np.bool_)) or self.store_factors == "auto"):
            raise SettingsValueError(
                "store_factors", self.store_factors, "must be True, False or 'auto'"
            )
        _check_checkpoint(self)
        object.__setattr__(self, "devices", _mesh(self.devices))
        if self.devices is not None and self.chain_method == "parallel":
            raise SettingsValueError(
                "chain_method",
                self.chain_method,
                "{chain_method} maps chains to devices; with {names[devices]} use 'vectorized'",
                others={"devices": None},
            )
        if self.checkpoint is not None and self.chain_method != "vectorized":
            raise SettingsValueError(
                "chain_method",
                self.chain_method,
                "{names[checkpoint]} runs the chains vectorized; {chain_method} is not "
                "available with it",
                others={"checkpoint": str(self.checkpoint)},
            )


@dataclasses.dataclass(frozen=True, eq=False)
class VB(Settings):
    """Closed-form mean-field VB (CAVI, :mod:`bmczoo.inference.vb`): stop when the relative
    ELBO change is below ``tol`` or after ``max_iter``; ``restarts`` random starting
    points run side by side, the highest final ELBO kept; checkpoints and devices as for
    :class:`Gibbs`.

    Parameters
    ----------
    max_iter : int
        Maximum number of iterations.
    tol : float
        Relative ELBO change below which the iterations stop.
    restarts : int
        Independent runs from random starting points, side by side; the one with the
        highest final ELBO is kept.  ``bmc.fit(method="vb", num_chains=R)`` is the same as
        ``restarts=R`` (VB has runs, not chains); the result reports them as ``num_runs``
        and ``best_run``.
    checkpoint : str or os.PathLike, optional
        Checkpoint file (``.npz``).
    checkpoint_every : int
        Iterations between checkpoints.
    devices : sequence of jax.Device, optional
        Shard each iteration over these devices.
    """

    max_iter: int = 200
    tol: float = 1e-4
    restarts: int = 1
    checkpoint: Any = None
    checkpoint_every: int = 100
    devices: Any = None
    method: ClassVar[str] = "vb"

    def __post_init__(self):
        _int("max_iter", self.max_iter, 1)
        object.__setattr__(self, "tol", _real("tol", self.tol, "finite and >= 0", low=0.0))
        # bmc.fit's num_chains is VB's restarts: the error names both
        _int("num_chains", self.restarts, 1, label="restarts (num_chains)")
        _check_checkpoint(self)
        object.__setattr__(self, "devices", _mesh(self.devices))


@dataclasses.dataclass(frozen=True, eq=False)
class NUTS(Settings):
    """NumPyro NUTS on :func:`bmczoo.models.matrix_completion` (small problems).

    Parameters
    ----------
    num_warmup, num_samples : int
        Warm-up and kept iterations per chain (before thinning).
    thinning : int
        Keep every ``thinning``-th draw.
    num_chains : int
        Number of chains.
    track : int or (rows, cols)
        Entries whose theta is kept per draw.
    target_accept_prob : float
        NUTS's target acceptance probability.
    """

    num_warmup: int = 100
    num_samples: int = 900
    thinning: int = 10
    num_chains: int = 4
    track: Any = 8
    target_accept_prob: float = 0.8
    method: ClassVar[str] = "nuts"

    def __post_init__(self):
        _check_mcmc(self)
        object.__setattr__(self, "track", _check_track(self.track))
        _real(
            "target_accept_prob",
            self.target_accept_prob,
            "finite and > 0 and < 1",
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )


@dataclasses.dataclass(frozen=True, eq=False)
class SVI(Settings):
    """NumPyro SVI with an autoguide (``"normal"``: AutoNormal, ``"lowrank"``:
    AutoLowRankMultivariateNormal), Adam with a step size decaying tenfold over
    ``num_steps``, optional minibatches of ``subsample_size`` ratings; ``num_draws``
    draws from the fitted guide are kept.

    Parameters
    ----------
    guide : {"normal", "lowrank"}
        The autoguide.
    num_steps : int
        Optimisation steps.
    learning_rate : float
        Adam's initial step size.
    subsample_size : int, optional
        Ratings per minibatch (None: all).
    num_draws : int
        Draws kept from the fitted guide.
    """

    guide: str = "normal"
    num_steps: int = 2000
    learning_rate: float = 0.05
    subsample_size: int | None = None
    num_draws: int = 100
    method: ClassVar[str] = "svi"

    def __post_init__(self):
        _choice("guide", self.guide, ("normal", "lowrank"))
        _check_optimisation(self)
        _int("num_draws", self.num_draws, 1)


@dataclasses.dataclass(frozen=True, eq=False)
class MAP(Settings):
    """MAP by NumPyro's ``AutoDelta`` on the gamma-marginal model (nuclear norm for the
    fixed prior, group lasso for the gamma prior).

    Parameters
    ----------
    num_steps : int
        Optimisation steps.
    learning_rate : float
        Adam's initial step size.
    subsample_size : int, optional
        Ratings per minibatch (None: all).
    """

    num_steps: int = 2000
    learning_rate: float = 0.05
    subsample_size: int | None = None
    method: ClassVar[str] = "map"

    def __post_init__(self):
        _check_optimisation(self)


def _check_optimisation(s) -> None:
    """The optimisation settings that :class:`SVI` and :class:`MAP` share."""
    _int("num_steps", s.num_steps, 1)
    _real("learning_rate", s.learning_rate, "finite and > 0", low=0.0, low_open=True)
    if s.subsample_size is not None:
        _int("subsample_size", s.subsample_size, 1)


#: settings class of each ``method`` name
SETTINGS: dict[str, type[Settings]] = {cls.method: cls for cls in (Gibbs, VB, SVI, NUTS, MAP)}

# fit's names for settings fields that differ by method
_ALIASES = {"vb": {"num_chains": "restarts"}}


def methods_taking(name: str) -> list[str]:
    return [
        m
        for m, cls in SETTINGS.items()
        if name in cls.argument_names() or name in _ALIASES.get(m, {})
    ]


def all_argument_names() -> set[str]:
    """Every argument that some method's settings take (under ``bmc.fit``'s names)."""
    names = set()
    for m, cls in SETTINGS.items():
        names |= set(cls.argument_names()) | set(_ALIASES.get(m, {}))
    return names


def check_known(names, valid, where: str = "fit()") -> None:
    """:class:`UnknownArgumentError` (a ``TypeError``) for the first of ``names`` not in
    ``valid``, naming it and, where one is close (``difflib.get_close_matches``), the
    valid name it resembles."""
    for name in names:
        if name not in valid:
            close = difflib.get_close_matches(name, sorted(valid), n=1)
            raise UnknownArgumentError(name, where=where, suggestion=close[0] if close else None)


def settings_for(method: str, **kwargs) -> Settings:
    """Build the settings of ``method`` from ``bmc.fit``'s keyword arguments.

    An argument that no method takes raises :class:`UnknownArgumentError` (a
    ``TypeError``) naming it and the closest valid name; an argument of another method
    :class:`WrongMethodError` (a ``ValueError``) naming it and the methods that take it;
    a bad value the :class:`SettingsError` of its argument, with ``method`` set."""
    _choice("method", method, tuple(SETTINGS))
    check_known(kwargs, all_argument_names())
    cls = SETTINGS[method]
    aliases = _ALIASES.get(method, {})
    own = set(cls.argument_names()) | set(aliases)
    for name in kwargs:
        if name not in own:
            raise WrongMethodError(
                name,
                kwargs[name],
                method=method,
                methods=tuple(methods_taking(name)),
                accepted=tuple(sorted(own)),
            )
    try:
        return cls(**{aliases.get(k, k): v for k, v in kwargs.items()})
    except SettingsError as e:
        e.method = method
        raise

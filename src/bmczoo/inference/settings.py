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
from typing import Any, ClassVar

import numpy as np

from .._checks import check_bool
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
from .checks import (
    check_checkpoint,
    check_init_gamma,
    check_mcmc,
    check_track,
    choice_setting,
    int_setting,
    mesh_of,
    real_setting,
    check_anneal,
    check_column_moves,
    check_column_moves_every,
    check_overrelax,
    check_spike_and_slab,
    resolve_column_moves,
    resolve_column_moves_every,
)
from .options import INTERNALS_GROUP, OUTPUTS_GROUP, documented, option, options_of

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


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class _Sweep:
    """The options of the Gibbs sweep, declared once: :class:`SweepOptions` and
    :class:`Gibbs` have these fields."""

    overrelax: float = option(
        0.0,
        "float",
        "Adler's over-relaxation of the row draws, in (-1, 1); 0 is plain Gibbs (-0.7 mixes "
        "faster).",
        flag=True,
        metavar="RHO",
        group=INTERNALS_GROUP,
    )
    column_moves: bool | None = option(
        None,
        "bool or None",
        "Add to each sweep the moves that change ``gamma_h`` together with its column "
        "(docs/algorithms.md, 'Column moves'; the discrete, inverse-gamma and gamma priors); "
        "None (the default): wherever the prior has one; False: the paper's plain sweep.",
        flag=True,
        group=INTERNALS_GROUP,
        before=False,
    )
    column_moves_every: int | None = option(
        None,
        "int or None",
        "Sweeps between two rounds of column moves (1: every sweep); None (the default): the "
        "prior's :attr:`~bmczoo.priors.Prior.column_moves_every` (4 for the discrete prior, "
        "else 1).",
        flag=True,
        metavar="S",
        group=INTERNALS_GROUP,
        before=1,
        recorded_with="column_moves",
    )
    fuse_column_moves: bool = option(
        True,
        "bool",
        "Run each side's column moves inside the sweep, between the sparse products of its "
        "half sweep and its draw, reusing them (:func:`bmczoo.inference.gibbs.fused_moves`; "
        "the default); False: at the end of the sweep (slower).  Both are exact; their draws "
        "differ.",
        flag=True,
        group=INTERNALS_GROUP,
        before=False,
        recorded_with="column_moves",
    )
    anneal_steps: int = option(
        0,
        "int",
        "With the discrete prior, every ``anneal_every`` sweeps, switch one column between "
        "spike and slab along a path of that many steps "
        "(:func:`bmczoo.inference.gibbs.annealed_switch`; 0: none).",
        flag=True,
        metavar="T",
        group=INTERNALS_GROUP,
        before=0,
    )
    anneal_every: int = option(
        50,
        "int",
        "Sweeps between two annealed switches.",
        flag=True,
        metavar="S",
        group=INTERNALS_GROUP,
        recorded_with="anneal_steps",
    )
    gamma_sampler: str = option(
        "one-hash",
        '{"one-hash", "jax"}',
        "The sampler of the sweep's gamma variates (the inverse-gamma and gamma priors' "
        "scales, the Wishart draws, a learned noise precision, the bias variances): "
        "``one-hash`` (``bmczoo._rng.standard_gamma``, one threefry hash per rejection "
        "round, faster to compile) or ``jax`` (``jax.random.gamma``: the same law, other "
        "draws).",
        flag=True,
        group=INTERNALS_GROUP,
        choices=GAMMA_SAMPLERS,
        before="jax",
    )
    row_draw: str = option(
        "bordered",
        '{"bordered", "two-solves"}',
        "How each row is drawn from its Gaussian conditional: ``bordered`` (one Cholesky "
        "factorisation of the precision bordered by the right-hand side, then one triangular "
        "solve; :func:`bmczoo.linalg.draw_rows`) or ``two-solves`` (the factorisation and two "
        "solves: the same law, other rounding).",
        flag=True,
        group=INTERNALS_GROUP,
        choices=ROW_DRAWS,
        before="two-solves",
    )

    def _check_sweep(self) -> None:
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
        for name, opt in options_of(_Sweep).items():
            if opt.choices is not None:
                choice_setting(name, getattr(self, name), opt.choices)


@documented
@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepOptions(_Sweep):
    """What a Gibbs sweep adds to its plain blocks, checked when built (the fields of
    :class:`Gibbs` of the same names; :class:`~bmczoo.inference.ConjugateGibbs` and
    ``bmczoo.inference.gibbs.build_problem`` take them through this object).
    """

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def __post_init__(self):
        self._check_sweep()

    def for_prior(self, prior) -> "SweepOptions":
        """The options for ``prior``: ``column_moves=None`` resolved (True where the prior
        has a column move) and ``column_moves_every=None`` (the prior's schedule); an
        error when ``prior`` lacks what an option needs.

        Parameters
        ----------
        prior : bmczoo.priors.Prior
            The prior of the fit.
        """
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


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class _Chains(Settings):
    """The fields of the MCMC methods (:class:`Gibbs`, :class:`NUTS`)."""

    num_warmup: int = option(
        100, "int", "Warm-up iterations per chain (Gibbs: sweeps).", flag=True, metavar="N"
    )
    num_samples: int = option(
        900,
        "int",
        "Iterations after warm-up per chain, before thinning (Gibbs: sweeps).",
        flag=True,
        metavar="N",
    )
    thinning: int = option(
        10, "int", "Keep every ``thinning``-th post-warm-up draw.", flag=True, metavar="N"
    )
    num_chains: int = option(
        4, "int", "Chains, advanced side by side.", flag="--chains", metavar="N"
    )
    track: Any = option(
        8,
        "int or (rows, cols)",
        "Entries whose theta is kept per draw (a number of random training entries, or the "
        "entries' rows and columns).",
        record=False,
    )


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class _Checkpointed(Settings):
    """The checkpoints and devices of :class:`Gibbs` and :class:`VB`."""

    checkpoint: Any = option(
        None,
        "str or os.PathLike, optional",
        "Checkpoint file (``.npz``): the state is saved there every ``checkpoint_every`` "
        "iterations and on an interrupt; the same run started again resumes from it.",
        flag=True,
        metavar="FILE.npz",
        group=OUTPUTS_GROUP,
        record=False,
    )
    checkpoint_every: int = option(
        100,
        "int",
        "Iterations (Gibbs: sweeps) between checkpoints.",
        flag=True,
        metavar="N",
        group=OUTPUTS_GROUP,
        record=False,
    )
    devices: Any = option(
        None,
        "sequence of jax.Device, optional",
        "Shard each iteration over these devices (the draws of one device's run).",
        record=False,
    )


@documented
@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class Gibbs(_Sweep, _Checkpointed, _Chains):
    """Conjugate blocked Gibbs sampling (:mod:`bmczoo.inference.gibbs`).

    ``num_warmup + num_samples`` sweeps per chain, every ``thinning``-th post-warm-up draw
    kept; the sweep's options are those of :class:`~bmczoo.inference.settings.SweepOptions`.
    """

    chain_method: str = option(
        "vectorized",
        '{"vectorized", "sequential", "parallel"}',
        "As in NumPyro's ``MCMC`` (``vectorized`` advances all chains in one batched sweep).",
        choices=("vectorized", "sequential", "parallel"),
        record=False,
    )
    init_gamma: Any = option(
        None, "optional", "Starting column scales (default the prior's).", record=False
    )
    store_factors: Any = option(
        "auto",
        'bool or "auto"',
        "Keep ``M``, ``N`` of each kept draw (and the other draws of a factor's size: the "
        "biases, a feature link's ``B``, feature-driven biases' weights), which recommend, "
        "fold-in and new entries of a saved model need; ``auto``: when they take < 256 MiB "
        "for all kept draws of all chains.",
        flag=True,
        group=OUTPUTS_GROUP,
        words={"auto": "auto", "yes": True, "no": False},
        record=False,
    )
    method: ClassVar[str] = "gibbs"

    @property
    def sweep_options(self) -> SweepOptions:
        """The options of the sweep itself, as a ``SweepOptions`` (checked when the settings
        were built)."""
        return SweepOptions(**{f: getattr(self, f) for f in SweepOptions.field_names()})

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
        check_mcmc(self)
        choice_setting("chain_method", self.chain_method, ("vectorized", "sequential", "parallel"))
        self._check_sweep()
        object.__setattr__(self, "init_gamma", check_init_gamma(self.init_gamma))
        object.__setattr__(self, "track", check_track(self.track))
        if not (isinstance(self.store_factors, (bool, np.bool_)) or self.store_factors == "auto"):
            raise SettingsValueError(
                "store_factors", self.store_factors, "must be True, False or 'auto'"
            )
        check_checkpoint(self)
        object.__setattr__(self, "devices", mesh_of(self.devices))
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


@documented
@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class VB(_Checkpointed):
    """Closed-form mean-field VB (CAVI, :mod:`bmczoo.inference.vb`): stop when the relative
    ELBO change is below ``tol`` or after ``max_iter``; ``restarts`` random starting
    points run side by side, the highest final ELBO kept; checkpoints and devices as for
    :class:`Gibbs`.
    """

    max_iter: int = option(200, "int", "Maximum number of iterations.", flag=True, metavar="N")
    tol: float = option(
        1e-4,
        "float",
        "Stop when the relative change of the ELBO is below ``tol`` (0: run ``max_iter`` "
        "iterations).",
        flag=True,
        metavar="TOL",
    )
    restarts: int = option(
        1,
        "int",
        "Runs from random starting points, side by side; the one with the highest final ELBO "
        "is kept.  ``bmc.fit(method='vb', num_chains=R)`` is ``restarts=R`` (VB has runs, not "
        "chains); the result reports them as ``num_runs`` and ``best_run``.",
        flag="--chains",
        metavar="N",
        name="num_chains",
    )
    method: ClassVar[str] = "vb"

    def __post_init__(self):
        int_setting("max_iter", self.max_iter, 1)
        object.__setattr__(self, "tol", real_setting("tol", self.tol, "finite and >= 0", low=0.0))
        # bmc.fit's num_chains is VB's restarts: the error names both
        int_setting("num_chains", self.restarts, 1, label="restarts (num_chains)")
        check_checkpoint(self)
        object.__setattr__(self, "devices", mesh_of(self.devices))


@documented
@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class NUTS(_Chains):
    """NumPyro NUTS on :func:`bmczoo.models.matrix_completion` (small problems)."""

    target_accept_prob: float = option(0.8, "float", "NUTS's target acceptance probability.")
    method: ClassVar[str] = "nuts"

    def __post_init__(self):
        check_mcmc(self)
        object.__setattr__(self, "track", check_track(self.track))
        real_setting(
            "target_accept_prob",
            self.target_accept_prob,
            "finite and > 0 and < 1",
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
        )


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class _Optimisation(Settings):
    """The optimisation settings that :class:`SVI` and :class:`MAP` share."""

    num_steps: int = option(2000, "int", "Optimisation steps.", flag=True, metavar="N")
    learning_rate: float = option(0.05, "float", "Adam's initial step size.")
    subsample_size: int | None = option(None, "int, optional", "Ratings per minibatch (None: all).")

    def __post_init__(self):
        int_setting("num_steps", self.num_steps, 1)
        real_setting("learning_rate", self.learning_rate, "finite and > 0", low=0.0, low_open=True)
        if self.subsample_size is not None:
            int_setting("subsample_size", self.subsample_size, 1)


@documented
@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class SVI(_Optimisation):
    """NumPyro SVI with an autoguide (``"normal"``: AutoNormal, ``"lowrank"``:
    AutoLowRankMultivariateNormal), Adam with a step size decaying tenfold over
    ``num_steps``, optional minibatches of ``subsample_size`` ratings; ``num_draws``
    draws from the fitted guide are kept.
    """

    guide: str = option("normal", '{"normal", "lowrank"}', "The autoguide.")
    num_draws: int = option(100, "int", "Draws kept from the fitted guide.")
    method: ClassVar[str] = "svi"

    def __post_init__(self):
        choice_setting("guide", self.guide, ("normal", "lowrank"))
        super().__post_init__()
        int_setting("num_draws", self.num_draws, 1)


@documented
@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class MAP(_Optimisation):
    """MAP by NumPyro's ``AutoDelta`` on the gamma-marginal model (nuclear norm for the
    fixed prior, group lasso for the gamma prior).
    """

    method: ClassVar[str] = "map"


#: settings class of each ``method`` name
SETTINGS: dict[str, type[Settings]] = {cls.method: cls for cls in (Gibbs, VB, SVI, NUTS, MAP)}

# fit's names for settings fields that differ by method (an option's ``name``)
_ALIASES = {
    m: {o.name: f for f, o in options_of(cls).items() if o.name is not None}
    for m, cls in SETTINGS.items()
}


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
    choice_setting("method", method, tuple(SETTINGS))
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

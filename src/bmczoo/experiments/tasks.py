"""Frozen descriptions of the experiments' work: data, sampler settings, fits and units.

Everything here is a plain value (frozen, hashable, picklable), so that a worker process
can rebuild a fit from its description and a fit's cache key is a function of it alone.
:func:`plan_unit` turns one prior on one dataset into its validation fits over a grid of
hyper-parameters and Gibbs starts; it asks the prior's class for the hyper-parameter to
vary (:meth:`~bmczoo.priors.Prior.tuned_name`) and the prior for its starts
(:meth:`~bmczoo.priors.Prior.gibbs_starts`), and never branches on a prior's name.

A fit's likelihood and biases components are plain values too: their ``describe()`` as
``(name, value)`` pairs (:func:`component_pairs`), empty for the defaults (the paper's
tempered likelihood, no biases), so that the cache keys of the paper's fits do not depend on
components they do not use.  So are the prior's feature links (:func:`links_pairs`: the data's side
tables and implicit feedback, e.g. ``row_features=True, implicit=True``), empty without.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Union


from ..priors import Prior, registry

__all__ = [
    "GRID_FACTORS",
    "Settings",
    "QUICK",
    "FULL",
    "Prepared",
    "SimulationData",
    "MovieLensData",
    "DataSpec",
    "FitTask",
    "Unit",
    "Pairs",
    "as_pairs",
    "component_pairs",
    "biases_pairs",
    "links_pairs",
    "link_labels",
    "prior_class",
    "plan_unit",
]

# the factors the grid applies to a prior's tuned hyper-parameter (x1 is the given value)
GRID_FACTORS = (0.5, 1.0, 2.0)
METHODS = ("gibbs", "vb")
STAGES = ("validation", "test")

Pairs = tuple[tuple[str, Any], ...]


def as_pairs(hyper: Mapping | Pairs) -> Pairs:
    """Hyper-parameters (a mapping or ``(name, value)`` pairs) as a tuple of pairs, in order."""
    items = hyper.items() if isinstance(hyper, Mapping) else hyper
    return tuple((str(k), v) for k, v in items)


def _default_likelihood() -> Pairs:
    """The description of ``bmc.fit``'s default likelihood (the paper's tempered one)."""
    from ..likelihoods import Tempered

    return as_pairs(Tempered().describe())


def component_pairs(component) -> Pairs:
    """A likelihood as plain pairs: ``()`` for None or ``bmc.fit``'s default likelihood (the
    paper's tempered one, whatever it is called), else the component's ``describe()`` as
    pairs (its ``name`` first, then its settings); pairs (or a mapping) are taken as given
    and normalised the same way."""
    if component is None:
        return ()
    pairs = as_pairs(component if isinstance(component, (Mapping, tuple)) else component.describe())
    return () if pairs == _default_likelihood() else pairs


def biases_pairs(biases) -> Pairs:
    """``bmc.fit``'s ``biases=`` argument as plain pairs: ``()`` for False/None (no biases),
    else the :class:`~bmczoo.offsets.Biases` component's ``describe()`` (``True``: the
    default one); pairs (or a mapping) are taken as given."""
    from ..offsets import get_biases

    if isinstance(biases, (Mapping, tuple)):
        return as_pairs(biases)
    component = get_biases(biases)
    if component is None:
        return ()
    settings = component.describe()
    links = settings.pop("links", None)
    if links:
        settings.update(_bias_link_keywords(links))
    return as_pairs(settings)


def _bias_link_keywords(links: dict) -> dict:
    """The keywords of a :class:`~bmczoo.offsets.Biases` with feature links from its
    description's ``links``: plain values (``True``: the data's side table), as a task's
    prior links are; ``ValueError`` for a feature table of the biases' own."""
    out = {}
    for side, name in (("rows", "row_features"), ("cols", "col_features")):
        features = links.get(side, {}).get("features")
        if features not in (None, "data"):
            raise ValueError(
                f"an experiment's biases take the data's {name} (True), not a table of their own"
            )
        out[name] = True if features == "data" else None
    implicit = tuple(s for s in ("rows", "cols") if links.get(s, {}).get("implicit"))
    out["implicit"] = True if len(implicit) == 2 else (implicit[0] if implicit else False)
    return out


#: the prior keywords of a feature link a task may set, with the values it takes (plain
#: values: ``True`` is the data's side table, so a task names no array)
LINK_KEYWORDS = {
    "row_features": (True,),
    "col_features": (True,),
    "implicit": (True, "rows", "cols"),
}


def links_pairs(links) -> Pairs:
    """The prior's feature links as sorted plain pairs: a mapping or pairs of
    :data:`LINK_KEYWORDS` (``row_features=True`` / ``col_features=True``: the data's side
    tables; ``implicit=True``, ``"rows"`` or ``"cols"``: implicit feedback), False/None
    values dropped; ``()`` for None (no link).  ``ValueError`` names a keyword or value
    that is not one of these."""
    if links is None:
        return ()
    out = []
    for name, value in as_pairs(links):
        if name not in LINK_KEYWORDS:
            raise ValueError(
                f"links: unknown keyword {name!r}; a task's links are {', '.join(LINK_KEYWORDS)}"
            )
        if value is False or value is None:
            continue
        if not any(value is v or (isinstance(v, str) and value == v) for v in LINK_KEYWORDS[name]):
            allowed = ", ".join(repr(v) for v in (False, *LINK_KEYWORDS[name]))
            raise ValueError(f"links: {name} must be one of {allowed}, got {value!r}")
        out.append((name, value))
    return tuple(sorted(out))


def link_labels(links: Pairs) -> tuple[str, ...]:
    """The links' names in a model's label: ``side`` (both sides' tables) or
    ``side-rows`` / ``side-cols``, then ``implicit`` (both sides) or ``implicit-rows`` /
    ``implicit-cols``."""
    d = dict(links)
    sides = [s for s, k in (("rows", "row_features"), ("cols", "col_features")) if d.get(k)]
    out = []
    if sides:
        out.append("side" if len(sides) == 2 else f"side-{sides[0]}")
    imp = d.get("implicit")
    if imp:
        out.append("implicit" if imp is True else f"implicit-{imp}")
    return tuple(out)


def _settings_of(pairs: Pairs) -> dict:
    """A component's settings: its pairs less the ``name``."""
    return {k: v for k, v in pairs if k != "name"}


def prior_class(name: str) -> type[Prior]:
    """The registered prior class called ``name``; ``ValueError`` for an unknown name."""
    classes = registry()
    if name not in classes:
        raise ValueError(f"unknown prior {name!r}; known: {', '.join(sorted(classes))}")
    return classes[name]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sampler settings of an experiment (part of every cache key, field by field).

    Attributes
    ----------
    seeds : the simulated datasets (one unit per seed; MovieLens uses seed 0 only).
    num_warmup, num_samples, thinning : the Gibbs chains.
    vb_max_iter : the VB iterations.
    column_moves : the Gibbs fits of priors with column moves run them at the end of
        every sweep (True, the default); False: the paper's plain sweep for every prior
        (``reproduce --no-column-moves``).  Part of the cache key only when True, so the
        plain runs keep the keys they had before the setting existed.
    """

    seeds: tuple[int, ...]
    num_warmup: int
    num_samples: int
    thinning: int
    vb_max_iter: int
    column_moves: bool = True


FULL = Settings(seeds=(0, 1, 2, 3), num_warmup=100, num_samples=900, thinning=10, vb_max_iter=200)
QUICK = Settings(seeds=(0,), num_warmup=50, num_samples=250, thinning=5, vb_max_iter=60)


class Prepared(NamedTuple):
    """A dataset ready to fit: the inner 90% of the training data and the 10% validation
    split carved out of it, all training data, and the test-stage RMSE of a fit."""

    inner: Any
    valid: Any
    train: Any
    evaluate: Callable[[Any], float]


@dataclasses.dataclass(frozen=True)
class SimulationData:
    """The paper's simulation: an ``m x m`` matrix from dataset seed ``seed``.

    The test-stage RMSE is against the true ``theta`` over all ``m^2`` entries; the
    validation split is seeded by ``seed + 1000``.
    """

    m: int
    seed: int
    factor_scale: str = "variance"

    def prepare(self) -> Prepared:
        """Simulate the data and carve out the validation split."""
        from ..datasets import simulate_paper

        sim = simulate_paper(self.m, factor_scale=self.factor_scale, seed=self.seed)

        def evaluate(f) -> float:
            """RMSE of the fit's posterior mean against the truth over all entries."""
            return f.rmse_theta(sim.theta)

        inner, valid = sim.train.split(0.1, seed=self.seed + 1000)
        return Prepared(inner, valid, sim.train, evaluate)


@dataclasses.dataclass(frozen=True)
class MovieLensData:
    """A MovieLens dataset (``"100k"``, ``"1m"``, ...), from ``path`` or the download
    cache; an 80/20 split (seed 0), the test-stage RMSE on the 20%."""

    dataset: str
    path: str | None = None

    def prepare(self) -> Prepared:
        """Load the ratings, split them and carve out the validation split (seed 1000)."""
        from ..datasets import load_movielens

        train, test = load_movielens(self.dataset, path=self.path).split(0.2, seed=0)
        inner, valid = train.split(0.1, seed=1000)
        return Prepared(inner, valid, train, lambda f: float(f.rmse(test)))


DataSpec = Union[SimulationData, MovieLensData]


@dataclasses.dataclass(frozen=True)
class FitTask:
    """One fit, described by plain values.

    Attributes
    ----------
    tag : ``(name, value)`` pairs that identify the cell in the cache key (experiment,
        dataset, prior, K, seed, ...).
    data : what to fit.
    stage : ``"validation"`` (fit the inner 90% of the training data, RMSE on the other
        10%) or ``"test"`` (fit all training data, RMSE against the truth / test set).
    method : ``"gibbs"`` or ``"vb"``.
    prior, hyper : the prior's registry name and its hyper-parameters (sorted pairs).
    K, seed : latent dimension and the fit's seed.
    settings : sampler settings.
    init_gamma : the Gibbs start; ``None``: the prior's own ``init_gamma`` (then the start
        is not part of the cache key).
    start : the start's label (``"default"`` when ``init_gamma`` is None).
    likelihood : the likelihood's ``describe()`` as pairs (:func:`component_pairs`); ``()``:
        ``bmc.fit``'s default (the paper's tempered likelihood; then it is not part of the
        cache key).
    biases : the biases component's ``describe()`` as pairs (:func:`biases_pairs`); ``()``:
        no biases (then not part of the cache key).
    links : the prior's feature links as pairs (:func:`links_pairs`: the data's side tables,
        implicit feedback); ``()``: none (then not part of the cache key).
    """

    tag: Pairs
    data: DataSpec
    stage: str
    method: str
    prior: str
    hyper: Pairs
    K: int
    seed: int
    settings: Settings
    init_gamma: float | None = None
    start: str = "default"
    likelihood: Pairs = ()
    biases: Pairs = ()
    links: Pairs = ()

    def __post_init__(self):
        # plain pairs, the default likelihood as () (one cache key per model)
        object.__setattr__(self, "likelihood", component_pairs(self.likelihood))
        object.__setattr__(self, "biases", biases_pairs(self.biases))
        object.__setattr__(self, "links", links_pairs(self.links))
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {self.stage!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")

    @property
    def key_json(self) -> str:
        """The cache key as canonical JSON (sorted keys): the tag, stage, hyper-parameters,
        settings (``column_moves`` only when True); when ``init_gamma`` is set, the start and ``init_gamma``; when not the
        defaults, the likelihood and the biases (their descriptions) and the links."""
        settings = dataclasses.asdict(self.settings)
        if not settings["column_moves"]:
            del settings["column_moves"]  # the keys of runs made before the setting existed
        key = {
            **dict(self.tag),
            "stage": self.stage,
            "hyper": dict(self.hyper),
            "settings": settings,
        }
        if self.init_gamma is not None:
            key["start"], key["init_gamma"] = self.start, self.init_gamma
        if self.likelihood:
            key["likelihood"] = dict(self.likelihood)
        if self.biases:
            key["biases"] = dict(self.biases)
        if self.links:
            key["links"] = dict(self.links)
        return json.dumps(key, sort_keys=True, default=float)

    @property
    def key(self) -> dict:
        """The cache key as plain JSON data (what the cache file stores)."""
        return json.loads(self.key_json)

    def build_prior(self) -> Prior:
        """The prior of this fit (with its feature links)."""
        return _build(prior_class(self.prior), dict(self.hyper), self.links)

    def build_likelihood(self):
        """The likelihood of this fit (None: ``bmc.fit``'s default)."""
        from ..likelihoods import get_likelihood

        return (
            get_likelihood(dict(self.likelihood)["name"], **_settings_of(self.likelihood))
            if self.likelihood
            else None
        )

    def build_biases(self):
        """The biases component of this fit (None: no biases)."""
        from ..offsets import Biases

        return Biases(**_settings_of(self.biases)) if self.biases else None

    @property
    def components(self) -> tuple[str, ...]:
        """The names of what the model adds to the paper's: the prior's links
        (:func:`link_labels`), the likelihood, the biases, in that order; ``()`` for the
        paper's model."""
        names = tuple(dict(c)["name"] for c in (self.likelihood, self.biases) if c)
        return link_labels(self.links) + names


@dataclasses.dataclass(frozen=True)
class Unit:
    """One prior on one dataset: its validation fits (``candidates``, in grid order, each
    grid value with each of its starts) and the hyper-parameters the grid is centred on
    (``base_hyper``, in the order given: the paper's values in the experiments).

    ``components``: the names of the model's components beyond the paper's (its prior's
    feature links, its likelihood unless the default, ``biases``), e.g. ``("learned",
    "biases")`` or ``("side", "implicit", "learned", "biases")``; :attr:`label` is the
    prior's name joined with them by ``+``."""

    prior: str
    method: str
    base_hyper: Pairs
    candidates: tuple[FitTask, ...]
    components: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The model's name in tables: e.g. ``"normal-wishart+learned+biases"``."""
        return "+".join((self.prior, *self.components))


def _build(cls: type[Prior], hyper: dict, links: Pairs) -> Prior:
    """``cls(**hyper)`` with the feature links; ``ValueError`` when the prior takes none."""
    if links and not all(k in getattr(cls, "__dataclass_fields__", {}) for k, _ in links):
        raise ValueError(
            f"the {cls.name} prior has no feature links ({', '.join(k for k, _ in links)}); "
            "the Normal-Wishart prior has"
        )
    return cls(**hyper, **dict(links))


def _grid(cls: type[Prior], base: dict) -> list[tuple[Prior, dict]]:
    """The priors of the grid (with their hyper-parameters): ``base`` with its tuned
    hyper-parameter times each of :data:`GRID_FACTORS`; a point whose construction raises
    ``ValueError`` (e.g. a spike at least as wide as the slab) is skipped."""
    name = cls.tuned_name()
    out = []
    for factor in GRID_FACTORS:
        hyper = {**base, name: base[name] * factor}
        try:
            out.append((cls(**hyper), hyper))
        except ValueError:
            continue
    return out


def _starts(prior: Prior, method: str) -> list[tuple[str, float | None]]:
    """The starts tried: the prior's Gibbs starts; VB has one (it does not depend on the prior)."""
    return list(prior.gibbs_starts()) if method == "gibbs" else [("default", None)]


def plan_unit(
    tag: Mapping,
    data: DataSpec,
    *,
    method: str,
    prior: str,
    hyper: Mapping | Pairs,
    K: int,
    seed: int,
    settings: Settings,
    likelihood=None,
    biases=None,
) -> Unit:
    """The validation fits of one prior on one dataset.

    Parameters
    ----------
    tag : mapping
        What identifies the cell in the cache keys (JSON-serialisable values).
    data : SimulationData or MovieLensData
    method : {"gibbs", "vb"}
    prior : str
        A name of :func:`bmczoo.priors.registry`.
    hyper : mapping or pairs
        The hyper-parameters the grid is centred on; ``ValueError`` if the prior rejects them.
        The prior's feature links among them (the keywords of :data:`LINK_KEYWORDS`: the
        data's side tables ``row_features=True``, ``col_features=True`` and implicit
        feedback ``implicit=True``, ``"rows"`` or ``"cols"``) are the fits' ``links``
        (:func:`links_pairs`), the same at every grid point.
    K, seed : int
    settings : Settings
    likelihood : bmczoo.likelihoods.Likelihood or pairs, optional
        The model's likelihood (None: ``bmc.fit``'s default, the paper's).
    biases : bool, bmczoo.offsets.Biases or pairs, optional
        The model's row and column biases (None/False: none).

    Returns
    -------
    Unit
    """
    cls = prior_class(prior)
    base = tuple((k, v) for k, v in as_pairs(hyper) if k not in LINK_KEYWORDS)
    links = links_pairs([(k, v) for k, v in as_pairs(hyper) if k in LINK_KEYWORDS])
    _build(cls, dict(base), links)  # the grid's centre must be a valid prior
    common = dict(
        tag=tuple(sorted(dict(tag).items())),
        data=data,
        stage="validation",
        method=method,
        prior=prior,
        K=int(K),
        seed=int(seed),
        settings=settings,
        likelihood=component_pairs(likelihood),
        biases=biases_pairs(biases),
        links=links,
    )
    candidates = tuple(
        FitTask(
            hyper=tuple(sorted(h.items())),
            init_gamma=None if g is None else float(g),
            start=label,
            **common,
        )
        for p, h in _grid(cls, dict(base))
        for label, g in _starts(p, method)
    )
    return Unit(prior, method, base, candidates, candidates[0].components)

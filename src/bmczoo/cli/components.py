"""The zoo's components by command-line name: priors and likelihoods, their defaults and
``--hyper`` / ``--likelihood-opt`` settings."""

from __future__ import annotations

import dataclasses

from .errors import CLIError

DEFAULT_PRIOR = "discrete"


def priors() -> dict:
    """The zoo's priors by command-line name (:func:`bmczoo.priors.registry`)."""
    from ..priors import registry

    return registry()


def likelihoods() -> dict:
    """The likelihoods by command-line name (:func:`bmczoo.likelihoods.registry`)."""
    from ..likelihoods import registry

    return registry()


def prior_defaults(cls) -> dict:
    """The hyper-parameters ``bmczoo fit --prior NAME`` uses when no ``--hyper`` is given:
    the class's ``cli_defaults`` over its dataclass defaults (None: no default)."""
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        out[f.name] = cls.cli_defaults.get(f.name, default)
    return out


def _fmt_default(v) -> str:
    if v is None:
        return "?"
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def prior_help() -> str:
    """``--prior`` help: each prior of the registry with its default hyper-parameters."""
    parts = []
    for name, cls in sorted(priors().items()):
        hyper = ", ".join(f"{k}={_fmt_default(v)}" for k, v in prior_defaults(cls).items())
        parts.append(f"{name} ({hyper})" if hyper else name)
    text = (
        f"prior on the column scales gamma_h (default {DEFAULT_PRIOR}), with its default "
        "hyper-parameters: " + "; ".join(parts)
    )
    return text.replace("%", "%%")  # argparse formats help strings with %


def likelihood_help() -> str:
    """``--likelihood`` help: each likelihood of the registry with its ``cli_help``."""
    parts = [
        f"{name} ({cls.cli_help})" if cls.cli_help else name
        for name, cls in sorted(likelihoods().items())
    ]
    return ("observation model: " + "; ".join(parts)).replace("%", "%%")


def likelihood_opt_help() -> str:
    """``--likelihood-opt`` help: each likelihood's settings with their defaults (a
    default of None, read from the data, shown as ``?``)."""
    parts = []
    for name, cls in sorted(likelihoods().items()):
        fields = [f"{f.name}={_fmt_default(f.default)}" for f in dataclasses.fields(cls)]
        if fields:
            parts.append(f"{', '.join(fields)} ({name})")
    text = (
        "a setting of the likelihood, repeatable (default: the likelihood's own, "
        "? read from the data): " + "; ".join(parts)
    )
    return text.replace("%", "%%")


def make_prior(name: str, hyper: dict[str, float]):
    """The prior ``name`` with its class defaults (``from_cli``) updated by ``hyper``."""
    cls = priors()[name]
    fields = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(hyper) - set(fields))
    if unknown:
        raise CLIError(
            f"--hyper: the {name} prior has no hyper-parameter {', '.join(unknown)}; "
            f"it has {', '.join(fields)}"
        )
    return cls.from_cli(**hyper)


def make_likelihood(name: str, settings: dict[str, float]):
    """The likelihood ``name`` of :func:`bmczoo.likelihoods.registry` with ``settings``."""
    from ..likelihoods import get_likelihood

    try:
        return get_likelihood(name, **settings)
    except (TypeError, ValueError) as e:
        raise CLIError(f"--likelihood-opt: {e}") from None


def parse_hyper(items: list[str], option: str = "--hyper") -> dict[str, float]:
    """``NAME=VALUE`` items of a repeatable option (``--hyper``, ``--likelihood-opt``) as
    numbers by name."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise CLIError(f"{option} expects NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise CLIError(f"{option} {name}: {value!r} is not a number") from None
    return out

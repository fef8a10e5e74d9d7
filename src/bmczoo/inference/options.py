"""Each option of a fit declared once: a settings field and its :class:`Option`.

A field of a settings class (:mod:`bmczoo.inference.settings`) is declared with
:func:`option`, which stores in the field's metadata everything said about it elsewhere:

- its documentation: the class's Parameters section is built from it (:func:`documented`);
- its command-line flag: ``bmczoo fit``'s parser reads the flag, its help, choices, type
  and default from the fields (:func:`flags`);
- how a checkpoint records it (:func:`record`) and the value the paper's experiments run
  it with (:func:`before_values`): both from ``before``, the sampler before the option
  existed.

Adding an option to the Gibbs sweep is adding a field to
:class:`~bmczoo.inference.settings.SweepOptions`' declarations, the code that uses it, its
test and its documentation; ``bmc.fit``, :class:`~bmczoo.inference.Gibbs`,
:class:`~bmczoo.inference.ConjugateGibbs`, the command line, the checkpoints and the
experiments take it from there.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from collections.abc import Mapping
from typing import Any

__all__ = ["Option", "option", "documented", "Flag", "flags", "record", "before_values"]

#: the ``bmczoo fit --help`` groups that settings flags go to
METHOD_GROUP = "method and sampling"
OUTPUTS_GROUP = "outputs"
INTERNALS_GROUP = "Gibbs sampler internals"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclasses.dataclass(frozen=True)
class Option:
    """What is said about a settings field outside its class.

    Parameters
    ----------
    type : str
        The numpydoc type of the field (``"int"``, ``"bool or None"``).
    doc : str
        Its description, in the class's Parameters section and (without the reST markup)
        in its command-line help.
    flag : str or None
        Its ``bmczoo fit`` option (``"--num-samples"``); None: not on the command line.
    metavar : str or None
        The option's placeholder in ``--help``.
    group : str
        The ``bmczoo fit --help`` group the option is shown in.
    choices : tuple or None
        The values allowed (the command line's choices; the class checks them).
    words : mapping or None
        Command-line word -> value, where the command line spells the values otherwise
        (``{"yes": True, "no": False, "auto": "auto"}``).
    before : object
        The sampler's behaviour before the option existed: a checkpoint leaves the option
        out at this value (one written before it existed still resumes) and the paper's
        experiments run with it (their cached tables were drawn so).  UNSET: always
        recorded, the experiments run the default.
    recorded_with : str or None
        Another field that must be on for the option to be recorded (the option has no
        effect without it).
    record : bool
        Whether the checkpoint's settings record hold the field as it is (False: not
        recorded, or recorded by the driver in another form).
    name : str or None
        ``bmc.fit``'s name of the field where it differs (VB's ``restarts`` is
        ``num_chains``).
    """

    type: str
    doc: str
    flag: str | None = None
    metavar: str | None = None
    group: str = METHOD_GROUP
    choices: tuple | None = None
    words: Mapping | None = None
    before: Any = UNSET
    recorded_with: str | None = None
    record: bool = True
    name: str | None = None


def option(default: Any, type: str, doc: str, *, flag: bool | str = False, **kw) -> Any:
    """A settings field with its :class:`Option`.

    Parameters
    ----------
    default : object
        The field's default.
    type, doc : str
        The numpydoc type and the description (:class:`Option`).
    flag : bool or str
        The ``bmczoo fit`` option: True, ``--`` and the field's name with dashes; a string,
        that flag; False, none.
    **kw
        The other fields of :class:`Option`.

    Returns
    -------
    dataclasses.Field
    """
    opt = Option(type, doc, flag=flag if isinstance(flag, str) else None, **kw)
    return dataclasses.field(default=default, metadata={"option": opt, "derive_flag": flag is True})


def options_of(cls) -> dict[str, Option]:
    """The :class:`Option` of every field of the settings class ``cls``, by field name."""
    out = {}
    for f in dataclasses.fields(cls):
        opt = f.metadata.get("option")
        if opt is None:
            continue
        if f.metadata.get("derive_flag"):
            opt = dataclasses.replace(opt, flag="--" + (opt.name or f.name).replace("_", "-"))
        out[f.name] = opt
    return out


def documented(cls):
    """Class decorator: append the Parameters section built from the fields' options to
    the class's docstring (the docstring holds the summary only)."""
    lines = ["Parameters", "----------"]
    for name, opt in options_of(cls).items():
        lines.append(f"{name} : {opt.type}")
        lines += textwrap.wrap(
            " ".join(opt.doc.split()), 84, initial_indent="    ", subsequent_indent="    "
        )
    cls.__doc__ = inspect.cleandoc(cls.__doc__ or "") + "\n\n" + "\n".join(lines) + "\n"
    return cls


# ----------------------------------------------------------------------------- the command line
_ROLE = re.compile(r":[\w:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def plain(text: str) -> str:
    """``text`` without reST markup (roles and literals), on one line."""
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text)
    return " ".join(text.replace("``", "").split())


@dataclasses.dataclass(frozen=True)
class Flag:
    """One ``bmczoo fit`` option of the settings: ``name`` is ``bmc.fit``'s argument."""

    name: str
    flag: str
    group: str
    kind: Any  # argparse's type, or "switch" for --name / --no-name
    help: str
    metavar: str | None = None
    choices: tuple | None = None
    words: Mapping | None = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def spell(self, value) -> str:
        """``value`` as the command line writes this option with it."""
        if self.kind == "switch" and isinstance(value, bool):
            return self.flag if value else "--no-" + self.flag.removeprefix("--")
        for word, v in (self.words or {}).items():
            if v is value or (type(v) is type(value) and v == value):
                return f"{self.flag} {word}"
        return f"{self.flag} {value}"


_KINDS = {"int": int, "float": float, "str": str, "bool": "switch"}


def _kind(field: dataclasses.Field, opt: Option):
    if opt.choices is not None or opt.words is not None:
        return str
    return _KINDS.get(str(field.type).split("|")[0].strip(), str)


def _default_text(default, opt: Option) -> str:
    if default is None:  # the doc says what None means, else: nothing
        return "" if "default" in opt.doc else " (default: none)"
    if isinstance(default, bool):
        for word, v in (opt.words or {}).items():
            if v is default:
                return f" (default {word})"
        return " (default: on)" if default else " (default: off)"
    return f" (default {default:g})" if isinstance(default, float) else f" (default {default})"


def flags(classes: Mapping[str, type]) -> dict[str, Flag]:
    """The command-line options of the settings classes, by ``bmc.fit``'s argument name, in
    the order the fields are first declared.  One option serves every method whose settings
    have the field; its help says, per method, what the field does and its default
    (``"gibbs/nuts: ... (default 4); vb: ..."``).

    Parameters
    ----------
    classes : mapping
        Method name -> settings class.

    Returns
    -------
    dict of str to Flag
    """
    found: dict[str, dict] = {}
    for method, cls in classes.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for fname, opt in options_of(cls).items():
            if opt.flag is None:
                continue
            name = opt.name or fname
            text = plain(opt.doc) + _default_text(fields[fname].default, opt)
            entry = found.setdefault(name, {"opt": opt, "field": fields[fname], "texts": {}})
            entry["texts"].setdefault(text, []).append(method)
    out = {}
    for name, e in found.items():
        opt = e["opt"]
        text = "; ".join(f"{'/'.join(ms)}: {t}" for t, ms in e["texts"].items())
        out[name] = Flag(
            name,
            opt.flag,
            opt.group,
            _kind(e["field"], opt),
            text,
            metavar=opt.metavar,
            choices=opt.choices if opt.words is None else tuple(opt.words),
            words=opt.words,
        )
    return out


# ----------------------------------------------------------------------------- records
def record(settings, names=None) -> dict:
    """The fields of ``settings`` that identify a run for its checkpoint, as they are: each
    field whose option is recorded, left out at its ``before`` value or when the field it
    is ``recorded_with`` is off.

    Parameters
    ----------
    settings : bmczoo.inference.Settings
        The settings of the run.
    names : collection of str, optional
        Only these fields.

    Returns
    -------
    dict
    """
    out = {}
    for name, opt in options_of(type(settings)).items():
        if not opt.record or (names is not None and name not in names):
            continue
        if opt.recorded_with is not None and not getattr(settings, opt.recorded_with):
            continue
        value = getattr(settings, name)
        if opt.before is not UNSET and value == opt.before:
            continue
        out[name] = value
    return out


def before_values(cls) -> dict:
    """The ``before`` value of every field that has one: the sampler of the paper's
    experiments.

    Parameters
    ----------
    cls : type
        A settings class.

    Returns
    -------
    dict
    """
    return {n: o.before for n, o in options_of(cls).items() if o.before is not UNSET}

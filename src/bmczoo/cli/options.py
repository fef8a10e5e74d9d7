"""``bmczoo fit``'s options of the methods' settings, read from the settings fields
(:mod:`bmczoo.inference.options`): the flags, and an argument spelled as the command line
spells it (for error lines)."""

from __future__ import annotations

import functools


@functools.cache
def settings_flags() -> dict:
    """The settings' command-line options (:class:`bmczoo.inference.options.Flag`) by
    ``bmc.fit``'s argument name."""
    from ..inference.options import flags
    from ..inference.settings import SETTINGS

    return flags(SETTINGS)


def given_settings(args) -> dict:
    """``bmc.fit``'s method arguments given on the command line ``args`` (those left out
    keep the method's defaults), with the values the command line spells otherwise
    (``--store-factors yes``) translated."""
    given = {}
    for name, flag in settings_flags().items():
        value = getattr(args, flag.dest)
        if value is not None:
            given[name] = value if flag.words is None else flag.words[value]
    return given


def option_flag(name: str) -> str:
    """The command-line option of ``bmc.fit``'s argument ``name`` (``num_chains`` ->
    ``--chains``); an argument the command line does not set keeps its own name."""
    if name == "method":
        return "--method"
    flag = settings_flags().get(name)
    return name if flag is None else flag.flag


def option_setting(name: str, value) -> str:
    """``bmc.fit``'s argument ``name`` set to ``value``, as it is written on the command
    line (``--num-samples 5``, ``--no-column-moves``, ``--store-factors yes``)."""
    flag = settings_flags().get(name)
    return f"{option_flag(name)} {value}" if flag is None else flag.spell(value)

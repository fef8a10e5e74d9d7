"""Errors of the inference settings that carry the parameter they are about.

A bad method setting of ``bmc.fit`` (or of a settings object such as
:class:`~bmczoo.inference.Gibbs`) raises a :class:`SettingsError`: its ``param`` is
``bmc.fit``'s name of the argument, ``value`` the value given and ``reason`` what is
wrong with it, so that a caller (the command line) can name the argument its own way
without reading the message.  Each concrete class is also the built-in exception that
code catching ``TypeError`` / ``ValueError`` expects: a value of the wrong type is a
:class:`SettingsTypeError` (a ``TypeError``), a value of the right type that is not
allowed a :class:`SettingsValueError` (a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "SettingsError",
    "SettingsValueError",
    "SettingsTypeError",
    "WrongMethodError",
    "UnknownArgumentError",
]


def _python_name(param: str) -> str:
    return param


def _python_setting(param: str, value: Any) -> str:
    return f"{param}={value!r}"


def _restore(cls, message: str, state: dict) -> "SettingsError":
    """Rebuild a pickled :class:`SettingsError` (errors cross process boundaries in the
    experiment runner's worker pools)."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class SettingsError(Exception):
    """An invalid method setting, naming the argument of ``bmc.fit`` it is about.

    Catch this class for every settings error; the raised object is always one of its
    subclasses, which are also a ``ValueError`` or a ``TypeError``.

    Parameters
    ----------
    param : str
        ``bmc.fit``'s name of the argument (VB's ``restarts`` is ``num_chains``).
    value : object
        The value given (None where the error is about the argument, not a value).
    reason : str
        What is wrong.  Without ``others`` it follows the argument's name (``"must be a
        positive integer"``) and the full message is ``"<param> <reason>, got <value>"``;
        with ``others`` it is the whole sentence, a ``str.format`` template in which
        ``{name}`` stands for the argument ``name`` with its value (``num_samples=5``) and
        ``{names[name]}`` for its name alone.
    method : str, optional
        The method whose settings were being built, where known.
    others : mapping, optional
        The other arguments the error is about, with their values (``{"num_samples":
        5}``); an empty mapping turns ``reason`` into a template of ``param`` alone.
    message : str, optional
        The message, where it is worded otherwise than :meth:`describe` would.

    Attributes
    ----------
    param, value, reason, method
        As given.
    others : dict or None
        As given.
    """

    def __init__(
        self,
        param: str,
        value: Any,
        reason: str,
        *,
        method: str | None = None,
        others: Mapping[str, Any] | None = None,
        message: str | None = None,
    ):
        self.param = param
        self.value = value
        self.reason = reason
        self.method = method
        self.others = None if others is None else dict(others)
        super().__init__(self.describe() if message is None else message)

    def describe(
        self,
        name: Callable[[str], str] = _python_name,
        setting: Callable[[str, Any], str] = _python_setting,
    ) -> str:
        """The error in one sentence, with the arguments spelled by the caller.

        Parameters
        ----------
        name : callable
            ``name(param)``: an argument's name (by default ``bmc.fit``'s,
            ``num_samples``; the command line passes its option's, ``--num-samples``).
        setting : callable
            ``setting(param, value)``: an argument with its value (by default
            ``num_samples=5``; the command line's ``--num-samples 5``).

        Returns
        -------
        str
        """
        if self.others is None:
            return f"{name(self.param)} {self.reason}, got {self.value!r}"
        values = {self.param: self.value, **self.others}
        fields = {k: setting(k, v) for k, v in values.items()}
        return self.reason.format_map({**fields, "names": {k: name(k) for k in values}})

    def __reduce__(self):
        return _restore, (type(self), str(self), dict(self.__dict__))


class SettingsValueError(SettingsError, ValueError):
    """A setting of the right type whose value is not allowed (out of range, not one of
    the choices, at odds with another setting or with the prior).

    Parameters
    ----------
    param, value, reason, method, others, message
        As for :class:`SettingsError`.
    """


class SettingsTypeError(SettingsError, TypeError):
    """A setting of the wrong type (a bool where an integer is expected, a string where a
    number is).

    Parameters
    ----------
    param, value, reason, method, others, message
        As for :class:`SettingsError`.
    """


class WrongMethodError(SettingsValueError):
    """An argument that another method takes, given to ``method``.

    Parameters
    ----------
    param : str
        The argument.
    value : object
        Its value.
    method : str
        The method it was given to.
    methods : tuple of str
        The methods that take it.
    accepted : tuple of str
        The arguments that ``method`` takes.

    Attributes
    ----------
    methods : tuple of str
        The methods that take ``param``.
    accepted : tuple of str
        The arguments that ``method`` takes.
    """

    def __init__(
        self,
        param: str,
        value: Any,
        *,
        method: str,
        methods: tuple[str, ...],
        accepted: tuple[str, ...],
    ):
        self.methods = tuple(methods)
        self.accepted = tuple(accepted)
        where = " or ".join(repr(m) for m in self.methods)
        super().__init__(
            param,
            value,
            f"applies to method={where}, not to method={method!r}",
            method=method,
            message=f"{param}= applies to method={where}, not to method={method!r} "
            f"(whose arguments are {', '.join(self.accepted)})",
        )

    def describe(
        self,
        name: Callable[[str], str] = _python_name,
        setting: Callable[[str, Any], str] = _python_setting,
    ) -> str:
        """The error in one sentence (see :meth:`SettingsError.describe`).

        Parameters
        ----------
        name, setting : callable
            How an argument, and an argument with its value, are spelled.

        Returns
        -------
        str
        """

        def methods(ms):
            return " or ".join(setting("method", m) for m in ms)

        return (
            f"{name(self.param)} applies to {methods(self.methods)}, "
            f"not to {setting('method', self.method)}"
        )


class UnknownArgumentError(SettingsTypeError):
    """A keyword argument that no method (nor ``bmc.fit`` itself) takes.

    Parameters
    ----------
    param : str
        The argument.
    where : str
        The function it was given to, as the message names it (``"fit()"``).
    suggestion : str, optional
        The valid argument closest to ``param``, if one is close.

    Attributes
    ----------
    suggestion : str or None
        The valid argument closest to ``param``, if one is close.
    """

    def __init__(self, param: str, *, where: str = "fit()", suggestion: str | None = None):
        self.suggestion = suggestion
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(
            param,
            None,
            f"is not an argument of {where}",
            message=f"{where} got an unexpected keyword argument {param!r}{hint}",
        )

    def describe(
        self,
        name: Callable[[str], str] = _python_name,
        setting: Callable[[str, Any], str] = _python_setting,
    ) -> str:
        """The error in one sentence (see :meth:`SettingsError.describe`).

        Parameters
        ----------
        name, setting : callable
            How an argument, and an argument with its value, are spelled.

        Returns
        -------
        str
        """
        hint = f"; did you mean {name(self.suggestion)}?" if self.suggestion else ""
        return f"{name(self.param)} {self.reason}{hint}"


def checked(
    check: Callable[..., Any],
    param: str,
    value,
    reason: str,
    *args,
    label: str | None = None,
    type_reason: str | None = None,
    **kwargs,
) -> Any:
    """``check(label or param, value, *args, **kwargs)``, a validator of
    :mod:`bmczoo._checks` (its verdict and its message are kept), with its error raised
    as a :class:`SettingsError` about ``param`` for ``reason`` (``type_reason`` for a
    value of the wrong type, where the validator words that otherwise)."""
    try:
        return check(label or param, value, *args, **kwargs)
    except TypeError as e:
        why = reason if type_reason is None else type_reason
        raise SettingsTypeError(param, value, why, message=str(e)) from None
    except ValueError as e:
        raise SettingsValueError(param, value, reason, message=str(e)) from None


def literal(text: str) -> str:
    """``text`` inside a :meth:`SettingsError.describe` template (its braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")

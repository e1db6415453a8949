"""Registry of observation encoders: the model part users plug in, by name.

Responsible for: mapping encoder names to factories (the built-in ones are registered here
too, by ``encoders.py``), resolving the ``encoder`` setting (a registered name, or
``module:name``, which imports ``module`` first so that it registers ``name``), building and
checking the module a factory returns, and making a name registered in the user's process
known in the worker processes that build the same model.

Must not: build anything but encoders, read config objects beyond the ``encoder`` value that
travels with them, or import user modules other than the one a ``module:name`` value names.

How worker processes see registrations (they are spawned: they start from a fresh
interpreter and do not run the code that registered a name in the parent):

* ``module:name`` imports ``module`` in every process that builds the model (learner,
  inference and evaluation workers, and later ``sampleforge enjoy``, ``eval``, ``export`` or
  ``APPO.load``), so a module that registers ``name`` when it is imported works everywhere.
  This is the form for the command line.
* A plain name registered in this process travels with the ``Config``: while this module is
  imported, a pickled ``Config`` whose ``encoder`` is a name registered by the user carries
  that registration (its factory is pickled by reference, as env functions are), and
  unpickling the config registers it in the receiving process before anything reads it. So
  a name registered anywhere in a script (inside ``if __name__ == "__main__":`` too) trains
  with processes, provided its factory is a function or class defined at the top level of a
  module or of the script; ``check_encoder_sendable`` says so before processes start.
"""

from __future__ import annotations

import copyreg
import difflib
import importlib
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from sampleforge.config import Config, ConfigError
from sampleforge.spaces import TensorSpec


@dataclass(frozen=True)
class EncoderSettings:
    """The config values an encoder factory receives besides the observation specs.

    More fields may be added; factories should read the ones they use by name.
    """

    mlp_hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "elu"


# factory(obs_specs: {key: TensorSpec}, settings: EncoderSettings) -> nn.Module with `out_size`,
# whose forward takes the observation dict {key: [B, *spec.shape]} and returns [B, out_size].
EncoderFactory = Callable[[Mapping[str, TensorSpec], EncoderSettings], nn.Module]


class UnknownEncoderError(ConfigError):
    """The ``encoder`` value is neither a registered name nor a ``module:name`` that registers
    one (also when that module cannot be imported). A ConfigError with one problem, so its
    message is one line."""


@dataclass(frozen=True)
class _Entry:
    factory: EncoderFactory
    builtin: bool
    description: str


_ENCODERS: dict[str, _Entry] = {}
# A dotted Python module path: the part before ':' of a "module:name" value.
_MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_BUILTIN_MODULE = "sampleforge.models.encoders"


def register_encoder(
    name: str, factory: EncoderFactory, *, description: str = "", overwrite: bool = False
) -> None:
    """Make ``factory`` the encoder ``name`` (the value of ``--encoder`` / ``encoder=``).

    ``factory(obs_specs, settings)`` gets the observation specs (``{key: TensorSpec}``; a Box
    observation is the single key ``"obs"``) and an ``EncoderSettings``, and returns an
    ``nn.Module`` with an int ``out_size`` whose forward maps the observation dict
    ``{key: [B, *shape]}`` to features ``[B, out_size]``. Registering the same factory again
    is a no-op; another factory under a taken name needs ``overwrite=True``. Built-in names
    cannot be replaced.
    """
    _register(name, factory, description=description, overwrite=overwrite, builtin=False)


def _register(
    name: str, factory: EncoderFactory, *, description: str, overwrite: bool, builtin: bool
) -> None:
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        raise ValueError(
            f"encoder name must be a non-empty string without ':' or surrounding "
            f"spaces, got {name!r}"
        )
    if not callable(factory):
        raise TypeError(
            f"encoder factory for {name!r} must be callable, got {type(factory).__name__}"
        )
    if not builtin:
        _load_builtins()
    old = _ENCODERS.get(name)
    if old is not None and not builtin:
        if old.builtin:
            raise ValueError(f"encoder {name!r} is built in; register yours under another name")
        if old.factory != factory and not overwrite:
            raise ValueError(
                f"encoder {name!r} is already registered (to {_describe(old)}); "
                "pass overwrite=True to replace it"
            )
    _ENCODERS[name] = _Entry(factory, builtin, description)


def registered_encoders() -> list[str]:
    """Every encoder name registered in this process (built-in ones included), sorted."""
    _load_builtins()
    return sorted(_ENCODERS)


def encoder_factory(name: str) -> EncoderFactory:
    """The factory of the ``encoder`` value ``name``: a registered name, or ``module:name``
    (imports ``module``, which must register ``name``). Raises UnknownEncoderError."""
    _load_builtins()
    if not isinstance(name, str):
        raise UnknownEncoderError([f"encoder: expected a name, got {name!r}"])
    entry = _ENCODERS.get(name)
    if entry is not None:
        return entry.factory
    module, colon, short = name.partition(":")
    if colon and short and _MODULE_PATH.fullmatch(module):
        _import_encoder_module(module, name)
        entry = _ENCODERS.get(short)
        if entry is not None:
            return entry.factory
        raise UnknownEncoderError(
            [
                _unknown_message(
                    short, f"encoder: {name!r}: importing {module!r} did not register {short!r}"
                )
            ]
        )
    raise UnknownEncoderError(
        [_unknown_message(name, f"encoder: {name!r} is not a registered encoder")]
    )


def build_encoder(
    name: str, obs_specs: Mapping[str, TensorSpec], settings: EncoderSettings = EncoderSettings()
) -> nn.Module:
    """Build the encoder ``name`` for these observation specs and check what it returns."""
    factory = encoder_factory(name)
    if not obs_specs:
        raise ValueError("an encoder needs at least one observation key")
    module = factory(dict(obs_specs), settings)
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"encoder {name!r} returned {type(module).__name__}, expected a torch.nn.Module"
        )
    out_size = getattr(module, "out_size", None)
    if isinstance(out_size, bool) or not isinstance(out_size, int) or out_size < 1:
        raise TypeError(
            f"encoder {name!r} returned {type(module).__name__} without an int "
            f"out_size >= 1 (got {out_size!r}): set self.out_size to the size of "
            "its output features"
        )
    return module


def check_encoder_sendable(name: str) -> str | None:
    """Why the encoder ``name`` cannot be built in worker processes, or None.

    Only a plain name registered in this process travels to workers (see the module
    docstring), and only when its factory pickles by reference.
    """
    entry = _user_entry(name)
    if entry is None or _pickles(entry.factory):
        return None
    return (
        f"encoder: {name!r} cannot be sent to worker processes: its factory "
        f"{_describe(entry)} does not pickle; register a function or class defined at the "
        "top level of a module, or pass serial_mode=True"
    )


def _user_entry(name: Any) -> _Entry | None:
    entry = _ENCODERS.get(name) if isinstance(name, str) else None
    return None if entry is None or entry.builtin else entry


def _describe(entry: _Entry) -> str:
    factory = entry.factory
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"{module}.{qualname}" if module else qualname


def _pickles(factory: EncoderFactory) -> bool:
    try:
        pickle.dumps(factory)
    except Exception:  # noqa: BLE001 - PicklingError, AttributeError, TypeError, ...
        return False
    return True


def _import_encoder_module(module: str, name: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as err:  # any failure of the user's module, not only ImportError
        detail = " ".join(f"{type(err).__name__}: {err}".split())  # one line
        raise UnknownEncoderError(
            [f"encoder: {name!r}: cannot import module {module!r} ({detail})"]
        ) from err


def _unknown_message(name: str, problem: str) -> str:
    known = sorted(_ENCODERS)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{problem}{hint}; allowed: {', '.join(known)}, or module:name (imports module, "
        "which registers name)"
    )


def _load_builtins() -> None:
    # encoders.py registers the built-in encoders when it is imported; it imports this module,
    # so it is imported here (a dict look-up once it is loaded) rather than at the top.
    importlib.import_module(_BUILTIN_MODULE)


# --- carrying user registrations to worker processes with the config --------------------------


def _reduce_config(cfg: Config) -> tuple:
    """Pickle a Config as usual, plus its encoder's registration when the user made it."""
    reduced = object.__reduce_ex__(cfg, 2)
    assert isinstance(reduced, tuple)  # a dataclass instance reduces to a tuple
    func, args, state, *_ = reduced
    entry = _user_entry(getattr(cfg, "encoder", None))
    if entry is None or not _pickles(entry.factory):
        return func, args, state
    carried = (cfg.encoder, entry.factory, entry.description)
    return _with_registration, (carried, func, args), state


def _with_registration(
    carried: tuple[str, EncoderFactory, str], func: Callable[..., Any], args: tuple
) -> Any:
    """Unpickling side of ``_reduce_config``: register, then create the Config as usual.

    The sender's registration wins over one this process made under the same name: the
    sender's config is the one the model must match.
    """
    name, factory, description = carried
    _load_builtins()
    if not (name in _ENCODERS and _ENCODERS[name].builtin):
        _ENCODERS[name] = _Entry(factory, False, description)
    return func(*args)


copyreg.pickle(Config, _reduce_config)


__all__ = [
    "EncoderFactory",
    "EncoderSettings",
    "UnknownEncoderError",
    "build_encoder",
    "check_encoder_sendable",
    "encoder_factory",
    "register_encoder",
    "registered_encoders",
]

"""The `env` argument of the Python API: a name, or a function that builds an environment.

Responsibility: turn what a user passes as `env` into the config's `env` name. A string must
be a registered sampleforge name or a Gymnasium id. A callable is registered under a name
derived from where it is defined (``module.qualified_name``), so the same function always gets
the same name and a saved model can find it again. Worker processes receive the resolved
`EnvSpec`, which pickles the function by reference: a function defined at the top level of a
module works, a lambda or a nested function does not, and this module says so at once.

Must not: build environments for training or start processes.
"""

from __future__ import annotations

import inspect
import pickle
import re
from collections.abc import Callable
from typing import Any, Union

import gymnasium as gym

from sampleforge.envs.registry import EnvContext, register_env, resolve_env

EnvArgument = Union[str, Callable[..., gym.Env]]


class CallableEnvFactory:
    """Adapts a user's function to a registry factory: `fn(context)` or `fn()` -> gym.Env.

    A function that takes one argument gets the `EnvContext` (worker and env index, seed,
    render mode: `sampleforge enjoy --save_video` needs `render_mode` passed on); one that takes
    none is simply called.
    """

    def __init__(self, fn: Callable[..., gym.Env]) -> None:
        self.fn = fn
        self.takes_context = _takes_one_argument(fn)

    def __call__(self, context: EnvContext) -> gym.Env:
        return self.fn(context) if self.takes_context else self.fn()


def env_name(env: Any) -> str:
    """The config `env` name for `env` (a callable is registered under a derived name)."""
    if isinstance(env, str):
        resolve_env(env)  # raises UnknownEnvError with suggestions
        return env
    if isinstance(env, gym.Env):
        raise TypeError(
            f"env: got an environment instance ({type(env).__name__}); pass its "
            "Gymnasium id or a function that builds it (each worker builds its own)"
        )
    if callable(env):
        name = callable_env_name(env)
        register_env(name, CallableEnvFactory(env), overwrite=True, description=f"built by {name}")
        return name
    raise TypeError(
        f"env: {env!r} is not a Gymnasium id, a registered sampleforge env name or "
        "a function that builds an env"
    )


def callable_env_name(fn: Callable[..., Any]) -> str:
    """``module.qualified_name`` of `fn`, in characters safe for a folder name."""
    module = getattr(fn, "__module__", None) or "user"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{module}.{qualname}")


def check_sendable(env: Any) -> None:
    """Raise ValueError if a callable `env` cannot be sent to worker processes."""
    if isinstance(env, str) or not callable(env):
        return
    try:
        pickle.dumps(CallableEnvFactory(env))
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise ValueError(
            f"env: {callable_env_name(env)} cannot be sent to worker processes "
            f"({str(err).splitlines()[0]}); define it as a top-level function in a module "
            "(def make_env(context): ...), or pass serial_mode=True"
        ) from None


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature: assume the context
        return True
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    required = [p for p in positional if p.default is p.empty and p.kind != p.VAR_POSITIONAL]
    if len(required) > 1:
        raise TypeError(
            f"env: {callable_env_name(fn)} must take no argument or one (an "
            f"EnvContext), not {len(required)}"
        )
    return bool(positional)

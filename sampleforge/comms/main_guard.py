"""Is the running script's training under `if __name__ == "__main__":`?

Responsible for: `raise_unless_main_guarded`, one clear line before anything is made when a
script would start training again in every worker process. Multiprocessing's spawn and fork
server start each process by importing the script that launched them (so that what it
defines, an env factory for one, can be found there), which runs its top-level statements
again. A script that trains at its top level would so train again in every worker: each child
failed at its start with multiprocessing's long bootstrapping message, the run with "learner
died", and every replacement worker repeated it.

Must not: import anything of sampleforge (it is read by the API and the process host alike).
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
import tokenize
from types import FrameType


class MainModuleNotGuarded(RuntimeError):
    """Training is started by a script's top level, which worker processes run again."""


def raise_unless_main_guarded(what: str) -> None:
    """Raise MainModuleNotGuarded if `what` (such as "DQN(...)") is being done by the top
    level of the script that started Python, outside its `if __name__ == "__main__":` block,
    or while a worker process is importing that script. Anything it cannot tell (an
    interactive session, a call from a thread, a script it cannot read) passes."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise MainModuleNotGuarded(
            f"{what} was called while a worker process imported the script that started the "
            'run: put the training under if __name__ == "__main__": in that script'
        )
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    frame = None if path is None else _top_level_frame(path)
    if path is None or frame is None:
        return
    line = frame.f_lineno
    guarded = _guarded_lines(path)
    if guarded is None or any(first <= line <= last for first, last in guarded):
        return
    raise MainModuleNotGuarded(
        f"{path}:{line}: {what} is called at the script's top level, which every worker "
        "process runs again when it imports the script (multiprocessing's spawn and fork "
        'server do): put it under if __name__ == "__main__": (or pass serial_mode=True)'
    )


def _top_level_frame(path: str) -> FrameType | None:
    """The frame running the top level of the script at `path`, if it is on this stack."""
    frame = sys._getframe(1)
    while frame is not None:
        g = frame.f_globals
        if (
            frame.f_code.co_name == "<module>"
            and g.get("__name__") == "__main__"
            and g.get("__file__") == path
        ):
            return frame
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _guarded_lines(path: str) -> list[tuple[int, int]] | None:
    """The line ranges of the script that run only in the process that started it (the
    bodies of `if __name__ == "__main__":` and the else branches of `!=`); None if the
    script cannot be read."""
    try:
        with tokenize.open(path) as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    ranges = []
    for node in _outside_definitions(tree):
        if not isinstance(node, ast.If):
            continue
        branch = _main_branch(node)
        if branch:
            first, last = branch[0], branch[-1]
            ranges.append((first.lineno, last.end_lineno or last.lineno))
    return ranges


def _outside_definitions(tree: ast.AST):
    """Every node that a module's top level runs itself (not inside a def, lambda or class)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield child
        yield from _outside_definitions(child)


def _main_branch(node: ast.If) -> list[ast.stmt]:
    """The statements of `node` that run only when __name__ is "__main__"."""
    test = node.test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        # `if __name__ == "__main__" and ...:` runs its body only in the main process too.
        is_main = any(_is_main_test(v, ast.Eq) for v in test.values)
        return node.body if is_main else []
    if _is_main_test(test, ast.Eq):
        return node.body
    if _is_main_test(test, ast.NotEq):
        return node.orelse
    return []


def _is_main_test(test: ast.expr, op: type[ast.cmpop]) -> bool:
    """Whether `test` is `__name__ <op> "__main__"` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    names = {_name_or_text(test.left), _name_or_text(test.comparators[0])}
    return names == {"__name__", "'__main__'"} and isinstance(test.ops[0], op)


def _name_or_text(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value)
    return ""

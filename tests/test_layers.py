"""The package's folders are layers: a module imports only from its own folder or from folders
listed before it in LAYERS (lower layers). Imports inside functions count too: a lazy import is
still a dependency. Keeps docs/architecture.md's picture true."""

import ast
from pathlib import Path

import sampleforge

PACKAGE = Path(sampleforge.__file__).parent

# Lowest first. One line per layer; folders on one line do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("spaces", "comms", "algo"),  # data types, messages and queues, the pure RL math
    ("buffers",),  # shared-memory tensors and the protocols that own them
    ("envs",),  # environments, and stepping them into the buffers
    ("config",),  # the typed settings (families know the envs)
    ("models", "telemetry"),  # networks; metrics, console and summaries
    ("checkpoint",),  # the experiment folder and every file in it
    ("pbt", "evaluation", "export"),  # population decisions; playing episodes; ONNX
    ("components",),  # the processes and the runner that wires them
    ("bench", "api", "testing"),  # what users call: benchmarks, the Python API, test envs
    ("cli",),  # the command line
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}


def _folder(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "sampleforge" or len(parts) < 2:
        return None
    return parts[1].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _violations(package: Path = PACKAGE) -> list[str]:
    bad = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if len(relative.parts) == 1:
            continue  # sampleforge/__init__.py and spaces.py: checked through their imports
        source = relative.parts[0]
        for line, module in _imports(path):
            target = _folder(module)
            if target is None or target == source or target not in RANK:
                continue
            if RANK[target] >= RANK[source]:
                bad.append(f"{relative}:{line} imports {module} ({target} is not below {source})")
    return bad


def test_every_folder_has_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert folders | modules == set(RANK)


def test_no_module_imports_from_its_own_layer_or_above():
    assert _violations() == []


def test_spaces_imports_nothing_of_the_package():
    assert [m for _, m in _imports(PACKAGE / "spaces.py") if _folder(m)] == []


def test_the_check_sees_a_violation(tmp_path):
    """The checker itself: a lower layer importing a higher one is reported."""
    fake = tmp_path / "sampleforge"
    (fake / "config").mkdir(parents=True)
    (fake / "config" / "bad.py").write_text("def f():\n    from sampleforge.components import x\n")
    assert _violations(fake) == [
        "config/bad.py:2 imports sampleforge.components (components is not below config)"
    ]

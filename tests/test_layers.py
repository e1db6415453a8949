"""The package's folders are layers: a module imports only from its own folder or from folders
listed before it in LAYERS (lower layers). Imports inside functions count too: a lazy import is
still a dependency. Keeps docs/architecture.md's picture true."""

import ast
from pathlib import Path

import pytest

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
    ("pbt", "evaluation", "export", "distributed"),  # PBT; episodes; ONNX; data-parallel ranks
    ("learners",),  # each algorithm family's learner, stager and gate; their registry
    ("components",),  # the processes and the runner that wires them
    ("bench", "api", "testing"),  # what users call: benchmarks, the Python API, test envs
    ("tune",),  # searches and populations on Ray Tune: trials that drive the API
    ("cli", "__main__"),  # the command line (`python -m sampleforge` too)
]
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}


# What `from sampleforge import NAME` reaches for each lazily exported name (sampleforge/__init__).
PACKAGE_EXPORTS = {name: "api" for name in sampleforge._API_NAMES}

# The processes of a run, in components/: they talk only through messages and shared buffers
# that the wiring hands them, never by importing each other (docs/architecture.md).
WORKERS = {"rollout_worker", "inference_worker", "learner_worker", "eval_worker"}


def _folder(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "sampleforge" or len(parts) < 2:
        return None
    return parts[1].removesuffix(".py")


def _absolute(node: ast.ImportFrom, relative: Path) -> str:
    """The absolute module of a `from ... import`, relative ones resolved against the file."""
    if node.level == 0:
        return node.module or ""
    package = ["sampleforge", *relative.parts[:-1]]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path, relative: Path | None = None) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file; `from sampleforge import x` and
    relative imports count as imports of what they name."""
    relative = relative if relative is not None else Path(path.name)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node, relative)
            if module.count(".") <= 1:  # `from sampleforge[.pkg] import name`: name may be a module
                found.extend(
                    (node.lineno, f"{module}.{PACKAGE_EXPORTS.get(alias.name, alias.name)}")
                    if module == "sampleforge"
                    else (node.lineno, f"{module}.{alias.name}")
                    for alias in node.names
                )
            else:
                found.append((node.lineno, module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _worker(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[:2] == ["sampleforge", "components"] and parts[2] in WORKERS:
        return parts[2]
    return None


def _violations(package: Path = PACKAGE) -> list[str]:
    bad = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if len(relative.parts) == 1:
            continue  # sampleforge/__init__.py and spaces.py: checked through their imports
        source = relative.parts[0]
        own_worker = _worker("sampleforge." + ".".join(relative.with_suffix("").parts))
        for line, module in _imports(path, relative):
            target = _folder(module)
            if target is None or target not in RANK:
                continue
            other_worker = _worker(module)
            if own_worker and other_worker and other_worker != own_worker:
                bad.append(f"{relative}:{line} imports {module} (workers never import each other)")
            elif target != source and RANK[target] >= RANK[source]:
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


@pytest.mark.parametrize(
    "where, source, expected",
    [
        (
            "config/bad.py",
            "def f():\n    from sampleforge.components import x\n",
            "config/bad.py:2 imports sampleforge.components.x (components is not below config)",
        ),
        (
            "config/bad.py",
            "import sampleforge.components.runner\n",
            "config/bad.py:1 imports sampleforge.components.runner (components is not below config)",
        ),
        (
            "config/bad.py",
            "from sampleforge import components\n",
            "config/bad.py:1 imports sampleforge.components (components is not below config)",
        ),
        (
            "models/bad.py",
            "from sampleforge import APPO\n",
            "models/bad.py:1 imports sampleforge.api (api is not below models)",
        ),
        (
            "config/bad.py",
            "from ..components.runner import Runner\n",
            "config/bad.py:1 imports sampleforge.components.runner (components is not below config)",
        ),
        (
            "config/sub/bad.py",
            "from ...checkpoint import store\n",
            "config/sub/bad.py:1 imports sampleforge.checkpoint.store (checkpoint is not below config)",
        ),
        (
            "components/rollout_worker.py",
            "from sampleforge.components.inference_worker import InferenceWorker\n",
            "components/rollout_worker.py:1 imports sampleforge.components.inference_worker "
            "(workers never import each other)",
        ),
        (
            "components/rollout_worker.py",
            "from . import learner_worker\n",
            "components/rollout_worker.py:1 imports sampleforge.components.learner_worker "
            "(workers never import each other)",
        ),
    ],
    ids=[
        "lazy import",
        "import statement",
        "from the package",
        "a lazily exported name",
        "relative",
        "relative, two levels",
        "worker to worker",
        "worker to worker, relative",
    ],
)
def test_the_check_sees_every_form_of_violation(tmp_path, where, source, expected):
    """The checker itself: each way of importing upward, or one worker from another, is caught."""
    fake = tmp_path / "sampleforge"
    (fake / where).parent.mkdir(parents=True)
    (fake / where).write_text(source)
    assert _violations(fake) == [expected]


def test_the_check_allows_imports_within_a_folder_and_downward(tmp_path):
    fake = tmp_path / "sampleforge"
    (fake / "components").mkdir(parents=True)
    (fake / "components" / "runner.py").write_text(
        "from . import wiring\nfrom sampleforge.components.rollout_worker import R\n"
        "from ..config import Config\nfrom sampleforge import spaces\n"
    )
    assert _violations(fake) == []

"""The package's layers: each imports only from the layers below it, and nothing imports in a loop.

Every import counts, those inside functions included. A failure names the importing file and
line, the module it imports, and both layers; a new top-level module or subpackage fails until it
is given a place in LAYERS.
"""

import ast
from pathlib import Path

import pytest
from conftest import ROOT

import QuantumGravPy as qg

PACKAGE = "QuantumGravPy"
# Bottom first; a module may import from its own layer and the ones below it.
LAYERS = [
    {"errors", "logs", "registry", "figures", "compat"},
    {"physics"},
    {"tasks", "embedded"},
    {"config"},
    {"parallel"},
    # the story a newcomer tells: the config, the data, the model, the training (its step,
    # evaluation and records), the run directory it all lands in
    {"data"},
    {"models"},
    {"runs"},
    {"training"},
    {"tune", "predict"},
    {"cli", "forkserver", "__init__", "__main__"},
]
# A layer of sub-packages has floors of its own, bottom first: a sub-package imports only from
# its floor and those below (the layer's __init__, its public face, from any).
FLOORS = {
    "data": [{"storage"}, {"sources"}, {"batches"}],
    "training": [
        {"tasks"},
        {"evaluation", "monitoring"},
        {"state"},
        {"records"},
        {"loop"},
        {"launching"},
    ],
}
# Only the parallel layer talks to other processes through torch itself (and the adapter of
# torch's FSDP internals, which the parallel layer alone uses).
PARALLEL_ONLY = ("torch.distributed", "torch.multiprocessing")
PARALLEL_ADAPTERS = ("QuantumGravPy.compat.fsdp",)

# The public API before the package was split into layers: every name still works as qg.NAME
# (MetricSums, unused, was removed).
PUBLIC_NAMES = """
    EMA AugmentationConfig AugmentedDataset CausalSet CausalSetDataset CheckpointError
    ClassBalancedSampler Config ConfigError DataError DistributedClassBalancedSampler
    DistributedError DistributedRangeSplitter DistributedSamplerWrapper
    DistributedWeightedRandomSampler EarlyStopping GNNModel PortInUseError
    ProgressiveClassBalancedSampler QGError RankAwareSeedGenerator RankFailedError
    RankTimeoutError RunDirectoryError Tester Trainer TrainerDDP Validator WorkerError
    apply_augmentation cleanup_ddp gen_augmentation_params gen_distributed_augmentation_params
    get_preset initialize_ddp launch load_checkpoint load_config myrheim_meyer_dimension
    ordering_fraction_expectation prepare_run run_distributed spawn split_dataset sprinkle
    stream_distributed_augmentation_chain
""".split()


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, relative ones resolved."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from pkg import sub`` imports the submodule where there is one
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            found += [(node.lineno, t) for t in subs or [target]]
    return found


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    for level, names in enumerate(LAYERS):
        if key in names:
            return level
    return None


def layer_name(level: int) -> str:
    return "/".join(sorted(LAYERS[level]))


def floor_of(module: str) -> tuple[str, int] | None:
    """(layer, floor) of a module inside a layer with floors; None for others and for the
    layer's own __init__ (a module directly in the layer's folder has no floor: refused)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in FLOORS:
        return None
    for level, names in enumerate(FLOORS[parts[1]]):
        if parts[2] in names:
            return parts[1], level
    return parts[1], -1


def floor_name(layer: str, level: int) -> str:
    return f"{layer}/" + "|".join(sorted(FLOORS[layer][level]))


def check(root: Path) -> list[str]:
    """Every violation of the layering in the package under ``root``, one line each."""
    modules = package_modules(root)
    problems = []
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        mine = layer_of(name)
        where = path.relative_to(root)
        if mine is None:
            problems.append(f"{where}: {name} is in no layer; give it a place in LAYERS")
            continue
        if floor_of(name) is not None and floor_of(name)[1] == -1:
            problems.append(f"{where}: {name} is on no floor of its layer; give it one in FLOORS")
        graph[name] = set()
        for line, target in imports_of(name, path, modules):
            if (
                target.startswith(PARALLEL_ONLY)
                and layer_name(mine) != "parallel"
                and name not in PARALLEL_ADAPTERS
            ):
                problems.append(
                    f"{where}:{line}: {name} imports {target}; only the parallel layer may"
                )
            if target != PACKAGE and not target.startswith(PACKAGE + "."):
                continue
            graph[name].add(target)
            here, there = floor_of(name), floor_of(target)
            if here and there and here[0] == there[0] and -1 < here[1] < there[1]:
                problems.append(
                    f"{where}:{line}: {name} imports {target}, which is above it "
                    f"({floor_name(*here)} may import only from "
                    f"{', '.join(floor_name(here[0], i) for i in range(here[1], -1, -1))})"
                )
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                problems.append(
                    f"{where}:{line}: {name} imports {target}, which is above it "
                    f"({layer_name(mine)} may import only from "
                    f"{', '.join(layer_name(i) for i in range(mine, -1, -1))})"
                )
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (depth-first search)."""
    found, done = [], set()
    for start in sorted(graph):
        stack, on_path = [(start, iter(sorted(graph.get(start, ()))))], [start]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                done.add(node)
                stack.pop()
                on_path.pop()
            elif child in on_path:
                cycle = [*on_path[on_path.index(child) :], child]
                if not any(set(cycle) <= set(c) for c in found):
                    found.append(cycle)
            elif child not in done and child in graph:
                stack.append((child, iter(sorted(graph[child]))))
                on_path.append(child)
    return found


def test_every_module_imports_only_from_its_layer_and_below():
    problems = check(ROOT)
    assert not problems, "the layering is broken:\n" + "\n".join(problems)


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "files, expected",
    [
        (  # an upward import inside a function still counts
            {
                "data/batches/loaders.py": "def f():\n    from ...training.trainer import Trainer\n",
                "training/trainer.py": "",
            },
            "QuantumGravPy/data/batches/loaders.py:2: QuantumGravPy.data.batches.loaders imports "
            "QuantumGravPy.training.trainer, which is above it",
        ),
        (
            {
                "config/schema.py": "from QuantumGravPy.data.batches import samplers\n",
                "data/batches/samplers.py": "",
            },
            "QuantumGravPy.config.schema imports QuantumGravPy.data.batches.samplers, which is "
            "above it",
        ),
        (
            {"training/a.py": "from . import b\n", "training/b.py": "from .a import x\n"},
            "import cycle: QuantumGravPy.training.a -> QuantumGravPy.training.b -> "
            "QuantumGravPy.training.a",
        ),
        ({"serve/app.py": ""}, "QuantumGravPy.serve.app is in no layer"),
        (  # inside the training layer: the loop may not be imported by what it holds
            {
                "training/records/records.py": "from ..loop.trainer import Trainer\n",
                "training/loop/trainer.py": "",
            },
            "QuantumGravPy.training.records.records imports QuantumGravPy.training.loop.trainer, "
            "which is above it (training/records may import only from training/records, "
            "training/state, training/evaluation|monitoring, training/tasks)",
        ),
        ({"training/extra.py": ""}, "QuantumGravPy.training.extra is on no floor of its layer"),
        (  # inside the data layer: storage keeps what sources read, never the other way round
            {
                "data/storage/cache.py": "from ..sources.files import FileSource\n",
                "data/sources/files.py": "",
            },
            "QuantumGravPy.data.storage.cache imports QuantumGravPy.data.sources.files, which is "
            "above it (data/storage may import only from data/storage)",
        ),
        ({"data/loaders.py": ""}, "QuantumGravPy.data.loaders is on no floor of its layer"),
        (
            {"training/trainer.py": "import torch.distributed as dist\n"},
            "QuantumGravPy.training.trainer imports torch.distributed; only the parallel layer",
        ),
    ],
)
def test_the_check_names_the_modules_of_a_broken_rule(tmp_path, files, expected):
    problems = check(write_package(tmp_path, files))
    assert any(expected in p for p in problems), problems


def test_the_check_allows_imports_downwards_and_within_a_layer(tmp_path):
    files = {
        "__init__.py": "from .training import Trainer\n",
        "training/__init__.py": "from .loop.trainer import Trainer\n",
        "training/loop/trainer.py": (
            "from ...data.batches import loaders\nfrom ..state.ema import EMA\nfrom .step import x\n"
            "import torch\n"
        ),
        "training/loop/step.py": "",
        "training/state/ema.py": "",
        "data/__init__.py": "from .batches.loaders import make_loader\n",
        "data/batches/loaders.py": (
            "from ...errors import DataError\nfrom ...parallel import spawn\n"
            "from ..sources.datasets import dataset_from_config\nfrom ..storage.disk import D\n"
        ),
        "data/sources/datasets.py": "from ..storage.cache import GraphSource\n",
        "data/storage/cache.py": "",
        "data/storage/disk.py": "from .cache import GraphSource\n",
        "parallel/spawn.py": "import torch.multiprocessing as mp\n",
        "errors.py": "",
    }
    assert check(write_package(tmp_path, files)) == []


def test_the_public_names_of_the_flat_layout_still_work():
    missing = [name for name in PUBLIC_NAMES if not hasattr(qg, name)]
    assert not missing
    # those no longer documented are resolved for earlier code, not listed in __all__
    assert set(PUBLIC_NAMES) <= set(qg.__all__) | set(qg._EARLIER)


# A module over this many lines owns more than one thing: split it along a seam.
MAX_LINES = 400


def too_long(root: Path) -> list[str]:
    """``path: N lines (limit L)`` for every module of the package under ``root`` over its limit."""
    found = []
    for path in package_modules(root).values():
        if (n := len(path.read_text().splitlines())) > MAX_LINES:
            found.append(f"{path.relative_to(root)}: {n} lines (limit {MAX_LINES})")
    return found


def test_no_module_is_over_400_lines():
    long = too_long(ROOT)
    assert not long, "split these modules, each owns more than one thing:\n" + "\n".join(long)


def test_the_line_check_names_a_long_module_and_its_count(tmp_path):
    root = write_package(
        tmp_path,
        {
            "data/batches/loaders.py": "x = 1\n" * 401,
            "data/sources/files.py": "x = 1\n" * 400,
            "training/loop/trainer.py": "x = 1\n" * 450,
        },
    )
    assert too_long(root) == [
        "QuantumGravPy/data/batches/loaders.py: 401 lines (limit 400)",
        "QuantumGravPy/training/loop/trainer.py: 450 lines (limit 400)",
    ]


def test_the_library_and_its_tests_import_nothing_from_the_studies():
    """The physics studies (studies/) stand on the library, never the other way round: no module
    of the package, no test, example or benchmark names them in an import or a path."""
    found = []
    for folder in ("QuantumGravPy", "tests", "examples", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(__file__):
                continue  # this test names the folder it looks for
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if "studies" in code and (
                    "import" in code or "sys.path" in code or '"studies"' in code
                ):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "the product reaches into studies/:\n" + "\n".join(found)


def test_no_module_packs_its_code_past_the_formatter():
    """``# fmt: skip`` would let a module pack calls onto fewer lines to stay under the limit."""
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / PACKAGE).rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not found, "let ruff format lay these out:\n" + "\n".join(found)


# --- the config reaches each part as its own typed section ----------------------------------------

# Parameters by these names hold a config or one of its sections (also any name ending in _cfg):
# each is annotated with its class, never Any, so that a reader sees which part a function reads.
CONFIG_PARAMS = {"config", "cfg", "section", "es", "data_cfg"}
# Functions that take the whole Config ("module:function", module without the package's name;
# "module:*" for every function of a module or package), each with why it needs all of it.
# Every other part takes its own section and the few values it needs.
WHOLE_CONFIG = {
    "config:*": "the configuration layer: loads, validates and writes the Config",
    "cli:*": "the command line: loads the Config a command runs",
    "training.launching:*": "the entry points (launch, fit, prepare_run): build a run's parts",
    "tune:*": "tuning: makes each trial's Config from the base one and launches it",
    "training.loop.trainer:Trainer.__init__": "qg.Trainer(config): builds the run's parts",
    "training.loop.trainer_ddp:TrainerDDP.__init__": "TrainerDDP(rank, config): the same",
    "training.loop.spec:run_tasks": "builds the run's tasks (build_tasks) and checks the graphs",
    "training.loop.spec:check_data": "checks a dataset given later as run_tasks does",
    "training.tasks.task:build_tasks": "tasks:, or the implicit one of model and criterion",
    "training.loop.notices:log_start": "the start's notices weigh sections against each other",
    "training.loop.notices:start_notices": "the same",
    "training.loop.notices:invariance_note": "the strategy's note, or invariance_breaks'",
    "runs.reproducibility:invariance_breaks": "training, model and augmentation settings that "
    "make results depend on the number of processes",
    "parallel.strategies:*": "a strategy refuses settings of other sections (training, model, "
    "augmentation, validation) and builds itself from its own and training's",
    "parallel.spawn:run_distributed": "qg.run_distributed(fn, config): the parallel section and "
    "the training device, for fn's job",
    "runs.resume:*": "resuming: the config digested and compared key by key with the checkpoint's",
    "training.records.run_directory:RunDirectory.__init__": "writes the run's config.yaml",
    "runs.plots:write_run_plots": "qg plots: a run's config (or its config.yaml) names the tasks",
    "predict.inputs:with_available_targets": "returns the config with data.targets cut down",
    "predict.model:model_from_checkpoint": "a run's model: the config compared with the "
    "checkpoint's, its tasks built",
    "predict.model:_spec_from_data": "builds the tasks of a checkpoint without a model spec",
}


def _named(annotation: ast.expr | None) -> set[str]:
    """The names an annotation mentions (a string annotation parsed)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if annotation is None:
        return set()
    return {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)
    }


def _union_members(annotation: ast.expr) -> list[ast.expr]:
    """``A | B | None`` (or ``Optional[A]``, ``Union[A, B]``) as [A, B, None]; anything else as
    itself."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _union_members(annotation.left) + _union_members(annotation.right)
    if isinstance(annotation, ast.Subscript) and _named(annotation.value) & {"Optional", "Union"}:
        inner = annotation.slice
        return [m for e in getattr(inner, "elts", [inner]) for m in _union_members(e)]
    return [annotation]


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.FunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((prefix + node.name, node))
            found += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, f"{prefix}{node.name}.")
        else:
            found += _functions(node, prefix)
    return found


def _allowed(module: str, function: str, allowed: dict[str, str]) -> bool:
    for key in allowed:
        where, _, name = key.partition(":")
        inside = module == where or module.startswith(where + ".")
        if inside and (name == "*" or name == function):
            return True
    return False


ANY = ("Any", "typing.Any")


def config_params(root: Path, allowed: dict[str, str]) -> list[str]:
    """``file:line:function:param: why`` for every config parameter typed Any or not at all, and
    for every parameter typed Config in a function that ``allowed`` does not name; and
    ``file:line: NAME = Any`` for a config class's name made an alias of Any (``Config = Any``
    would hide Any from the check)."""
    problems = []
    for name, path in package_modules(root).items():
        module = name.removeprefix(PACKAGE + ".")
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if not isinstance(node, ast.Assign) or ast.unparse(node.value) not in ANY:
                continue
            for target in map(ast.unparse, node.targets):
                if target.endswith(("Config", "Section")):
                    problems.append(f"{where}:{node.lineno}: {target} = Any; import the class")
        for function, node in _functions(tree):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                here = f"{where}:{arg.lineno}:{function}:{arg.arg}"
                if arg.arg in CONFIG_PARAMS or arg.arg.endswith("_cfg"):
                    if arg.annotation is None:
                        problems.append(f"{here}: not annotated; give it the section's class")
                    elif any(_named(m) == {"Any"} for m in _union_members(arg.annotation)):
                        problems.append(f"{here}: annotated Any; give it the section's class")
                if "Config" in _named(arg.annotation) and not _allowed(module, function, allowed):
                    problems.append(
                        f"{here}: takes the whole Config; give it the sections it reads, or say "
                        "in WHOLE_CONFIG why it needs all of them"
                    )
    return problems


def test_every_part_takes_its_own_typed_section():
    problems = config_params(ROOT, WHOLE_CONFIG)
    assert not problems, "config parameters:\n" + "\n".join(problems)


def test_every_function_allowed_the_whole_config_exists():
    """An entry of WHOLE_CONFIG whose function is gone or renamed would allow its successor."""
    modules = package_modules(ROOT)
    missing = []
    for key in WHOLE_CONFIG:
        where, _, function = key.partition(":")
        found = [p for n, p in modules.items() if n == f"{PACKAGE}.{where}"]
        if not found or (
            function != "*"
            and function not in {f for f, _ in _functions(ast.parse(found[0].read_text()))}
        ):
            missing.append(key)
    assert not missing, missing


def test_the_config_check_names_file_line_function_and_parameter(tmp_path):
    root = write_package(
        tmp_path,
        {
            "data/sources/files.py": (
                "from typing import Any\n"
                "def read(data_cfg: Any, n: int) -> None: ...\n"
                "def count(section: 'Any | None') -> None: ...\n"
                "def ok(data_cfg: DataConfig, extra: Any) -> None: ...\n"
                "def size(es: Optional[Any]) -> None: ...\n"
            ),
            "runs/resume.py": (
                "Config = Any\n"
                "class State:\n"
                "    def read(self, config: Config) -> None: ...\n"
                "def digest(config: 'Config') -> str: ...\n"
                "def keys(run_cfg) -> None: ...\n"
            ),
            "config/loading.py": "def load(config: Config) -> None: ...\n",
        },
    )
    problems = config_params(root, {"config:*": "builds it", "runs.resume:digest": "digests it"})
    assert problems == [
        "QuantumGravPy/data/sources/files.py:2:read:data_cfg: annotated Any; give it the "
        "section's class",
        "QuantumGravPy/data/sources/files.py:3:count:section: annotated Any; give it the "
        "section's class",
        "QuantumGravPy/data/sources/files.py:5:size:es: annotated Any; give it the section's class",
        "QuantumGravPy/runs/resume.py:1: Config = Any; import the class",
        "QuantumGravPy/runs/resume.py:3:State.read:config: takes the whole Config; give it the "
        "sections it reads, or say in WHOLE_CONFIG why it needs all of them",
        "QuantumGravPy/runs/resume.py:5:keys:run_cfg: not annotated; give it the section's class",
    ]

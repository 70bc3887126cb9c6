"""Each extension point is one file: a task kind, a metric, a parallel strategy, a file format
and a kind of embedded data, each added as one new file in its folder of a copy of the package,
with no other file touched, are trained with from the command line and appear in the
reference tables the docs are made from.

(tests/test_extensions.py adds the same from a user's module, named under ``extensions``.)
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

NEW_FILES = {
    "tasks/yes_or_no.py": '''
"""yes_or_no: a binary task under a name of its own."""

from .binary import Binary


class YesOrNo(Binary):
    """Whether a causal set is of the second dimension asked for, as one logit."""

    name = "yes_or_no"
''',
    "tasks/matthews.py": '''
"""matthews: a metric of binary tasks."""

from torchmetrics.classification import BinaryMatthewsCorrCoef

from .metric import Metric


class Matthews(Metric):
    """Matthews' correlation coefficient of a binary task's rows."""

    kind = "binary"
    name = "matthews"

    def make(self, num_outputs, **own):
        return BinaryMatthewsCorrCoef(**own)
''',
    "parallel/strategies/plain_ddp.py": '''
"""plain_ddp: DDP under a name of its own, with a setting of its own."""

from dataclasses import dataclass

from .ddp import DDPStrategy


@dataclass(frozen=True)
class PlainSettings:
    bucket_cap_mb: float = 25.0  # DDP's gradient buckets, in MB


class PlainDDP(DDPStrategy):
    """DDP with buckets of its own size."""

    name = "plain_ddp"
    Settings = PlainSettings

    @classmethod
    def notices(cls, config, processes):
        return [f"plain_ddp: buckets of {cls.settings(config).bucket_cap_mb} MB"]

    @classmethod
    def from_config(cls, config, device, **kwargs):
        strategy = cls(device)
        strategy.bucket_cap_mb = cls.settings(config).bucket_cap_mb
        return strategy

    def ddp_options(self):
        return {"bucket_cap_mb": self.bucket_cap_mb}
''',
    "data/sources/formats/ours_format.py": '''
"""ours: HDF5 files under a suffix of their own."""

from .hdf5_format import HDF5


class Ours(HDF5):
    """HDF5 files under a suffix of our own."""

    name = "ours"
    suffixes = (".ours",)
    title = "file of ours"
    named = "an .ours file"
''',
    "embedded/sized.py": '''
"""sized: flat sprinklings labelled by their size."""

from ..physics import sprinkle
from .base import DataKind


class Sized(DataKind):
    """Flat sprinklings; y: 1 for more than 24 elements, else 0."""

    name = "sized"

    def classes(self, dimensions):
        return 2

    def draw(self, rng, n, d, seed, labels, h):
        labels["y"] = int(n > 24)
        return sprinkle(n, d, seed)
''',
}

TABLES = """
from QuantumGravPy.data.sources.formats import reference_markdown as formats
from QuantumGravPy.embedded import reference_markdown as kinds_of_data
from QuantumGravPy.parallel.strategies import reference_markdown as strategies
from QuantumGravPy.tasks import reference_markdown as task_kinds
import QuantumGravPy
print(QuantumGravPy.__file__)
print(formats(), kinds_of_data(), strategies(), task_kinds(), sep="\\n")
"""


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """A copy of the package with the five new files, and the environment that imports it."""
    where = tmp_path_factory.mktemp("copy")
    package = where / "QuantumGravPy"
    shutil.copytree(ROOT / "QuantumGravPy", package, ignore=shutil.ignore_patterns("__pycache__"))
    before = sorted(p.relative_to(package) for p in package.rglob("*") if p.is_file())
    for rel, text in NEW_FILES.items():
        assert not (package / rel).exists(), rel
        (package / rel).write_text(text.lstrip())
    after = sorted(p.relative_to(package) for p in package.rglob("*") if p.is_file())
    assert sorted(set(after) - set(before)) == sorted(Path(r) for r in NEW_FILES)
    env = dict(os.environ, PYTHONPATH=str(where), PYTHONDONTWRITEBYTECODE="1")
    return where, env


def qg(env, cwd, *args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "QuantumGravPy", *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.timeout(400)
def test_one_new_file_each_trains_from_the_command_line_and_is_in_the_tables(copied, data_root):
    where, env = copied
    tables = subprocess.run(
        [sys.executable, "-c", TABLES], cwd=where, env=env, capture_output=True, text=True
    )
    assert tables.returncode == 0, tables.stderr
    assert tables.stdout.startswith(str(where / "QuantumGravPy")), "the copy was not imported"
    rows = ("| File of ours | `.ours` |", "| `sized` |", "| `plain_ddp` |", "| `yes_or_no` |")
    for row in rows:
        assert row in tables.stdout, row
    assert "`--format ours`" in tables.stdout
    assert "`bucket_cap_mb` (`25.0`): DDP's gradient buckets, in MB" in tables.stdout
    assert "`matthews`" in tables.stdout  # among the binary kinds' metrics

    # the new format, written by qg generate --format and read by its suffix
    source = where / "source.yaml"
    source.write_text(yaml.safe_dump({"data": {"num_graphs": 40, "dimensions": [2, 3],
                                               "num_points": [16, 32], "root": str(data_root)}}))  # fmt: skip
    generated = qg(env, where, "generate", source, "--format", "ours", "--output", "sets.ours")
    assert generated.returncode == 0, generated.stderr
    config = {
        "data": {"files": ["sets.ours"], "root": str(where / "cache"), "targets": {"y": "y"}},
        "model": {"hidden_channels": 16, "num_layers": 2},
        "tasks": [{"name": "second", "type": "yes_or_no", "target": "y",
                   "metrics": ["accuracy", "matthews"]}],
        "training": {"num_epochs": 1, "batch_size": 8, "device": "cpu", "path": "run"},
        "parallel": {"strategy": "plain_ddp", "world_size": 2, "plain_ddp": {"bucket_cap_mb": 5}},
    }  # fmt: skip
    (where / "new.yaml").write_text(yaml.safe_dump(config))
    trained = qg(env, where, "train", "new.yaml")
    assert trained.returncode == 0, trained.stderr
    summary = json.loads((where / "run" / "summary.json").read_text())
    assert -1 <= summary["test_matthews"] <= 1, summary
    assert "plain_ddp: buckets of 5.0 MB" in (where / "run" / "train.log").read_text()

    # the new kind of embedded data, generated and learnt from
    config["data"] = {"kind": "sized", "num_graphs": 60, "num_points": [16, 32],
                      "root": str(where / "sized")}  # fmt: skip
    config["tasks"] = []
    config["parallel"] = {"world_size": 1}
    config["training"]["path"] = "sized_run"
    (where / "sized.yaml").write_text(yaml.safe_dump(config))
    trained = qg(env, where, "train", "sized.yaml")
    assert trained.returncode == 0, trained.stderr
    assert json.loads((where / "sized_run" / "summary.json").read_text())["test_accuracy"] >= 0

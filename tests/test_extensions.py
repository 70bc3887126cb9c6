"""A user's own task kind, metric, parallel strategy and file format, each a class in their module
that the config names under ``extensions``: imported before the config is read and in every
process of the job, trained with through ``qg train`` with no other edit."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import assert_refused, run_cli, run_main

import QuantumGravPy as qg
from QuantumGravPy.config.dotted import import_extensions
from QuantumGravPy.data.sources.formats import format_of

MODULE = '''
"""What a user adds: each class registers itself under its name when this module is imported."""

from dataclasses import dataclass

from torchmetrics.classification import BinaryMatthewsCorrCoef

from QuantumGravPy.data.sources.formats.hdf5_format import HDF5
from QuantumGravPy.embedded import DataKind
from QuantumGravPy.parallel.strategies.ddp import DDPStrategy
from QuantumGravPy.tasks import Metric
from QuantumGravPy.tasks.binary import Binary


class YesOrNo(Binary):
    """Whether a causal set is of the second dimension asked for, as one logit."""

    name = "yes_or_no"


class Matthews(Metric):
    """Matthews' correlation coefficient of a binary task's rows."""

    kind = "binary"
    name = "matthews"

    def make(self, num_outputs, **own):
        return BinaryMatthewsCorrCoef(**own)


class Sized(DataKind):
    """Flat sprinklings; y: 1 for more than 24 elements, else 0."""

    name = "sized"

    def classes(self, dimensions):
        return 2

    def draw(self, rng, n, d, seed, labels, h):
        from QuantumGravPy.physics import sprinkle

        labels["y"] = int(n > 24)
        return sprinkle(n, d, seed)


@dataclass(frozen=True)
class PlainSettings:
    bucket_cap_mb: float = 25.0  # DDP's gradient buckets


class PlainDDP(DDPStrategy):
    """DDP under a name of our own, with a setting of its own."""

    name = "plain_ddp"
    Settings = PlainSettings

    @classmethod
    def notices(cls, config, processes):
        size = cls.settings(config).bucket_cap_mb
        return [f"plain_ddp: buckets of {size} MB"] if size < 25 else []

    @classmethod
    def from_config(cls, config, device, **kwargs):
        strategy = cls(device)
        strategy.bucket_cap_mb = cls.settings(config).bucket_cap_mb
        return strategy

    def ddp_options(self):
        return {"bucket_cap_mb": self.bucket_cap_mb}


class Ours(HDF5):
    """HDF5 files under a suffix of our own."""

    name = "ours"
    suffixes = (".ours",)
    title = "file of ours"
    named = "an .ours file"
'''


@pytest.fixture(autouse=True)
def _registries_as_they_were():
    """What this file's modules register stays in this file: later tests in the same process
    see the library's own kinds, strategies and formats alone."""
    from QuantumGravPy.config import dotted
    from QuantumGravPy.data.sources.formats import FORMATS
    from QuantumGravPy.embedded import DATA_KINDS
    from QuantumGravPy.parallel.strategies import STRATEGIES
    from QuantumGravPy.tasks.base import KINDS
    from QuantumGravPy.tasks.metric import METRICS

    registries = (KINDS, STRATEGIES, FORMATS, DATA_KINDS)
    before = [dict(r._classes) for r in registries]
    offered = {cls: (cls.metrics, cls.minimized) for cls in KINDS}
    metrics = dict(METRICS)
    extensions = dict(dotted.EXTENSIONS)
    yield
    for registry, classes in zip(registries, before, strict=True):
        registry._classes = classes
    for cls, (names, minimized) in offered.items():
        cls.metrics, cls.minimized = names, minimized
    METRICS.clear()
    METRICS.update(metrics)
    dotted.EXTENSIONS.clear()
    dotted.EXTENSIONS.update(extensions)
    sys.modules.pop("my_kinds", None)


@pytest.fixture
def extended(tmp_path, config_file, capsys):
    """A config beside the user's module ``my_kinds.py`` and causal sets in a file of its format
    (HDF5 content, named .ours)."""
    (tmp_path / "my_kinds.py").write_text(textwrap.dedent(MODULE))
    source = config_file(data={"num_graphs": 40, "dimensions": [2, 3]})
    written = run_main(capsys, "generate", source, "--output", tmp_path / "sets.h5")
    assert written.returncode == 0, written.stderr
    (tmp_path / "sets.h5").rename(tmp_path / "sets.ours")
    raw = yaml.safe_load((tmp_path / "config.yaml").read_text())
    raw["data"] = {
        "files": [str(tmp_path / "sets.ours")],
        "root": str(tmp_path / "cache"),
        "targets": {"y": "y"},
    }
    raw["tasks"] = [
        {"name": "second", "type": "yes_or_no", "target": "y", "metrics": ["accuracy", "matthews"]}
    ]
    raw["parallel"] = {"strategy": "plain_ddp", "world_size": 2, "plain_ddp": {"bucket_cap_mb": 5}}
    raw["training"]["num_epochs"] = 1
    raw["extensions"] = ["my_kinds"]
    path = tmp_path / "extended.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, raw


@pytest.mark.timeout(240)
def test_a_users_task_kind_strategy_and_format_train_from_the_command_line(extended, capsys):
    path, raw = extended
    trained = run_main(capsys, "train", path)
    assert trained.returncode == 0, trained.stderr
    assert "test_accuracy" in trained.stdout  # the binary kind's metrics (one task: unprefixed)
    run_dir = Path(raw["training"]["path"])
    history = (run_dir / "history.csv").read_text().splitlines()[0]
    assert "val_matthews" in history.split(",")  # ours, on the kind built on binary
    summary = json.loads((run_dir / "summary.json").read_text())
    assert -1 <= summary["test_matthews"] <= 1, summary
    run = qg.load_checkpoint(f"{raw['training']['path']}/checkpoints/last.pt")
    assert run["config"]["parallel"]["strategy"] == "plain_ddp" and run["world_size"] == 2
    # its own setting, read from its section and checked as every key is
    assert "plain_ddp: buckets of 5.0 MB" in (run_dir / "train.log").read_text()
    assert run["config"]["parallel"]["plain_ddp"] == {"bucket_cap_mb": 5}
    wrong = run_main(capsys, "train", path, "parallel.plain_ddp.bucket_cap_mb=big")
    assert_refused(wrong, "parallel.plain_ddp.bucket_cap_mb: expected a number, found 'big'")
    assert run["config"]["tasks"][0]["type"] == "yes_or_no"


def test_a_users_kind_of_embedded_data_trains_from_the_command_line(extended, tmp_path, capsys):
    """The causal sets of a data.kind of one's own, generated, cached and learnt from."""
    _, raw = extended
    own = {
        **raw,
        "data": {"kind": "sized", "num_graphs": 60, "num_points": [16, 32],
                 "root": str(tmp_path / "sized")},
        "tasks": [],
        "parallel": {"world_size": 1},
        "training": {**raw["training"], "path": str(tmp_path / "sized_run")},
    }  # fmt: skip
    path = tmp_path / "sized.yaml"
    path.write_text(yaml.safe_dump(own))
    trained = run_main(capsys, "train", path)
    assert trained.returncode == 0, trained.stderr
    run = qg.load_checkpoint(tmp_path / "sized_run" / "checkpoints" / "last.pt")
    assert run["config"]["data"]["kind"] == "sized"
    dataset = qg.CausalSetDataset(
        str(tmp_path / "sized"), num_graphs=60, num_points=[16, 32], kind="sized", progress=False
    )
    assert {int(g.y) for g in dataset} == {0, 1}
    assert all(int(g.y) == int(g.num_nodes > 24) for g in dataset)


def test_without_extensions_the_names_are_unknown_and_a_missing_module_is_named(
    extended, tmp_path, capsys
):
    _, raw = extended
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({k: v for k, v in raw.items() if k != "extensions"}))
    refused = run_cli("train", str(bare))  # a fresh process: none of the module imported
    assert_refused(refused, "tasks[0].type: unknown 'yes_or_no'", "classification")
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump({**raw, "extensions": ["no_such_module"]}))
    assert_refused(run_main(capsys, "train", missing), "extensions[0]: no module named")


def test_a_file_is_read_by_the_format_its_name_says_then_by_what_it_holds(
    extended, tmp_path, monkeypatch
):
    """Not by the order the formats were registered in: a suffix first, then the content."""
    monkeypatch.syspath_prepend(str(tmp_path))
    import_extensions(["my_kinds"])
    assert format_of(tmp_path / "sets.ours").name == "ours"
    unnamed = tmp_path / "sets_without_suffix"
    (tmp_path / "sets.ours").rename(unnamed)
    assert format_of(unnamed).name == "hdf5"  # HDF5's signature
    with pytest.raises(qg.DataError, match="is not an .h5/.hdf5 file"):
        format_of(tmp_path)  # a folder that is no store
    with pytest.raises(TypeError, match=r"the suffix \.h5 is taken by .*HDF5"):

        class Clash(qg.data.sources.formats.FileFormat):
            name = "clash"
            suffixes = (".h5",)


def test_a_users_metric_of_a_kind_never_replaces_one_a_kind_built_on_it_has():
    """count is built on regression: a regression metric of the user's named poisson_deviance
    is regression's, and count keeps its own Poisson deviance."""
    import math

    import torch
    from torchmetrics import MeanAbsoluteError

    from QuantumGravPy.tasks import Metric
    from QuantumGravPy.training.evaluation.metrics import TaskMetrics

    class AbsoluteDeviance(Metric):
        """The mean absolute error, under the name poisson_deviance."""

        kind = "regression"
        name = "poisson_deviance"

        def make(self, num_outputs, **own):
            return MeanAbsoluteError(**own)

    target = torch.tensor([1.0, 3.0])
    rates = torch.tensor([1.0, 2.0])
    regression = TaskMetrics("regression", ["poisson_deviance"], 1)
    regression.update(rates, target)
    assert regression.compute()["poisson_deviance"] == pytest.approx(0.5)

    count = TaskMetrics("count", ["poisson_deviance"], 1)
    count.update(rates.log(), target)
    deviance = 2 * (3 * math.log(3 / 2) - 1) / 2  # the first row is exact
    assert count.compute()["poisson_deviance"] == pytest.approx(deviance)

"""The reference generative model asked for a dimension (``qg sample --condition``), and a
growth model trained by an earlier version of the package, which samples the same sets today."""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
import zarr
from conftest import assert_refused, run_main

from QuantumGravPy.models import CausalSetGrowth
from QuantumGravPy.predict.sampling import provenance

pytestmark = pytest.mark.timeout(240)

FIXTURES = Path(__file__).parent / "fixtures"
# runs of earlier versions: (folder, what qg sample is asked besides the seed)
EARLIER = {
    "twelve features": (FIXTURES / "growth_before_features", []),
    "nineteen, conditioned": (
        FIXTURES / "growth_conditioned_19_features",
        ["--condition", "dimension=3"],
    ),
}


def read_sets(path):
    root = zarr.open_group(str(path), mode="r")
    return [root[f"cset_{i + 1}"]["adj"][:] for i in range(len(list(root.group_keys())))]


@pytest.mark.parametrize("version", list(EARLIER))
def test_a_growth_model_of_an_earlier_version_samples_the_same_sets(tmp_path, capsys, version):
    """Each fixture's run was trained by an earlier version of the package: before the
    decisions saw the set's size (twelve features), and before they saw chains, maximal
    elements and relations on a log scale (nineteen, conditioned on the dimension). Its
    samples for seed 0 were drawn by that version. Today's code reads its weights and grows
    the same sets. Compared exactly although drawn on another machine: a set changes only if
    a decision's probability lands within float32 rounding (~1e-7) of its uniform draw, a
    chance of about 1e-4 over the ~600 decisions here."""
    before, asked = EARLIER[version]
    run = tmp_path / "run"
    shutil.copytree(before, run)
    out = tmp_path / "again.zarr"
    done = run_main(capsys, "sample", run, "--num", 6, "--seed", 0, "--output", out,
                    f"data.root={tmp_path / 'data'}", *asked)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = np.load(before / "samples_seed0.npz")
    grown = read_sets(out)
    assert [len(s) for s in grown] == expected["sizes"].tolist()
    for i, matrix in enumerate(grown):
        n = expected["sizes"][i]
        assert np.array_equal(matrix, expected["adj"][i, :n, :n]), i


def test_a_model_conditioned_on_dimension_grows_the_one_asked_for():
    model = CausalSetGrowth(sizes=(6, 9), hidden=8, dimensions=[2, 4])
    assert model.reads == ("x", "edge_index", "y")
    same = [s.relations for s in model.generate(4, torch.Generator().manual_seed(0), dimension=4)]
    again = [s.relations for s in model.generate(4, torch.Generator().manual_seed(0), dimension=4)]
    assert all(torch.equal(a, b) for a, b in zip(same, again, strict=True))
    with torch.no_grad():  # the condition reaches every decision: a large weight on "4D"
        model.decide[0].weight[:, -1] = 50.0
        model.decide[-1].weight.fill_(1.0)
    seed = torch.Generator().manual_seed
    four = [s.links.sum() for s in model.generate(8, seed(0), dimension=4)]
    two = [s.links.sum() for s in model.generate(8, seed(0), dimension=2)]
    assert four != two
    with pytest.raises(ValueError, match="the model knows 2, 4, not 3"):
        model.generate(1, dimension=3)
    with pytest.raises(ValueError, match="not conditioned on one"):
        CausalSetGrowth(sizes=(6, 9), hidden=8).generate(1, dimension=2)


@pytest.fixture(scope="module")
def conditioned(tmp_path_factory):
    """A conditioned growth model trained one epoch on 2D and 4D sprinklings."""
    folder = tmp_path_factory.mktemp("conditioned")
    config = {
        "name": "conditioned",
        "log_level": "WARNING",
        "data": {"root": str(folder / "data"), "kind": "dimension", "dimensions": [2, 4],
                 "num_points": [12, 16], "num_graphs": 80},
        "tasks": [{"name": "growth", "type": "model_loss", "terms": {"nll": 1.0}}],
        "model": {"type": "QuantumGravPy.models.CausalSetGrowth",
                  "kwargs": {"sizes": [12, 16], "hidden": 16, "dimensions": [2, 4]}},
        "training": {"path": str(folder / "run"), "device": "cpu", "num_epochs": 1,
                     "batch_size": 16, "plots": False},
        "early_stopping": {"metric": "val_nll_loss", "patience": 5},
    }  # fmt: skip
    path = folder / "conditioned.yaml"
    path.write_text(yaml.safe_dump(config))
    from QuantumGravPy.cli import main

    assert main(["train", str(path)]) == 0
    return folder / "run"


def test_qg_sample_grows_the_dimension_asked_for_and_reports_it_against_that_dimension(
    conditioned, tmp_path, capsys
):
    out = tmp_path / "four.zarr"
    done = run_main(capsys, "sample", conditioned, "--num", 12, "--output", out,
                    "--condition", "dimension=4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "exact values of 4D sprinklings" in done.stdout
    with open(tmp_path / "four_report.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["statistic"] == "ordering_fraction"]
    assert rows and all(float(r["exact"]) == pytest.approx(0.1) for r in rows)
    # against the 4D training sets alone: theirs is near 1/10, never 2D's 1/2
    assert all(float(r["reference_mean"]) < 0.3 for r in rows if int(r["reference_sets"]))
    assert provenance(out)["condition"] == {"dimension": 4}
    assert json.dumps(provenance(out))  # plain JSON


def test_a_condition_that_cannot_be_grown_is_one_line(conditioned, tmp_path, capsys):
    run = tmp_path / "before"
    shutil.copytree(EARLIER["twelve features"][0], run)
    cases = [
        (conditioned, ["--condition", "dimension=3"], "--condition: dimension: the model knows"),
        # refused before the processes start: not by each of them
        (conditioned, ["--condition", "dimension=3", "--world-size", 2], "the model knows"),
        (conditioned, ["--condition", "colour=1"], "generate takes no 'colour'"),
        (conditioned, ["--condition", "dimension"], "--condition: expected KEY=VALUE"),
        (run, ["--condition", "dimension=2"], "not conditioned on one"),
    ]
    for i, (folder, args, message) in enumerate(cases):
        out = tmp_path / f"s{i}.zarr"
        result = run_main(capsys, "sample", folder, "--num", 2, "--output", out, *args,
                          f"data.root={tmp_path / 'data'}")  # fmt: skip
        assert_refused(result, message)
        assert not out.exists()


def test_a_conditioned_model_needs_each_graphs_dimension():
    from torch_geometric.data import Batch, Data

    edges = torch.tensor([[0, 1], [1, 0]])
    batch = Batch.from_data_list([Data(x=torch.zeros(3, 1), edge_index=edges)])
    with pytest.raises(ValueError, match="label y"):
        CausalSetGrowth(sizes=(3, 3), hidden=4, dimensions=[2, 3])(batch)


def test_the_check_before_sampling_refuses_a_condition_and_leaves_other_failures_to_the_draw():
    """``qg sample`` asks ``generate(0, ...)`` first: a ValueError there is the refusal of the
    condition; a generate that cannot draw no sets at all (written for num >= 1) still samples."""
    from QuantumGravPy.errors import ConfigError
    from QuantumGravPy.predict.sampling import _check_grows

    class OneAtLeast:
        def generate(self, num, generator=None, dimension=None):
            if dimension not in (2, 3):
                raise ValueError(f"dimension: 2 or 3, not {dimension}")
            return list(torch.stack([torch.zeros(2, 2)] * num).bool())  # none: RuntimeError

    generator = torch.Generator().manual_seed(0)
    assert _check_grows(OneAtLeast(), {"dimension": 3}, generator) is None
    with pytest.raises(ConfigError, match="--condition: dimension: 2 or 3, not 5"):
        _check_grows(OneAtLeast(), {"dimension": 5}, generator)

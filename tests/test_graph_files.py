"""General graphs from files through data.files: saved PyG graphs (a list of Data, an
InMemoryDataset's file) and HDF5/Zarr files of one group per graph, read as they are, in memory
or on disk; files that would run code are refused unread; one clear error per bad graph."""

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
import zarr
from conftest import ROOT, assert_refused, run_main
from torch_geometric.data import Data, InMemoryDataset

from QuantumGravPy.config import DataConfig
from QuantumGravPy.data import dataset_from_config
from QuantumGravPy.errors import DataError

pytestmark = pytest.mark.timeout(120)


def graphs(count: int = 12) -> list[Data]:
    """Small graphs with everything a user's may hold: float node features, integer edges,
    edge features, a class per graph, a target per node and a feature vector per graph."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for i in range(count):
        n = 3 + i % 5
        edges = torch.randint(0, n, (2, 2 * n), generator=generator)
        out.append(
            Data(
                x=torch.rand(n, 3, generator=generator),
                edge_index=edges,
                edge_attr=torch.rand(2 * n, 2, generator=generator),
                y=torch.tensor([i % 2]),
                member=torch.rand(n, 1, generator=generator),
                stats=torch.rand(1, 2, generator=generator),
            )
        )
    return out


def write(kind: str, folder: Path, saved: list[Data]) -> Path:
    """``saved`` in a file of ``kind``, as a user would write it."""
    if kind == "list.pt":
        torch.save(saved, folder / kind)
    elif kind == "dataset.pt":
        InMemoryDataset.save(saved, str(folder / kind))
    elif kind == "graphs.h5":
        with h5py.File(folder / kind, "w") as f:
            for i, graph in enumerate(saved, start=1):
                group = f.create_group(f"graph_{i}")
                for key, value in graph.items():
                    group.create_dataset(key, data=value.numpy())
    else:  # a Zarr store whose groups are plain numbers from 0: read in their order, 0..11
        root = zarr.open_group(str(folder / kind), mode="w", zarr_format=2)
        for i, graph in enumerate(saved):
            group = root.create_group(str(i))
            for key, value in graph.items():
                group.create_array(key, data=value.numpy())
    return folder / kind


@pytest.mark.parametrize("storage", ["memory", "disk"])
@pytest.mark.parametrize("kind", ["list.pt", "dataset.pt", "graphs.h5", "graphs.zarr"])
def test_saved_and_array_files_give_the_graphs_as_they_were(tmp_path, kind, storage):
    saved = graphs()
    path = write(kind, tmp_path, saved)
    config = DataConfig(files=(str(path),), root=str(tmp_path / "cache"), storage=storage)
    dataset = dataset_from_config(config, progress=False)
    assert len(dataset) == len(saved)
    for i, (read, original) in enumerate(zip(dataset, saved, strict=True)):
        for key, value in original.items():
            assert read[key].dtype == value.dtype and torch.equal(read[key], value), (i, key)
        assert int(read.source_sample) == i and int(read.source_file) == 0


def test_a_saved_file_that_would_run_code_is_refused_unread(tmp_path):
    marker = tmp_path / "ran"
    torch.save([graphs(1)[0], Payload(marker)], tmp_path / "payload.pt")
    config = DataConfig(files=(str(tmp_path / "payload.pt"),), root=str(tmp_path / "cache"))
    with pytest.raises(DataError, match="not loaded .loading them would run code"):
        dataset_from_config(config, progress=False)
    assert not marker.exists()


class Payload:
    """What an unrestricted torch.load would call while reading: it writes ``marker``."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def bad_file(tmp_path: Path, **arrays) -> Path:
    """An HDF5 file of two graphs, the second with ``arrays`` in place of its own."""
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        for i in (1, 2):
            group = f.create_group(f"graph_{i}")
            given = {"x": np.ones((3, 2)), "edge_index": np.array([[0, 1], [1, 2]]), "y": 1,
                     "edge_attr": np.ones((2, 1))}  # fmt: skip
            for key, value in (given | (arrays if i == 2 else {})).items():
                group.create_dataset(key, data=value)
    return tmp_path / "bad.h5"


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"edge_index": np.array([[0, 1], [1, 3]])}, "bad.h5: graph_2: 'edge_index' names node 3, "
         "but the graph has 3 nodes"),
        ({"edge_index": np.array([0.0, 1.0])}, "graph_2: 'edge_index' should be 2 x E"),
        ({"edge_attr": np.ones((5, 1))}, "graph_2: 'edge_attr' has 5 rows for 2 edges"),
        ({"x": np.array([[np.nan, 1.0]] * 3)}, "graph_2: 'x' holds NaN"),
    ],
)  # fmt: skip
def test_a_bad_graph_is_one_error_naming_the_file_and_group(tmp_path, capsys, arrays, message):
    path = bad_file(tmp_path, **arrays)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log_level": "WARNING",
                "data": {"files": [str(path)], "root": str(tmp_path / "cache")},
                "tasks": [{"name": "y", "target": "y"}],
                "training": {"path": str(tmp_path / "run"), "num_epochs": 1, "device": "cpu"},
            }
        )
    )
    assert_refused(run_main(capsys, "train", config), message)
    assert not (tmp_path / "run").exists()  # nothing started


def test_what_a_file_of_graphs_must_hold_is_named(tmp_path):
    def refused(path, message, **keys):
        config = DataConfig(files=(str(path),), root=str(tmp_path / "cache"), **keys)
        with pytest.raises(DataError, match=message):
            dataset_from_config(config, progress=False)

    with h5py.File(tmp_path / "nox.h5", "w") as f:
        f.create_group("graph_1")["edge_index"] = np.array([[0], [1]])
    refused(tmp_path / "nox.h5", "graph_1 has no node features: store them as x")
    path = bad_file(tmp_path)
    refused(path, "data.relations names an array of causal sets", relations="adj")
    refused(path, "data.targets names array 'label'", targets={"y": "label"})
    with h5py.File(path, "a") as f:
        f.create_group("other_3")["edge_index"] = np.array([[0], [1]])
    refused(path, "named alike.*'graph_N', 'other_N'")
    torch.save({"graphs": graphs(2)}, tmp_path / "dict.pt")
    refused(tmp_path / "dict.pt", "dict.pt: holds dict; expected a list of torch_geometric Data")


def test_qg_generate_writes_only_array_files(tmp_path, capsys):
    config = ROOT / "configs" / "train.yaml"
    named = run_main(capsys, "generate", config, "--output", tmp_path / "sets.pt")
    assert_refused(named, "sets.pt is not an .h5/.hdf5 file or a .zarr store; name the format")
    chosen = run_main(capsys, "generate", config, "--output", tmp_path / "x.h5", "--format", "pt")
    assert_refused(chosen, "--format: pt files are read, not written; write hdf5, zarr")
    assert not list(tmp_path.iterdir())

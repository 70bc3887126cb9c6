"""Nothing the library reads back from ``data.root`` runs code: a cache file or a table row
planted there (a shared ``data.root`` on a cluster lets others write) is refused, and a cache is
built again from the data, with the same numbers as before."""

import os
import pickle
import sqlite3
import struct

import torch
import yaml
from conftest import assert_refused, run_main, small_raw_config


class Planted:
    """What an attacker pickles: unpickling it creates the directory ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def config(tmp_path, *, storage):
    raw = small_raw_config(tmp_path, tmp_path / "data")
    raw["data"]["storage"] = storage
    raw["training"]["num_epochs"] = 2
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def losses(tmp_path):
    return [row["train_loss"] for row in torch.load(
        tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)["history"]]  # fmt: skip


def test_a_planted_cache_is_rebuilt_never_run(tmp_path, capsys):
    marker = tmp_path / "ran"
    for storage, pattern in (("memory", "causal_sets_*[0-9a-f].pt"), ("disk", "*.labels.pt")):
        path = config(tmp_path / storage, storage=storage)
        first = run_main(capsys, "train", path)
        assert first.returncode == 0, first.stderr
        before = losses(tmp_path / storage)
        (cache,) = (tmp_path / storage / "data" / "processed").glob(pattern)
        torch.save((Planted(marker), {}), cache)  # as a collated dataset would be saved
        for record in ("pre_transform.pt", "pre_filter.pt"):  # what PyG would read back
            torch.save(Planted(marker), cache.parent / record)

        again = run_main(capsys, "train", path, "--overwrite")
        assert again.returncode == 0, again.stderr
        assert not marker.exists(), storage
        assert f"{cache}: the processed cache cannot be read (holds objects other than " in (
            again.stderr
        )
        assert "building it again from the data" in again.stderr
        assert losses(tmp_path / storage) == before  # the same graphs, so the same numbers


def test_a_planted_table_row_is_refused_never_run(tmp_path, capsys):
    marker = tmp_path / "ran"
    path = config(tmp_path, storage="disk")
    assert run_main(capsys, "train", path).returncode == 0
    (table,) = (tmp_path / "data" / "processed").glob("*.db")
    header = pickle.dumps(([], {"y": Planted(marker)}))  # a row of no tensors, one attribute
    row = struct.pack("<3q", 0, 0, len(header)) + header
    with sqlite3.connect(table) as db:
        (column,) = [c[1] for c in db.execute("PRAGMA table_info(graphs)") if c[2] == "BLOB"]
        db.execute(f"UPDATE graphs SET {column} = ?", (row,))
    result = run_main(capsys, "train", path, "--overwrite")
    assert not marker.exists()
    assert_refused(result, f"{table}: a stored graph is not one this library wrote", "delete it")


def test_a_zarr_array_stored_as_pickles_is_refused_never_run(make_config, tmp_path, capsys):
    """numcodecs' pickle codec unpickles each chunk: a .zarr whose labels were stored so (or
    planted) would run code as it is read. It is one line naming the array, whichever reader
    (zarr's, or the library's own for QuantumGrav.jl's format-2 stores) meets it first."""
    import json

    import numpy as np
    import zarr

    marker = tmp_path / "ran"
    store = tmp_path / "sets.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    adj = np.triu(np.ones((6, 8, 8), dtype=np.uint8), 1)
    root.create_array("adjacency_matrix", data=adj)
    root.create_array("y", data=np.zeros(6, dtype=np.int64))
    meta = json.loads((store / "y" / ".zarray").read_text())
    meta["compressor"] = {"id": "pickle", "protocol": 5}
    (store / "y" / ".zarray").write_text(json.dumps(meta))
    (store / "y" / "0").write_bytes(pickle.dumps(Planted(marker)))
    cfg = make_config(f"data.files=[{store}]", "data.targets={y: y}", "training.num_epochs=1")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(__import__("QuantumGravPy").config.config_to_dict(cfg)))
    result = run_main(capsys, "train", path)
    assert not marker.exists()
    assert_refused(result, str(store), "'y'", "pickle")

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

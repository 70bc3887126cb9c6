"""The main job learns: a 600-graph, 15-epoch run of the shipped config through the command line."""

import json
import os

from conftest import ROOT, run_cli, run_forked


def test_shipped_config_learns_the_dimension_of_causal_sets(tmp_path):
    result = run_cli(
        "train",
        str(ROOT / "configs" / "train.yaml"),
        f"data.root={tmp_path / 'data'}",
        "data.num_graphs=600",
        "training.num_epochs=15",
        "training.lr_scheduler.kwargs={T_max: 15}",
        "training.device=cpu",
        f"training.path={tmp_path / 'run'}",
        timeout=400,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["test_accuracy"] >= 0.85, summary
    assert summary["epochs_run"] <= 15 and summary["world_size"] == 1
    run = tmp_path / "run"
    for name in (
        "config.yaml",
        "history.csv",
        "train.log",
        "checkpoints/best.pt",
        "checkpoints/last.pt",
    ):
        assert (run / name).is_file(), name


def test_the_own_graphs_example_trains_on_1_and_2_processes_and_predicts(tmp_path, monkeypatch):
    """examples/own_graphs, as the Your own graphs page runs it: a data function and a model
    of one's own beside the config, found there by qg run from another folder, on 2 processes
    (16 graphs each a step); the same graphs written to an HDF5 file (save_graphs.py) and read
    through data.files on 1 process (32 graphs a step), kept on disk; then qg predict on that
    run. (qg predict on a data function's run: test_predict.py.)"""
    import csv
    import math
    import runpy

    example = ROOT / "examples" / "own_graphs"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def qg(*args):
        result = run_forked(*args, env=env, cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stderr
        return result

    qg("train", example / "config.yaml", "training.num_epochs=4", "training.path=two",
       "data.dataset_kwargs={num_graphs: 160, seed: 0}")  # fmt: skip
    monkeypatch.syspath_prepend(str(example))  # as running the script puts its folder first
    runpy.run_path(str(example / "save_graphs.py"))["save"](160, 0, tmp_path)
    qg("train", example / "from_files.yaml", "training.num_epochs=4", "training.path=one",
       "parallel.world_size=1", "training.batch_size=32", "data.storage=disk")  # fmt: skip

    def history(run):
        with open(tmp_path / run / "history.csv") as f:
            return list(csv.DictReader(f))

    two, one = history("two"), history("one")
    assert len(two) == len(one) == 4
    # The same steps on the same graphs (the file's are the function's, bit for bit:
    # test_graph_files.py): one batch of 32 against two of 16 whose gradients are averaged, the
    # same sums in another order (float32 rounding, ~1e-7 a step, which Adam carries on: ~1e-4
    # after 4 epochs here); another split or batch would differ by 1e-2 and more.
    for a, b in zip(two, one, strict=True):
        assert a["train_planted_accuracy"] == b["train_planted_accuracy"]
        assert math.isclose(float(a["val_loss"]), float(b["val_loss"]), rel_tol=2e-3)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["test_planted_accuracy"] >= 0.8, summary
    qg("predict", "one", "--output", "predictions.csv")
    with open(tmp_path / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 160
    right = sum(r["planted_class"] == r["planted_true"] for r in rows)
    assert right / len(rows) >= 0.8
    # the file as data.files names it, the graph's position in it and its group
    assert (rows[5]["source"], rows[5]["index"], rows[5]["group"]) == (
        "communities.h5", "5", "graph_6")  # fmt: skip
    assert (tmp_path / "predictions_nodes.csv").is_file()

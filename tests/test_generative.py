"""Generative models of causal sets: the reference model (CausalSetGrowth) learns the data's
statistics, ``qg sample`` draws the same samples for any number of processes and writes files
that train and predict like any other, and its report compares them with the training data."""

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
import zarr
from conftest import assert_refused, run_main, train
from torch_geometric.data import Data

import QuantumGravPy as qg
from QuantumGravPy.models import CausalSetGrowth
from QuantumGravPy.physics import order_violation
from QuantumGravPy.predict.sample_report import relations_of, statistics

pytestmark = pytest.mark.timeout(240)

SMALL = {"kind": "dimension", "dimensions": [2], "num_points": [16, 24], "num_graphs": 160}


def growth_config(root, path, **training):
    return {
        "name": "growth",
        "log_level": "WARNING",
        "data": {"root": str(root), **SMALL},
        "tasks": [{"name": "growth", "type": "model_loss", "terms": {"nll": 1.0}}],
        "model": {
            "type": "QuantumGravPy.models.CausalSetGrowth",
            "kwargs": {"sizes": [16, 24], "hidden": 32},
        },
        "training": {"path": str(path), "device": "cpu", "num_epochs": 3, "batch_size": 16,
                     "plots": False, "optimizer": {"kwargs": {"lr": 0.01}}, **training},
        "early_stopping": {"metric": "val_nll_loss", "patience": 20},
    }  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_root):
    """A growth model trained from the command line, for the tests of qg sample."""
    folder = tmp_path_factory.mktemp("growth")
    path = folder / "growth.yaml"
    path.write_text(yaml.safe_dump(growth_config(data_root, folder / "run")))
    from QuantumGravPy.cli import main

    assert main(["train", str(path)]) == 0
    return folder / "run"


def gap(samples, data, name):
    return abs(samples[name].mean() - data[name].mean()) / data[name].mean()


def test_the_growth_model_grows_valid_orders_whose_statistics_approach_the_datas(
    data_root, tmp_path
):
    """Untrained, it links a new element to half of what it may (ordering fraction near 0.9);
    trained by teacher forcing, its samples' ordering fraction and links per element move to
    within a fraction of the gap to the data's (2D sprinklings: ordering fraction 1/2)."""
    cfg = qg.config.config_from_dict(growth_config(data_root, tmp_path / "run", num_epochs=5))
    untrained = qg.Trainer(cfg).model
    before = statistics(
        [s.relations for s in untrained.generate(100, torch.Generator().manual_seed(0))]
    )
    trainer, history, _ = train(cfg)
    assert history[-1]["val_nll_loss"] < history[0]["val_nll_loss"]
    grown = trainer.model.generate(100, torch.Generator().manual_seed(0))
    after = statistics([s.relations for s in grown])
    train_set = [relations_of(g) for g in qg.data.dataset_from_config(cfg.data, progress=False)]
    data = statistics(train_set)
    assert data["ordering_fraction"].mean() == pytest.approx(0.5, abs=0.02)  # exact: 1/2 in 2D
    assert after["valid"].all() and before["valid"].all()  # orders by construction
    for name in ("ordering_fraction", "links_per_element"):
        assert gap(after, data, name) < 0.5 * gap(before, data, name), name
    assert all(16 <= len(s.relations) <= 24 for s in grown)


def read_sets(path):
    root = zarr.open_group(str(path), mode="r")
    return [root[f"cset_{i + 1}"]["adj"][:] for i in range(len(list(root.group_keys())))]


def test_qg_sample_draws_the_same_sets_on_one_and_two_processes_and_reports_them(
    run, tmp_path, capsys
):
    one = run_main(capsys, "sample", run, "--num", 70, "--output", tmp_path / "one.zarr")
    assert one.returncode == 0, one.stderr
    assert "valid orders" in one.stdout and "100.0 %" in one.stdout
    assert "ordering fraction" in one.stdout and "Myrheim-Meyer dimension" in one.stdout
    two = run_main(capsys, "sample", run, "--num", 70, "--output", tmp_path / "two.zarr",
                   "--world-size", 2)  # fmt: skip
    assert two.returncode == 0, two.stderr
    a, b = read_sets(tmp_path / "one.zarr"), read_sets(tmp_path / "two.zarr")
    assert len(a) == 70 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    for matrix in a:  # written as Julia does: the transpose of the causal matrix
        assert order_violation(torch.from_numpy(matrix.T).bool()) is None
    other = run_main(capsys, "sample", run, "--num", 70, "--output", tmp_path / "seed.zarr",
                     "--seed", 1)  # fmt: skip
    assert other.returncode == 0
    c = read_sets(tmp_path / "seed.zarr")
    assert any(x.shape != y.shape or not np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    with open(tmp_path / "one_report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    valid = [r for r in rows if r["statistic"] == "valid"]
    assert sum(int(r["samples"]) for r in valid) == 70
    assert all(float(r["samples_mean"]) == 1.0 for r in valid)
    # the sizes it grows, 16-24, in bins of the training sizes: none beyond them
    assert all(16 <= int(r["sizes"].split("-")[0]) <= 24 for r in valid)
    assert all(r["extrapolation"] == "False" for r in rows)
    assert (tmp_path / "one_report.png").stat().st_size > 10_000


def test_the_samples_file_says_where_its_samples_came_from(run, tmp_path):
    """The run, the checkpoint and its digest, the seed, the sizes and the version, in both
    formats; a file qg sample did not write has none."""
    import hashlib

    from QuantumGravPy.predict.sampling import provenance

    best = run / "checkpoints" / "best.pt"
    for name in ("a.zarr", "b.h5"):
        qg.sample(run, num=5, output=tmp_path / name, seed=7)
        said = provenance(tmp_path / name)
        assert said["run"] == str(run.resolve()) and said["checkpoint"] == str(best.resolve())
        assert said["checkpoint_sha256"] == hashlib.sha256(best.read_bytes()).hexdigest()
        assert said["seed"] == 7 and said["num"] == 5 and said["sizes_asked"] == [16, 24]
        assert 16 <= said["sizes"][0] <= said["sizes"][1] <= 24
        assert said["version"] == qg.__version__
    from QuantumGravPy.data.sources.writing import write_causal_sets

    links = torch.ones(3, 3).triu(1).bool()
    write_causal_sets(tmp_path / "own.zarr", iter([(Data(), links, links)]), file_format="zarr")
    assert provenance(tmp_path / "own.zarr") is None


def test_samples_train_and_predict_like_any_file(run, tmp_path, capsys, data_root):
    """The round trip: the samples' file is data.files of a new run (the growth model again)
    and qg predict's input, one row per sample."""
    drawn = run_main(capsys, "sample", run, "--num", 40, "--output", tmp_path / "s.zarr")
    assert drawn.returncode == 0, drawn.stderr
    raw = growth_config(tmp_path / "cache", tmp_path / "again", num_epochs=1)
    raw["data"] = {"root": str(tmp_path / "cache"), "files": [str(tmp_path / "s.zarr")]}
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump(raw))
    trained = run_main(capsys, "train", path)
    assert trained.returncode == 0, trained.stderr
    out = tmp_path / "terms.csv"
    predicted = run_main(capsys, "predict", run, "--files", tmp_path / "s.zarr", "--output", out)
    assert predicted.returncode == 0, predicted.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 40 and all(float(r["growth_nll"]) > 0 for r in rows)


def test_sampling_from_python_gives_the_report(run, tmp_path):
    report = qg.sample(run, num=12, output=tmp_path / "p.h5", seed=3)
    assert len(report.samples["valid"]) == 12 and report.samples["valid"].all()
    fractions = [r for r in report.rows() if r["statistic"] == "ordering_fraction"]
    # the data are 2D sprinklings: an ordering fraction of 1/2 on average, exactly
    assert all(r["exact"] == 0.5 for r in fractions)
    assert np.mean(report.data["ordering_fraction"]) == pytest.approx(0.5, abs=0.03)
    assert "Myrheim-Meyer dimension" in report.table()
    again = qg.sample(run, num=12, output=tmp_path / "q.zarr", seed=3)  # another format
    assert np.array_equal(again.samples["ordering_fraction"], report.samples["ordering_fraction"])


def test_what_qg_sample_cannot_use_is_one_line(run, tmp_path, capsys, make_config):
    (tmp_path / "there.zarr").mkdir()
    cases = [
        (["--num", 0, "--output", tmp_path / "a.zarr"], "--num: expected a positive number"),
        (["--num", 5, "--output", tmp_path / "a.txt"], "--output:"),
        (["--num", 5, "--output", tmp_path / "there.zarr"], "there.zarr exists; pass --overwrite"),
        (["--num", 5, "--output", tmp_path / "no" / "a.zarr"], "does not exist"),
    ]
    for args, message in cases:
        assert_refused(run_main(capsys, "sample", run, *args), message)
    cfg = make_config("training.num_epochs=1")  # a classifier: nothing to sample
    train(cfg)
    assert_refused(
        run_main(capsys, "sample", cfg.run_dir, "--num", 5, "--output", tmp_path / "b.zarr"),
        "model.type: GNNModel has no generate(num, generator=...) method",
    )


def test_teacher_forcing_sees_every_decision_as_growing_it_does(monkeypatch):
    """The likelihood trained on is the one samples are drawn from: each decision's features,
    computed for all decisions at once from a finished set, are those the growth computed for
    it step by step; the sets' links are their relations' transitive reduction."""
    from torch_geometric.data import Batch, Data

    from QuantumGravPy.models import growth
    from QuantumGravPy.physics import transitive_reduction

    seen = {}
    decision = growth._decision

    def recording(state, j, chosen, k, past, below_j, common):
        features = decision(state, j, chosen, k, past, below_j, common)
        for i in range(len(features)):
            seen[(i, j, k)] = (features[i].clone(), bool(past[i, j]))
        return features

    monkeypatch.setattr(growth, "_decision", recording)
    model = CausalSetGrowth(sizes=(5, 14), hidden=8)
    with torch.no_grad():
        model.decide[-1].bias.fill_(1.0)  # links likely: pasts of all shapes
    grown = model.generate(12, torch.Generator().manual_seed(1))
    graphs = []
    for s in grown:
        assert torch.equal(s.links, transitive_reduction(s.relations))
        first, second = s.links.nonzero().t()
        edges = torch.cat([torch.stack([first, second]), torch.stack([second, first])], 1)
        graphs.append(Data(x=torch.zeros(len(s.relations), 1), edge_index=edges))
    links, sizes = growth._dense_links(Batch.from_data_list(graphs))
    assert sizes.tolist() == [len(s.relations) for s in grown]
    relations = torch.stack(
        [torch.nn.functional.pad(s.relations, (0, 14 - len(s.relations)) * 2) for s in grown]
    )
    features, asked = growth._teacher_features(relations, links, sizes)
    compared = 0
    for (i, j, k), (grown_features, forced) in seen.items():
        if k >= sizes[i]:
            continue
        assert bool(asked[i, j, k]) == (not forced)
        if not forced:
            assert torch.allclose(features[i, j, k], grown_features, atol=1e-6), (i, j, k)
            compared += 1
    assert compared == int(asked.sum()) > 150


def test_sampling_over_an_output_replaces_it_only_when_asked(run, tmp_path, capsys):
    output = tmp_path / "s.zarr"
    assert run_main(capsys, "sample", run, "--num", 8, "--output", output).returncode == 0
    refused = run_main(capsys, "sample", run, "--num", 8, "--output", output, "--seed", 5)
    assert_refused(refused, "s.zarr exists; pass --overwrite")
    (tmp_path / "fresh").mkdir()
    expected = read_sets(qg.sample(run, num=8, output=tmp_path / "fresh" / "s.zarr", seed=5).output)
    again = run_main(capsys, "sample", run, "--num", 8, "--output", output, "--seed", 5,
                     "--overwrite")  # fmt: skip
    assert again.returncode == 0, again.stderr
    got = read_sets(output)  # the new seed's sets, whole
    assert len(got) == 8 and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left over
    negative = run_main(capsys, "sample", run, "--num", 8, "--output", tmp_path / "t.zarr",
                        "--seed", -1)  # fmt: skip
    assert_refused(negative, "--seed: expected a number >= 0, found -1")


def test_the_growth_model_refuses_sizes_that_cannot_be():
    with pytest.raises(ValueError, match="sizes: expected"):
        CausalSetGrowth(sizes=(10, 5))


def test_a_statistic_the_data_never_have_is_no_difference_but_none(tmp_path):
    from QuantumGravPy.predict.sample_report import build

    zero, some = np.zeros(3), np.full(3, 0.5)
    samples = {name: some for name in statistics([torch.ones(2, 2).triu(1).bool()])}
    samples["elements"] = np.full(3, 2.0)
    data = {**samples, "intervals_4_per_element": zero}
    report = build(samples, data, tmp_path / "s.zarr", dimension=None)
    report.references = [("training sets", data)]  # three sets: their own reference
    rows = {r["statistic"]: r for r in report.rows()}
    assert np.isnan(rows["intervals_4_per_element"]["difference"])
    line = next(x for x in report.table().splitlines() if x.startswith("intervals of 4"))
    assert line.split()[-5:-2] == ["n/a"] * 3 and "+0.0" not in line


class Killed(BaseException):
    """A kill -9 at one point of replacing an output: nothing after it runs."""


def test_a_kill_while_an_output_is_replaced_leaves_old_or_new_samples_with_their_own_report(
    run, tmp_path, capsys, monkeypatch
):
    """--overwrite killed before each move of its files in turn: samples are always there, old
    or new, and a report beside them is always theirs; the next qg sample finishes what was
    written whole, and removes what a killed process left half-written."""
    import shutil
    import subprocess

    from QuantumGravPy.predict import replacing

    def written(folder, seed):
        folder.mkdir()
        qg.sample(run, num=8, output=folder / "s.zarr", seed=seed, compare=20)
        return read_sets(folder / "s.zarr"), (folder / "s_report.csv").read_text()

    old, new = written(tmp_path / "old", 0), written(tmp_path / "new", 5)
    assert old[1] != new[1]
    moves = ["replace", "rename"]
    for k in range(1, 20):
        out = tmp_path / f"kill{k}"
        shutil.copytree(tmp_path / "old", out)
        calls = []

        def counted(real, calls=calls, k=k):
            def move(*args):
                # the moves of the output's files (os is one module: not the writers' renames)
                ours = Path(args[0]).name.startswith(".s.zarr.partial-") or any(
                    ".s.zarr.swap" in str(a) for a in args
                )
                if ours:
                    calls.append(args)
                    if len(calls) == k:
                        raise Killed
                return real(*args)

            return move

        with monkeypatch.context() as m:
            for name in moves:
                m.setattr(replacing.os, name, counted(getattr(replacing.os, name)))
            m.setattr(replacing, "_exchange", counted(replacing._exchange))
            try:
                qg.sample(run, num=8, output=out / "s.zarr", seed=5, overwrite=True, compare=20)
                finished = True
            except Killed:
                finished = False
        sets = read_sets(out / "s.zarr")
        mine = [x for x in (old, new) if len(x[0]) == len(sets) and
                all(np.array_equal(a, b) for a, b in zip(x[0], sets, strict=True))]  # fmt: skip
        assert mine, k  # samples, whole, old or new
        report = out / "s_report.csv"
        assert not report.exists() or report.read_text() == mine[0][1], k
        if finished:
            assert sets and mine[0] is new and report.exists()
            break
        again = run_main(capsys, "sample", run, "--num", 8, "--output", out / "s.zarr")
        committed = k > 1  # the first move makes the new output whole
        lines = again.stderr.strip().splitlines()
        assert again.returncode == 2 and lines[-1].startswith("error: "), again.stderr
        assert "exists; pass --overwrite" in lines[-1]  # after moving in what was written
        finishing = "an earlier qg sample was stopped while moving its output in; finishing it"
        assert len(lines) == 1 + committed and (finishing in lines[0]) == committed, lines
        expected = new if committed else old
        sets = read_sets(out / "s.zarr")
        assert all(np.array_equal(a, b) for a, b in zip(sets, expected[0], strict=True)), k
        assert report.read_text() == expected[1], k
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")], k
    assert k > 4  # every move was a kill point once
    # a folder half-written by a process that is gone is removed by the next qg sample
    gone = subprocess.Popen(["true"])
    gone.wait()
    partial = tmp_path / "old" / ".s.zarr.partial-killed"
    partial.mkdir()
    (partial / "owner").write_text(f"{gone.pid} {__import__('socket').gethostname()}\n")
    qg.sample(run, num=8, output=tmp_path / "old" / "s.zarr", seed=1, overwrite=True, compare=20)
    assert not [p.name for p in (tmp_path / "old").iterdir() if p.name.startswith(".")]


def _unshare_works() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    args = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    return subprocess.run(args, capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged user and mount namespaces")
@pytest.mark.parametrize("name", ["s.zarr", "s.h5"])
def test_a_full_disk_or_a_read_only_output_folder_is_one_line(run, tmp_path, name):
    """--output on a tiny tmpfs (mounted in a namespace of its own, without privileges): a full
    device is the same line for both formats, exit 1; a read-only folder is refused before
    sampling (a million samples would take hours), exit 2."""
    import subprocess
    import sys

    from conftest import ROOT, TESTS

    disk = tmp_path / "disk"
    disk.mkdir()

    def on_disk(options, *args):
        script = 'mount -t tmpfs -o "$1" tmpfs "$2" && shift 2 && exec "$@"'
        command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
                   options, str(disk), sys.executable, "-m", "QuantumGravPy", "sample", str(run),
                   "--output", str(disk / name), *map(str, args)]  # fmt: skip
        env = dict(__import__("os").environ, PYTHONPATH=f"{ROOT}:{TESTS}")
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)

    full = on_disk("size=256k", "--num", 400)
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    assert full.stderr.strip() == (
        f"error: no space left on the device writing the samples to {disk / name}: free space "
        "and run again; nothing was written"
    )
    read_only = on_disk("ro", "--num", 1_000_000)
    assert_refused(read_only, f"--output: folder {disk} cannot be written (Read-only file system)")


@pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged user and mount namespaces")
@pytest.mark.parametrize("name", ["sets.zarr", "sets.h5"])
def test_qg_generate_on_a_full_device_is_one_line_for_either_format(config_file, tmp_path, name):
    """HDF5's own driver crashed at close on a full device (tracebacks from h5py's object
    deallocation, exit 0); written through a Python file it is the same line as Zarr's."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, TESTS

    config = config_file(data={"num_graphs": 60, "num_points": [40, 64]})
    disk = tmp_path / "disk"
    disk.mkdir()
    script = 'mount -t tmpfs -o size=128k tmpfs "$1" && shift && exec "$@"'
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
               str(disk), sys.executable, "-m", "QuantumGravPy", "generate", config,
               "--output", str(disk / name)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{TESTS}")
    full = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert full.returncode == 1, full.stderr
    assert full.stderr.strip() == "error: no space left on the device: free space and run again"

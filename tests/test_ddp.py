"""TrainerDDP with real processes (gloo on CPU): exactness, agreement, and failures that end jobs.

Worker functions are top-level so that spawned processes can import them.
"""

import dataclasses
import json
import os
import sys
import time

import psutil
import pytest
import torch
from conftest import run_ranks

import QuantumGravPy as qg
from QuantumGravPy.parallel.distributed import available_cores, free_port

pytestmark = pytest.mark.timeout(180)


def with_mode(config, mode):
    return dataclasses.replace(config, validation=dataclasses.replace(config.validation, mode=mode))


# --- workers (run inside the spawned ranks) ----------------------------------------------------


def evaluate_in_both_modes(rank, world_size, configs):
    results = []
    for config in configs:
        for mode in ("rank0", "sharded"):
            trainer = qg.TrainerDDP(rank, with_mode(config, mode))
            _, val_loader, test_loader = trainer.prepare_dataloaders()
            test, predictions = trainer.evaluation.test(trainer.model, test_loader)
            results.append(
                {
                    "mode": mode,
                    "val": trainer.validate(val_loader),
                    "test": test,
                    "predictions": predictions,
                    "weights": [p.detach().clone() for p in trainer.model.parameters()],
                }
            )
    return results


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events (sys.addaudithook) that change a file or directory, with the paths they name.
_CHANGES = {
    "os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.truncate": 1,
    "os.chmod": 1, "os.utime": 1, "os.symlink": 2, "os.link": 2, "shutil.rmtree": 1,
    "shutil.copyfile": 2, "shutil.move": 2,
}  # fmt: skip


def record_changes_under(root):
    """Every change this process makes under ``root`` from now on, seen by an audit hook: opens
    for writing (Python's ``open``, ``os.open``, and what uses them: logging, savefig, torch.save
    of a file object, numpy), renames, removals, new directories. Returns the growing list."""
    root = os.path.realpath(root)
    changes = []

    def under(path):
        if isinstance(path, int) or path is None:
            return None
        path = os.path.realpath(os.fsdecode(path))
        return path if path == root or path.startswith(root + os.sep) else None

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = (
                any(c in mode for c in "wax+") if isinstance(mode, str) else (flags & _WRITE_FLAGS)
            )
            if writes and under(path):
                changes.append((event, under(path)))
        elif event in _CHANGES:
            for path in args[: _CHANGES[event]]:
                if under(path):
                    changes.append((event, under(path)))

    sys.addaudithook(hook)  # for the life of this rank's process, which ends with the job
    return changes


def train_and_record(rank, world_size, config, config_lr0, root):
    writes = record_changes_under(root)
    trainer = qg.TrainerDDP(rank, config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    shards = []
    for epoch in (0, 1):
        train_loader.sampler.set_epoch(epoch)
        shards.append([train_loader.dataset.indices[i] for i in train_loader.sampler])
    history = trainer.run_training(train_loader, val_loader)
    test = trainer.run_test(test_loader)
    trainer.close()

    stopper = qg.TrainerDDP(rank, config_lr0)
    loaders = stopper.prepare_dataloaders()
    stopped_history = stopper.run_training(loaders[0], loaders[1])
    stopper.close()
    return {
        "shards": shards,
        "train_size": len(train_loader.dataset),
        "train_indices": list(train_loader.dataset.indices),
        "history": history,
        "test": test,
        "stopped_history": stopped_history,
        "stopped_early": stopper.stopped_early,
        "writes": sorted({os.path.relpath(path, root) for _, path in writes}),
        "threads": torch.get_num_threads(),
    }


class FailingTrainer(qg.TrainerDDP):
    def train_epoch(self, loader):
        if self.rank == 1 and self.epoch == 1:
            raise ValueError("boom on rank 1")
        return super().train_epoch(loader)


class SilentTrainer(qg.TrainerDDP):
    def on_epoch_start(self, loader):
        if self.rank == 1 and self.epoch == 1:
            # when it fell silent, for the test to time the rest of the job against
            (self.run_dir.parent / f"{self.run_dir.name}.silent").write_text(str(time.time()))
            time.sleep(3600)  # stops answering, as a hung data loader or a dead GPU would
        super().on_epoch_start(loader)


def train_with(cls, rank, config):
    trainer = cls(rank, config)
    loaders = trainer.prepare_dataloaders()
    return trainer.run_training(loaders[0], loaders[1])


def train_failing(rank, world_size, config):
    return train_with(FailingTrainer, rank, config)


def train_silent(rank, world_size, config):
    return train_with(SilentTrainer, rank, config)


def decision_fails_on_rank0(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    if rank == 0:

        def broken(*args, **kwargs):
            raise ValueError("broken metric on rank 0")

        trainer.early_stopping.step = broken
    loaders = trainer.prepare_dataloaders()
    try:
        trainer.run_training(loaders[0], loaders[1])
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


# --- tests ---------------------------------------------------------------------------------------


@pytest.fixture
def eval_configs(make_config):
    odd = make_config(
        "data.num_graphs=125",
        "data.split=[0.6, 0.2, 0.2]",
        "validation.batch_size=4",
        # every metric of a classification, a graph regression and a node regression task
        "tasks=[{name: dim, target: y, metrics: [accuracy, balanced_accuracy, f1_macro, "
        "f1_weighted, precision_macro, recall_macro, auroc, confusion_matrix]}, "
        "{name: d, type: regression, target: dimension, metrics: [mse, rmse, mae, r2, max_error]}, "
        "{name: time, type: regression, level: node, metrics: [mse, rmse, mae, r2, max_error]}]",
    )
    tiny = make_config("data.num_graphs=40", "data.split=[0.9, 0.05, 0.05]")
    return [odd, tiny]


def sklearn_columns(predictions):
    """The test columns of eval_configs' three tasks, computed by scikit-learn."""
    from sklearn import metrics as skm

    dim = predictions["dim"]
    true, probability = dim["true"].numpy(), dim["predicted"].double().numpy()
    predicted = probability.argmax(1)
    labels = list(range(probability.shape[1]))
    columns = {
        "test_dim_accuracy": skm.accuracy_score(true, predicted),
        "test_dim_balanced_accuracy": skm.balanced_accuracy_score(true, predicted),
        "test_dim_auroc": skm.roc_auc_score(true, probability, multi_class="ovr", labels=labels),
    }
    for name, fn, average in (
        ("f1_macro", skm.f1_score, "macro"),
        ("f1_weighted", skm.f1_score, "weighted"),
        ("precision_macro", skm.precision_score, "macro"),
        ("recall_macro", skm.recall_score, "macro"),
    ):
        columns[f"test_dim_{name}"] = fn(
            true, predicted, average=average, labels=labels, zero_division=0
        )
    for task in ("d", "time"):
        true, predicted = (predictions[task][k].numpy().ravel() for k in ("true", "predicted"))
        mse = skm.mean_squared_error(true, predicted)
        columns |= {
            f"test_{task}_mse": mse,
            f"test_{task}_rmse": mse**0.5,
            f"test_{task}_mae": skm.mean_absolute_error(true, predicted),
            f"test_{task}_r2": skm.r2_score(true, predicted),
            f"test_{task}_max_error": skm.max_error(true, predicted),
        }
    return columns


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_validation_and_test_are_exact_for_any_world_size(eval_configs, world_size):
    """25 graphs (not divisible by 2 or 3) and 2 graphs (fewer than 3 ranks), in both modes."""
    reference = []
    for config in eval_configs:
        trainer = qg.Trainer(config)
        _, val_loader, test_loader = trainer.prepare_dataloaders()
        assert len(val_loader.dataset) in (25, 2)
        tested = trainer.tester.accumulate(trainer.model, test_loader)
        reference.append(
            (
                trainer.validator.evaluate(trainer.model, val_loader),
                tested.compute("test"),
                tested.gathered_predictions(),
                list(trainer.model.parameters()),
            )
        )
    # the single process's test columns are scikit-learn's on its predictions
    _, test, predictions, _ = reference[0]
    for column, value in sklearn_columns(predictions).items():
        assert test[column] == pytest.approx(value, rel=1e-9, abs=1e-12), column
    results = run_ranks(world_size, evaluate_in_both_modes, eval_configs)
    for rank, rank_results in enumerate(results):
        for k, got in enumerate(rank_results):
            val, test, predictions, weights = reference[k // 2]
            # the same initial model as a single process, on every rank
            assert all(torch.equal(a, b) for a, b in zip(got["weights"], weights, strict=True))
            if rank == 0 or got["mode"] == "sharded":  # test predictions, in the set's order
                for task, expected in predictions.items():
                    actual = got["predictions"][task]
                    assert torch.equal(actual["graph"], expected["graph"])
                    assert torch.equal(actual["true"], expected["true"])
                    assert torch.allclose(
                        actual["predicted"].double(), expected["predicted"].double(), atol=1e-6
                    )
            for expected, actual in ((val, got["val"]), (test, got["test"])):
                assert actual.keys() == expected.keys()
                for key in expected:
                    if key.endswith("confusion_matrix"):  # counts: the single-process ones
                        assert actual[key] == expected[key], (got["mode"], key)
                    else:
                        assert actual[key] == pytest.approx(expected[key], rel=1e-6), key


def test_two_ranks_train_on_disjoint_data_agree_and_only_rank0_writes(make_config, tmp_path):
    config = make_config("training.num_epochs=4", "data.num_graphs=121", "training.plots=true")
    config_lr0 = make_config(
        f"training.path={tmp_path / 'lr0'}",
        "training.num_epochs=10",
        "training.optimizer.kwargs={lr: 0.0}",
        "early_stopping.patience=2",
    )
    r0, r1 = run_ranks(2, train_and_record, config, config_lr0, tmp_path)
    train_size = r0["train_size"]
    for epoch in (0, 1):
        a, b = set(r0["shards"][epoch]), set(r1["shards"][epoch])
        assert len(r0["shards"][epoch]) == len(r1["shards"][epoch]) == (train_size + 1) // 2
        assert a | b == set(r0["train_indices"])  # together the ranks see every training graph
        assert len(a & b) <= 1  # one graph repeated to pad an odd set, as DistributedSampler does
    assert r0["shards"][0] != r0["shards"][1]  # set_epoch reshuffles
    assert r0["history"] == r1["history"] and len(r0["history"]) == 4
    assert r0["test"] == r1["test"]
    assert len(r0["stopped_history"]) == len(r1["stopped_history"]) == 3
    assert r0["stopped_early"] and r1["stopped_early"]
    # Rank 1 changes nothing in either run directory; rank 0 writes all of it (so the hook sees
    # every kind of file a run holds).
    assert r1["writes"] == []
    written = {os.path.basename(p) for p in r0["writes"]}
    assert {"best.pt", "last.pt", "history.csv", "summary.json", "config.yaml", "train.log",
            "environment.json", "test_predictions.npz", "curves.png",
            "confusion_matrix.png", "checkpoints"} <= written, written  # fmt: skip
    assert r0["threads"] == max(1, available_cores() // 2)
    summary = json.loads((config.run_dir / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["test_accuracy"] == r0["test"]["test_accuracy"]


def alive_workers():
    """Rank processes still running: spawned interpreters, or processes the fork server forked."""
    me = os.getpid()
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            command = " ".join(p.cmdline())
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if "spawn_main" in command or ("forkserver" in command and p.ppid() != me):
                alive.append(p)
        except psutil.NoSuchProcess:
            continue
    return alive


def test_a_failing_rank_ends_the_job_naming_it(make_config):
    with pytest.raises(qg.WorkerError, match="rank 1 failed: ValueError: boom on rank 1") as info:
        run_ranks(2, train_failing, make_config())
    assert "Traceback" in info.value.traceback and info.value.rank == 1
    assert alive_workers() == []


def test_a_failure_in_rank0s_decision_reaches_the_other_rank_at_once(make_config):
    # The group timeout is far beyond this test's own: the other rank must be told, not time out.
    results = run_ranks(2, decision_fails_on_rank0, make_config(), timeout_s=600)
    assert results == [
        "ValueError: broken metric on rank 0",
        "RankFailedError: rank 0 failed: ValueError: broken metric on rank 0",
    ]


@pytest.mark.timeout(120)
def test_a_silent_rank_ends_the_job_within_the_timeout(make_config, tmp_path):
    expected = r"rank 0: no (answer|gradients) from rank\(s\) 1 within 5 s \(parallel.timeout_s\)"
    for shared_memory in ("true", "false"):  # either way of exchanging gradients gives up
        config = make_config(
            "training.num_epochs=3",
            f"parallel.shared_memory={shared_memory}",
            f"training.path={tmp_path / shared_memory}",
        )
        with pytest.raises(qg.WorkerError, match=expected):
            run_ranks(2, train_silent, config, timeout_s=5)
        ended = time.time()
        silent_at = float((tmp_path / f"{shared_memory}.silent").read_text())
        # rank 0 waited out the timeout (5 s), and the job ended soon after: not at the test's
        # own limit, nor at the process group's default of 30 minutes
        assert 5 <= ended - silent_at < 5 + 15, ended - silent_at
    assert alive_workers() == []


def test_a_fixed_port_in_use_is_named_and_a_chosen_one_is_avoided(make_config, monkeypatch):
    import socket

    from QuantumGravPy.parallel import distributed

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(qg.PortInUseError, match=f"port {port}"):
            qg.spawn(
                evaluate_in_both_modes,
                1,
                [],
                master_port=port,
                backend="gloo",
                start_method="forkserver",
            )
        offered = iter([port, free_port()])
        monkeypatch.setattr(distributed, "free_port", lambda addr="": next(offered))
        assert qg.spawn(
            evaluate_in_both_modes, 1, [], backend="gloo", start_method="forkserver"
        ) == [[]]


def objects_a_collection_walks(rank, world_size):
    import gc

    return len(gc.get_objects()), gc.get_freeze_count()


def test_a_ranks_garbage_collections_skip_the_libraries_it_started_with():
    """A rank's full collections (one as it leaves its process group, others as it trains) walk
    only what the rank made: the half a million objects of torch and its kin, which it
    inherited, are frozen (each walk over them took 0.3 s)."""
    ((walked, frozen),) = run_ranks(1, objects_a_collection_walks)
    assert frozen > 100_000 and walked < frozen / 10, (walked, frozen)


def test_an_unknown_start_method_is_refused_before_any_process_starts():
    with pytest.raises(
        qg.QGError, match="start_method must be one of spawn, forkserver, got 'fork'"
    ):
        qg.spawn(evaluate_in_both_modes, 1, [], start_method="fork")
    assert alive_workers() == []


# --- a job's ranks, started by qg train --------------------------------------------------------


def test_a_user_error_inside_the_ranks_is_one_line(ddp_config_file, capsys):
    from QuantumGravPy.cli import main

    code = main(["train", str(ddp_config_file), "parallel.world_size=2", "training.device=cuda:0"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: rank ") and "training.device: 'cuda:0'" in err[-1]
    assert not any("Traceback" in line for line in err)


# --- samplers in a real process group ----------------------------------------------------------


def agree_on_seed(rank, world_size):
    wrapper = qg.DistributedSamplerWrapper(list(range(10)))  # seed=None: rank 0's, broadcast
    native = qg.DistributedClassBalancedSampler([0, 1] * 5)
    return wrapper.seed, native.seed, wrapper.num_replicas, wrapper.rank


def balanced_training(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    seen = {"labels": [], "indices": []}
    trainer.on_epoch_start(train_loader)
    for batch in train_loader:
        seen["labels"] += batch.y.tolist()
    seen["indices"] = [train_loader.dataset.indices[i] for i in train_loader.sampler]
    history = trainer.run_training(train_loader, val_loader)
    trainer.close()
    return seen, type(train_loader.sampler).__name__, len(history)


def test_ranks_agree_on_a_seed_nobody_chose():
    results = run_ranks(2, agree_on_seed)
    assert results[0][:2] == results[1][:2]
    assert [r[2:] for r in results] == [(2, 0), (2, 1)]  # replicas and rank from the group


def test_class_balanced_training_gives_each_rank_balanced_different_data(make_config):
    config = make_config(
        "data.dataset=user_data.imbalanced_rings",
        "data.dataset_kwargs={num_graphs: 400}",
        "training.sampler=class_balanced",
        "training.num_epochs=2",
    )
    results = run_ranks(2, balanced_training, config)
    for seen, sampler, epochs in results:
        assert sampler == "DistributedClassBalancedSampler" and epochs == 2
        share = sum(seen["labels"]) / len(seen["labels"])  # the minority is 10% of the data
        assert 0.4 < share < 0.6, share
    a, b = (r[0]["indices"] for r in results)
    assert len(a) == len(b) == 140  # 280 training graphs per epoch in total, not 280 per rank
    assert a != b


def custom_sampler_shards(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    sampler = trainer.prepare_dataloaders()[0].sampler
    trainer.close()
    return type(sampler).__name__, list(sampler)


def test_a_custom_sampler_is_wrapped_under_ddp(make_config):
    config = make_config("training.sampler=user_data.ReverseSampler")
    (name0, a), (name1, b) = run_ranks(2, custom_sampler_shards, config)
    assert name0 == name1 == "DistributedSamplerWrapper"
    n = len(a) + len(b)
    merged = [x for pair in zip(a, b, strict=True) for x in pair]
    assert merged == list(range(n - 1, -1, -1))  # the ranks split the custom order between them

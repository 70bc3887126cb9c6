"""``parallel.strategy: invariant``: the same bits on any number of processes, and resuming on another
number; ``training.global_batch_size``; and one line for each setting invariance cannot hold."""

import numpy as np
import pytest
import torch
import yaml
from conftest import assert_refused, run_main, run_ranks, small_raw_config
from resuming import final_state

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.runs import layout as rd

pytestmark = pytest.mark.timeout(300)

# Everything that used to depend on the rank or the number of processes, at once.
INVARIANT = [
    "parallel.strategy=invariant",
    "training.global_batch_size=24",  # 2 micro-batches of 12 ... 12 of 2, for W = 1, 2, 3, 4
    "training.precision=32",
    "model.dropout=0.2",
    "augmentation.preset=moderate",
    "training.sampler=class_balanced",
    "training.ema_decay=0.9",
    "training.accumulate_grad_batches=2",
    "training.num_epochs=3",
    "early_stopping.enabled=false",
    "tasks=[{name: dim, target: y}, {name: d, target: dimension, type: regression}, "
    "{name: time, type: regression, level: node}]",
]


def raw_config(tmp_path, data_root, name, *overrides):
    raw = small_raw_config(tmp_path, data_root)
    return apply_overrides(raw, [*INVARIANT, f"training.path={tmp_path / name}", *overrides])


def everything(run):
    """Every tensor a run ends with (weights, buffers, moving average, optimizer state), its
    history without the epoch's time, and its test predictions."""
    state = final_state(run)
    tensors = {f"model.{k}": v for k, v in state["model"].items()}
    tensors.update({f"ema.{k}": v for k, v in state["ema"]["model"].items()})
    for i, slot in state["optimizer"]["state"].items():
        tensors.update({f"optimizer.{i}.{k}": torch.as_tensor(v) for k, v in slot.items()})
    history = [{k: v for k, v in r.items() if k != "epoch_seconds"} for r in state["history"]]
    with np.load(run / rd.PREDICTIONS) as arrays:
        predictions = {k: arrays[k] for k in arrays.files}
    return tensors, history, predictions


def assert_same_bits(a, b):
    (ta, ha, pa), (tb, hb, pb) = a, b
    assert ta.keys() == tb.keys()
    for key in ta:  # bitwise: torch.equal compares every element exactly
        assert ta[key].dtype == tb[key].dtype and torch.equal(ta[key], tb[key]), key
    assert ha == hb
    assert pa.keys() == pb.keys()
    for key in pa:
        assert pa[key].tobytes() == pb[key].tobytes(), key


def train_ranks(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.run_test(test_loader)
    trainer.close()


def test_one_two_three_and_four_processes_give_the_same_bits(tmp_path, data_root):
    one = config_from_dict(raw_config(tmp_path, data_root, "w1"))
    trainer = qg.Trainer(one)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.run_test(test_loader)
    trainer.close()
    reference = everything(tmp_path / "w1")
    first = qg.load_checkpoint(tmp_path / "w1" / "checkpoints" / "best.pt")
    assert reference[1][-1]["epoch"] == 3 and first["epoch"] >= 1
    for w in (2, 3, 4):
        config = config_from_dict(raw_config(tmp_path, data_root, f"w{w}"))
        run_ranks(w, train_ranks, config, timeout_s=240)
        assert_same_bits(everything(tmp_path / f"w{w}"), reference)
    # the same run without invariance ends elsewhere: the comparison above can fail
    plain = config_from_dict(raw_config(tmp_path, data_root, "plain", "parallel.strategy=ddp"))
    trainer = qg.Trainer(plain)
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    tensors = {f"model.{k}": v for k, v in final_state(tmp_path / "plain")["model"].items()}
    assert any(not torch.equal(v, reference[0][k]) for k, v in tensors.items())


def write_config(tmp_path, data_root, name, *overrides):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path, data_root, name, *overrides)))
    return path


def test_global_batch_size_splits_over_the_processes(tmp_path, data_root):
    raw = apply_overrides(small_raw_config(tmp_path, data_root), ["training.global_batch_size=24"])
    config = config_from_dict(raw)
    assert qg.config.per_process(config, 3).training.batch_size == 8
    assert qg.config.per_process(config, 1).training.batch_size == 24
    with pytest.raises(qg.ConfigError, match="24 graphs do not divide over 5 processes"):
        qg.config.per_process(config, 5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["training.global_batch_size=null"], "parallel.strategy invariant: needs "
         "training.global_batch_size"),
        (["training.global_batch_size=30"], "training.global_batch_size 30 is not a multiple "
         "of parallel.invariant.micro_batches 12"),
        (["model.norm=batch"], "not with model.norm batch"),
        # the old spelling, parallel.invariant: true, with another strategy
        (["parallel.strategy=zero", "parallel.invariant=true"], "parallel.invariant: only "
         "with parallel.strategy ddp (found zero)"),
        (["parallel.strategy=fsdp", "parallel.invariant=true"], "only with parallel.strategy "
         "ddp (found fsdp)"),
        (["augmentation.seeding=per_rank"], "not with augmentation.seeding per_rank"),
        (["validation.mode=sharded"], "needs validation.mode rank0"),
        (["parallel.world_size=5"], "parallel.invariant.micro_batches 12 micro-batches do not "
         "divide over 5 processes"),
    ],
)  # fmt: skip
def test_what_invariance_cannot_hold_is_refused_in_one_line(
    tmp_path, data_root, capsys, overrides, message
):
    path = write_config(tmp_path, data_root, "refused")
    result = run_main(capsys, "train", path, *overrides)
    assert_refused(result, message)
    assert not (tmp_path / "refused").exists()  # refused before anything was written


def test_the_older_spelling_is_read_as_the_strategy_with_a_note(tmp_path, data_root, capsys):
    """``parallel.invariant: true`` and ``parallel.shards`` (before the strategy had a class of
    its own) still mean ``parallel.strategy: invariant`` and
    ``parallel.invariant.micro_batches``, as ``parallel.micro_batches`` (before the strategy had
    settings of its own) does."""
    path = write_config(tmp_path, data_root, "old", "parallel.strategy=ddp")
    raw = yaml.safe_load(path.read_text())
    raw["parallel"] = {**raw.get("parallel", {}), "invariant": True, "shards": 5}
    del raw["parallel"]["strategy"]
    path.write_text(yaml.safe_dump(raw))
    result = run_main(capsys, "train", path)
    # read as the strategy with 5 micro-batches: 24 graphs do not cut into 5; a note for each
    *notes, error = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "global_batch_size 24 is not a multiple of parallel.invariant.micro_batches 5" in error
    assert len(notes) == 2, notes
    assert "parallel.invariant: true is now written parallel.strategy: invariant" in notes[0]
    assert "parallel.shards is now called parallel.invariant.micro_batches" in notes[1]
    both = run_main(capsys, "train", path, "parallel.micro_batches=6")  # two old names of one
    assert_refused(both, "parallel.micro_batches: the old name of parallel.invariant.micro_batches")
    raw["parallel"] = {"strategy": "invariant", "micro_batches": 5}
    path.write_text(yaml.safe_dump(raw))
    result = run_main(capsys, "train", path)
    *notes, error = result.stderr.strip().splitlines()
    assert "global_batch_size 24 is not a multiple of parallel.invariant.micro_batches 5" in error
    assert len(notes) == 1
    assert "note: parallel.micro_batches is now called parallel.invariant.micro_batches" in notes[0]

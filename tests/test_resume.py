"""Exact resuming: full-state checkpoints, --resume, killed jobs, and the refusals around them."""

import json
import os
import shutil
import signal
import subprocess

import pytest
import torch
import yaml
from conftest import TESTS, assert_refused, run_cli, run_main, small_raw_config, start_forked, train
from resuming import assert_same_weights, final_state, kill_config, without_times

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.runs import check_resumable
from QuantumGravPy.runs import layout as rd
from QuantumGravPy.runs.checkpoint import save_checkpoint

# Everything that draws random numbers or carries state across epochs: dropout (torch's RNG),
# augmentation, a cosine schedule, the moving average and early-stopping bookkeeping.
STATEFUL = (
    "model.dropout=0.2",
    "augmentation.preset=mild",
    "training.lr_scheduler={type: torch.optim.lr_scheduler.CosineAnnealingLR, kwargs: {T_max: 6}}",
    "training.ema_decay=0.8",
    "training.num_epochs=6",
    "training.checkpoint_every=1",
)


BEFORE_LAYOUT = TESTS / "fixtures" / "run_before_layout"


def assert_close_floats(a: dict, b: dict, rel: float) -> None:
    """The same keys; floats equal within ``rel``, everything else (counts, matrices) exactly."""
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, float):
            assert value == pytest.approx(b[key], rel=rel, abs=rel * 1e-2), key
        else:
            assert value == b[key], key


def test_a_run_checkpointed_before_the_package_was_split_into_layers_resumes(tmp_path, data_root):
    run = tmp_path / "old"
    shutil.copytree(BEFORE_LAYOUT, run)
    raw = yaml.safe_load((run / "config.yaml").read_text())
    moved = ("data.root=" + str(data_root), "training.num_epochs=4", "log_level=WARNING")
    _, history, metrics = train(
        config_from_dict(apply_overrides(raw, (*moved, f"training.path={tmp_path / 'whole'}")))
    )
    trainer, resumed, resumed_metrics = train(
        config_from_dict(apply_overrides(raw, (*moved, f"training.path={run}"))), resume=True
    )
    assert trainer.resumed_from == run / "checkpoints" / "last.pt"
    # The fixture's two epochs were computed on another machine, whose kernels may round
    # differently: the runs agree to float32 rounding, not to the bit. Differences seen across
    # kernel paths: 6e-8 relative after four epochs; a resume that lost any state (the random
    # generators' draws for dropout and augmentation, the schedule, the moving average) changes
    # the losses by 1e-3 and more.
    assert len(resumed) == 4
    for old, new in zip(without_times(resumed), without_times(history), strict=True):
        # the epochs trained before have the columns of their time (metrics came later)
        assert_close_floats(old, {k: new[k] for k in old}, rel=1e-5)
    assert_close_floats(resumed_metrics, metrics, rel=1e-5)
    # Keys added since (model.type) count as their defaults, so another value is a change.
    other = config_from_dict(
        apply_overrides(
            raw, (*moved, f"training.path={run}", "model={type: user_models.MeanFeatures}")
        )
    )
    with pytest.raises(qg.ConfigError, match="model.type: None -> 'user_models.MeanFeatures'"):
        check_resumable(other, world_size=1, force=False)


# --- the checkpoint ------------------------------------------------------------------------------


def test_a_checkpoint_holds_everything_needed_to_continue(make_config):
    cfg = make_config(*STATEFUL, "training.num_epochs=2", "training.precision=16")
    trainer = qg.Trainer(cfg)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    state = qg.load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")  # weights_only=True
    assert state["epoch"] == 2 and state["sampler_epoch"] == 2
    assert state["global_step"] == trainer.global_step == 2 * len(trainer.prepare_dataloaders()[0])
    assert state["world_size"] == 1 and len(state["config_digest"]) == 16
    assert without_times(state["history"]) == without_times(history)
    assert state["early_stopping"]["epochs_seen"] == 2
    assert state["lr_scheduler"]["last_epoch"] == 2
    assert state["optimizer"]["state"] and state["scaler"]["scale"] > 0
    assert state["ema"]["updates"] == trainer.global_step
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])
    (rng,) = state["rng"]
    assert set(rng) == {"torch", "numpy", "python"}
    assert torch.equal(rng["torch"], torch.get_rng_state())  # as the last epoch left it


def test_resuming_in_process_equals_the_uninterrupted_run(make_config, tmp_path):
    whole = make_config(*STATEFUL, f"training.path={tmp_path / 'whole'}")
    _, history, metrics = train(whole)

    part = make_config(*STATEFUL, f"training.path={tmp_path / 'part'}", "training.num_epochs=4")
    train(part)
    torch.manual_seed(1234)  # whatever happened in between, the checkpoint's states count
    resumed = make_config(*STATEFUL, f"training.path={tmp_path / 'part'}", "log_level=INFO")
    trainer, resumed_history, resumed_metrics = train(resumed, resume=True)
    assert trainer.resumed_from == tmp_path / "part" / "checkpoints" / "last.pt"
    assert without_times(resumed_history) == without_times(history)
    assert resumed_metrics == metrics
    assert_same_weights(
        final_state(tmp_path / "part")["model"], final_state(whole.run_dir)["model"]
    )
    assert without_times(rd.read_history(tmp_path / "part")) == without_times(
        rd.read_history(whole.run_dir)
    )
    assert "resumed from" in (tmp_path / "part" / "train.log").read_text()
    starts = json.loads((tmp_path / "part" / "environment.json").read_text())
    assert [entry["resumed_after_epoch"] for entry in starts] == [None, 4]
    assert starts[1]["torch"] == torch.__version__ and starts[1]["world_size"] == 1


def test_resuming_under_other_package_versions_or_cpu_kernels_is_flagged(make_config):
    cfg = make_config("training.num_epochs=1", "log_level=INFO")
    train(cfg)
    last = cfg.run_dir / "checkpoints" / "last.pt"
    state = qg.load_checkpoint(last)
    now = torch.backends.cpu.get_cpu_capability()
    assert state["environment"]["cpu_capability"] == now
    assert state["environment"]["threads"] == torch.get_num_threads()
    state["environment"]["torch"] = "1.0.0"
    state["environment"]["cpu_capability"] = "VSX"
    save_checkpoint(state, last)
    train(make_config("training.num_epochs=2", "log_level=INFO"), resume=True)
    log = (cfg.run_dir / "train.log").read_text()
    assert "WARNING the checkpoint was written with other versions or CPU kernels " in log
    assert f"(torch 1.0.0 -> {torch.__version__}, cpu_capability VSX -> {now})" in log


def test_history_rows_after_the_checkpoint_are_discarded(make_config):
    cfg = make_config(*STATEFUL, "training.num_epochs=3")
    train(cfg)
    checkpoints = cfg.run_dir / "checkpoints"
    # As if the job had died after epoch 3's rows were written but before its last.pt was.
    (checkpoints / "epoch_0002.pt").replace(checkpoints / "last.pt")
    assert len(rd.read_history(cfg.run_dir)) == 3
    trainer = qg.Trainer(cfg, resume=True)
    trainer.open_run()
    assert [row["epoch"] for row in rd.read_history(cfg.run_dir)] == [1, 2]
    assert trainer.epoch == 2
    trainer.close()
    # the same, asked of a trainer built to start: resume() continues the directory's run
    later = qg.Trainer(cfg)
    assert later.resume() and later.epoch == 2
    later.open_run()  # the directory is continued, not refused as one that holds a run
    assert [row["epoch"] for row in rd.read_history(cfg.run_dir)] == [1, 2]
    later.close()


def test_resume_starts_a_run_that_saved_nothing_yet_and_refuses_lost_checkpoints(make_config):
    cfg = make_config("training.num_epochs=1")
    trainer = qg.Trainer(cfg, resume=True)  # nothing there: a fresh start
    assert trainer.resumed_from is None
    train(cfg, resume=True)
    (cfg.run_dir / "checkpoints" / "last.pt").unlink()
    with pytest.raises(qg.RunDirectoryError, match="holds results .* but no checkpoints/last.pt"):
        qg.Trainer(cfg, resume=True)
    with pytest.raises(qg.ConfigError, match="overwrite=True and resume=True exclude each other"):
        qg.Trainer(cfg, resume=True, overwrite=True)


def test_a_checkpoint_without_resume_state_is_refused_for_resuming(make_config):
    cfg = make_config()
    last = cfg.run_dir / "checkpoints" / "last.pt"
    save_checkpoint({"model": {}, "epoch": 1}, last)
    with pytest.raises(qg.CheckpointError, match="last.pt: written by an older version"):
        qg.Trainer(cfg, resume=True)


def test_a_different_config_is_refused_naming_the_keys_unless_forced(make_config, tmp_path, capsys):
    cfg = make_config("training.num_epochs=1")
    train(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(qg.config.config_to_dict(cfg)))
    changed = run_cli("train", str(path), "--resume", "model.hidden_channels=8", "training.seed=5")
    assert_refused(changed, "model.hidden_channels: 16 -> 8", "training.seed: 0 -> 5", "--force")
    assert len(rd.read_history(cfg.run_dir)) == 1  # nothing was touched

    step = run_main(capsys, "train", path, "--resume", "training.batch_size=8")
    assert_refused(step, "graphs per optimizer step", "training.batch_size=16 keeps it")

    # Run length and output settings may change; the run goes on.
    longer = run_main(capsys, "train", path, "--resume", "training.num_epochs=2", "log_level=INFO")
    assert longer.returncode == 0, longer.stderr
    assert len(rd.read_history(cfg.run_dir)) == 2

    forced = run_main(
        capsys, "train", path, "--resume", "--force", "training.num_epochs=3", "training.seed=5"
    )
    assert forced.returncode == 0, forced.stderr
    assert (
        "resuming with changed settings (--force): training.seed: 0 -> 5"
        in (cfg.run_dir / "train.log").read_text()
    )

    misuse = run_main(capsys, "train", path, "--force")
    assert_refused(misuse, "--force only applies to --resume")


# --- resumed on fewer processes ------------------------------------------------------------------


# The world-size conditions of docs/reproducibility.md, in float64 so that rounding stays far below the tolerance.
INVARIANT = (
    "training.drop_last=true",
    "training.precision=64",
    "augmentation.preset=mild",
    "model.dropout=0.0",
    "model.norm=graph",
)


@pytest.mark.timeout(300)
def test_a_two_process_run_continues_in_one_process_as_it_would_have_gone_on(
    tmp_path, data_root, capsys
):
    """Under the world-size conditions the run goes on as the uninterrupted one, up to the
    rounding of another summation order (docs/reproducibility.md)."""
    config = kill_config(tmp_path, data_root, "shrink", 2)
    first = run_main(capsys, "train", config, *INVARIANT, "training.num_epochs=2")
    assert first.returncode == 0, first.stderr
    # A restart on half the processes keeps the global batch by doubling the per-process one.
    one = ("parallel.world_size=1", "training.batch_size=16", "training.num_epochs=3")
    again = run_main(capsys, "train", config, *INVARIANT, "--resume", *one)
    assert again.returncode == 0, again.stderr
    whole = run_main(
        capsys, "train", config, *INVARIANT, *one, f"training.path={tmp_path / 'whole'}"
    )
    assert whole.returncode == 0, whole.stderr
    run = tmp_path / "shrink"
    log = (run / "train.log").read_text()
    assert "resuming a run trained with 2 process(es) on 1: the trajectory changes" in log
    assert "16 graphs per optimizer step as before" in log
    assert "results depend on the number of processes" not in log
    assert json.loads((run / "summary.json").read_text())["world_size"] == 1

    resumed, uninterrupted = rd.read_history(run), rd.read_history(tmp_path / "whole")
    assert [row["epoch"] for row in resumed] == [1, 2, 3]
    for a, b in zip(resumed, uninterrupted, strict=True):
        for column in ("train_loss", "val_loss", "val_accuracy"):
            assert a[column] == pytest.approx(b[column], rel=0, abs=1e-9), (a["epoch"], column)
    a, b = final_state(run), final_state(tmp_path / "whole")
    assert a["global_step"] == b["global_step"]
    assert_same_weights(a["model"], b["model"], tol=1e-8)
    assert_same_weights(a["ema"]["model"], b["ema"]["model"], tol=1e-8)


class Paused:
    """A training.callbacks object: at its first epoch's end it opens the FIFO ``ready`` (which
    returns once the test opens it too) and waits until the test writes to the FIFO ``go``: the
    run is in the middle of its epochs for as long as the test needs, without a sleep."""

    def __init__(self, ready: str, go: str):
        self.ready, self.go, self.done = ready, go, False

    def on_epoch_end(self, trainer, row):
        if not self.done:
            self.done = True
            with open(self.ready, "w") as f:
                f.write(str(os.getpid()))
            with open(self.go) as f:
                f.read()


def _when_ready(job, ready) -> str:
    """What the job's Paused callback writes to ``ready``, once it does; the job's error if it
    ends first."""
    import threading

    said: list[str] = []
    reader = threading.Thread(target=lambda: said.append(ready.read_text()), daemon=True)
    reader.start()
    while reader.is_alive():
        reader.join(1)
        if reader.is_alive() and job.poll() is not None:
            with open(ready, "w"):  # lets the reader go
                pass
            reader.join()
            raise AssertionError(job.communicate()[1])
    return said[0]


@pytest.mark.timeout(180)
def test_a_run_directory_in_use_is_refused_to_a_second_qg_train_and_a_gone_holder_taken_over(
    tmp_path, data_root, capsys
):
    """A --resume (or --overwrite) started while a run trains in its directory is refused in
    one line naming the process that writes it, before it touches a file; the first run goes
    on undisturbed. Once its process is gone, the lock file it left is taken over."""
    import socket

    raw = small_raw_config(tmp_path, data_root)
    raw["training"]["num_epochs"] = 2
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    assert run_main(capsys, "train", cfg).returncode == 0
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    paused = f"training.callbacks=[{{type: test_resume.Paused, kwargs: {{ready: '{ready}', go: '{go}'}}}}]"
    job = start_forked("train", cfg, "--resume", "--force", "training.num_epochs=3", paused)
    try:
        assert int(_when_ready(job, ready)) == job.pid  # at the end of epoch 3, writing the run
        history = (run / rd.HISTORY).read_text()
        for flags in (["--resume", "--force"], ["--overwrite"]):
            second = run_main(capsys, "train", cfg, *flags, "training.num_epochs=4")
            assert_refused(
                second,
                f"{run} is in use by another run: process {job.pid} on {socket.gethostname()} "
                f"holds its lock ({run / '.qg-run.lock'})",
            )
            assert (run / rd.HISTORY).read_text() == history  # nothing touched
        with open(go, "w") as f:
            f.write("go")
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 0, err
    epochs = [
        json.loads(json.dumps(r.split(",")[0]))
        for r in (run / rd.HISTORY).read_text().splitlines()[1:]
    ]
    assert epochs == ["1", "2", "3"]
    assert (run / ".qg-run.lock").read_text() == ""  # released
    # a lock file left by a process that is gone (killed: the kernel dropped its lock)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (run / ".qg-run.lock").write_text(f"{gone.pid} {socket.gethostname()}\n")
    again = run_main(capsys, "train", cfg, "--resume", "--force", "training.num_epochs=4")
    assert again.returncode == 0, again.stderr

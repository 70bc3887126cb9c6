"""Inside a run (``monitor:``): where each rank's time goes, the gradient norm, non-finite
gradients and the replica checks, with real processes."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import assert_refused, run_cli, run_main, run_ranks

import QuantumGravPy as qg
from QuantumGravPy.training.monitoring.timing import COLUMNS, PARTS


def read_csv(path: Path) -> tuple[list[str], list[dict[str, float]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = [
            {k: float(v) if k != "top_operators" else v for k, v in row.items()} for row in reader
        ]
        return list(reader.fieldnames or []), rows


def parameter_bytes(run: Path) -> int:
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]
    return sum(t.numel() * t.element_size() for t in state.values() if t.is_floating_point())


@pytest.mark.timeout(240)
def test_a_two_process_run_says_where_each_rank_spent_its_time(capsys, config_file, tmp_path):
    # rank 1 reads each graph 20 ms slowly (a user's dataset): a straggler waiting for data
    config = config_file(
        training={"num_epochs": 3, "batch_size": 8, "plots": True},
        parallel={"world_size": 2},
        data={"dataset": "user_data.slow_on_rank_1"},
        model={"num_classes": 2},
    )
    result = run_main(capsys, "train", config)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    header, rows = read_csv(run / "ranks.csv")
    assert header == list(COLUMNS)
    assert [(r["epoch"], r["rank"]) for r in rows] == [(e, r) for e in (1, 2, 3) for r in (0, 1)]
    for row in rows:
        # the parts account for the epoch
        parts = sum(row[f"{p}_s"] for p in PARTS)
        assert abs(parts - row["epoch_s"]) <= 0.1 * row["epoch_s"], row
        assert 0 < row["exchange_exposed_s"] <= row["exchange_s"] + 1e-9, row
        assert row["bytes_exchanged"] == parameter_bytes(run)  # every gradient, once a step
        assert row["graphs_per_s"] > 0 and row["peak_memory_mb"] > 50
    for epoch in (1, 2, 3):
        rank0, rank1 = (r for r in rows if r["epoch"] == epoch)
        # 28 graphs at 20 ms: rank 1 waited for its data; rank 0 waited for rank 1's gradients
        assert rank1["data_s"] > rank0["data_s"] + 0.2
        assert rank0["exchange_exposed_s"] > rank1["exchange_exposed_s"]
    log = (run / "train.log").read_text()
    stragglers = [line for line in log.splitlines() if "straggler: " in line]
    assert len(stragglers) == 3, log
    assert all("rank 1: " in line and "waiting for data" in line for line in stragglers)
    assert (run / "ranks.png").stat().st_size > 10_000
    _, history = read_csv(run / "history.csv")
    for row in history:
        assert 0 < row["grad_norm_mean"] <= row["grad_norm_max"] and row["skipped_steps"] == 0


def test_one_process_records_its_time_and_gradient_norms_and_can_be_quiet(
    capsys, config_file, tmp_path
):
    result = run_main(capsys, "train", config_file())
    assert result.returncode == 0, result.stderr
    _, rows = read_csv(tmp_path / "run" / "ranks.csv")
    assert [(r["epoch"], r["rank"]) for r in rows] == [(1, 0), (2, 0)]
    assert all(r["exchange_s"] == r["bytes_exchanged"] == 0 for r in rows)
    assert "straggler" not in (tmp_path / "run" / "train.log").read_text()

    quiet = config_file(monitor={"timing": False}, training={"path": str(tmp_path / "quiet")})
    assert run_main(capsys, "train", quiet).returncode == 0
    assert not (tmp_path / "quiet" / "ranks.csv").exists()
    assert not (tmp_path / "quiet" / "ranks.png").exists()
    _, history = read_csv(tmp_path / "quiet" / "history.csv")
    assert all(math.isfinite(row["grad_norm_mean"]) for row in history)


def test_one_step_in_eight_is_timed_and_the_parts_still_account_for_the_epoch(make_config):
    """Each timed step marks its four parts (on a GPU, four events in the stream); the steps
    between cost no mark, their time shared out over the parts as the timed steps spent it."""
    from QuantumGravPy.training.monitoring.monitor import TIMED_EVERY

    trainer = qg.Trainer(make_config("training.batch_size=2", "training.num_epochs=1"))
    train, val, _ = trainer.prepare_dataloaders()
    steps = len(train)
    marks = []
    mark = trainer.monitor.clock.mark
    trainer.monitor.clock.mark = lambda: marks.append(1) or mark()
    trainer.run_training(train, val)
    trainer.close()
    timed = -(-steps // TIMED_EVERY)
    # four a timed step, one after each run of steps between, and the epoch's own few
    assert steps >= 40 and len(marks) <= 4 * timed + timed + 1 + 8, (len(marks), steps)
    row = trainer.history[-1]
    _, rows = read_csv(trainer.run_dir / "ranks.csv")
    parts = sum(rows[0][f"{p}_s"] for p in PARTS)
    assert abs(parts - rows[0]["epoch_s"]) <= 0.1 * rows[0]["epoch_s"]
    assert rows[0]["graphs_per_s"] > 0 and row["epoch"] == 1


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "model, monitor, expected",
    [
        # rank 1 changes its bias in step 3; the check every 2 steps catches it after step 4
        (
            "user_models.DriftsOnRank1",
            {"check_replicas_every": 2},
            [
                "the ranks' models differ after step 4: rank 1's parameter linear.bias",
                "monitor.check_replicas_every",
            ],
        ),
        # rank 1's parameter scale gets a NaN gradient in step 3 (its loss stays finite)
        (
            "user_models.NaNGradientOnRank1",
            {},
            [
                "non-finite gradients at step 3 (epoch 1): rank 1 produced them (its loss is "
                "finite), first in parameter scale",
                "monitor.nonfinite: skip",
            ],
        ),
    ],
    ids=["replicas that drift apart", "a NaN gradient"],
)
def test_a_rank_gone_wrong_ends_the_job_in_one_line_naming_rank_and_parameter(
    capsys, config_file, tmp_path, model, monitor, expected
):
    config = config_file(
        model={"type": model},
        training={"batch_size": 8},
        parallel={"world_size": 2},
        monitor=monitor,
    )
    result = run_main(capsys, "train", config)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert all(fragment in line for fragment in expected), line
    assert expected[0] in (tmp_path / "run" / "train.log").read_text()


def train_and_keep_weights(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()
    return history, weights


@pytest.mark.timeout(180)
def test_a_nan_gradient_is_skipped_on_every_rank_alike(make_config):
    config = make_config(
        "model={type: user_models.NaNGradientOnRank1}",
        "monitor.nonfinite=skip",
        "training.num_epochs=2",
    )
    (history0, weights0), (history1, weights1) = run_ranks(2, train_and_keep_weights, config)
    # 42 graphs per rank at 16 a batch: 3 steps an epoch; the third was skipped
    assert [row["skipped_steps"] for row in history0] == [1, 0]
    assert history0 == history1
    assert all(math.isfinite(row["train_loss"]) for row in history0)
    assert weights0.keys() == weights1.keys()
    for name in weights0:
        assert torch.equal(weights0[name], weights1[name]), name


def norms_by_the_definition(rank, world_size, config):
    """Each step's recorded norm, next to the norm of the averaged gradients by its definition
    (per parameter, then over them), over two epochs: DDP lays its buckets out anew after the
    first step."""
    trainer = qg.TrainerDDP(rank, config)
    monitor, params = trainer.monitor, list(trainer.model.parameters())
    recorded, defined = [], []
    checked = monitor.gradients_ok

    def gradients_ok(*args):
        defined.append(float(torch.stack([p.grad.norm() for p in params]).norm()))
        try:
            return checked(*args)
        finally:
            recorded.append(float(monitor.gradients.last_norm))

    monitor.gradients_ok = gradients_ok
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return recorded, defined, trainer.gradient_sync


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared-memory", "gloo"])
def test_the_gradient_norm_under_ddp_is_the_norm_of_the_averaged_gradients(
    make_config, shared_memory
):
    config = make_config("training.num_epochs=2", f"parallel.shared_memory={shared_memory}")
    results = run_ranks(2, norms_by_the_definition, config)
    (recorded, defined, sync), (recorded1, _, _) = results
    assert sync == ("shared memory" if shared_memory else "gloo")
    assert len(recorded) == 6 and recorded == recorded1  # the same bits on both ranks
    assert recorded == pytest.approx(defined, rel=1e-6)


def trace_events(path: Path) -> list[dict]:
    import gzip

    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.mark.timeout(180)
def test_profile_writes_a_trace_per_rank_with_compute_and_exchange_and_a_summary(
    capfd, config_file, tmp_path
):
    config = config_file(parallel={"world_size": 2, "shared_memory": False})
    # in a process of its own, as a job runs it: its ranks' log lines reach its stderr
    result = run_cli("profile", config, "--steps", "5", "log_level=INFO")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "run" / "profile"
    for rank in (0, 1):
        events = trace_events(folder / f"rank{rank}.trace.json.gz")
        names = [e.get("name", "") for e in events]
        assert any(n.startswith("aten::") for n in names)  # compute
        assert any("gloo" in n or "all_reduce" in n for n in names)  # communication
        # the last 3 of the 5 timed steps are recorded: one gradient exchange each
        assert names.count("qg.gradient_exchange") == 3
    # each phase is said as it starts
    for said in ("3 warm-up steps", "5 steps timed, the last 3 recorded", "wrote "):
        assert f"profile: {said}" in result.stderr, result.stderr
    header, rows = read_csv(folder / "summary.csv")
    assert header[:2] == ["rank", "steps"] and [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        assert row["steps"] == 5
        shares = ("compute", "exchange_exposed", "data", "idle")
        assert 0.9 <= sum(row[f"{s}_share"] for s in shares) <= 1.1
    assert "rank 1 busiest operators: " in result.stdout
    assert not (tmp_path / "run" / "history.csv").exists()  # a profile is not a run
    # nothing is overwritten: the folder now holds a profile
    again = run_main(capfd, "profile", config, "--steps", "4", "--output", str(folder))
    assert_refused(again, str(folder), "--output")


@pytest.mark.timeout(180)
def test_a_rank_waiting_on_shared_memory_adds_nothing_to_its_trace(capsys, config_file, tmp_path):
    """The rank that waits for the other's gradients polls shared memory thousands of times a
    step; as torch operations each poll was an event (a 641 MB trace for rank 0 against 117 MB
    for rank 1, and a profiler's overhead that made their times disagree). Now the ranks'
    traces hold the same work."""
    config = config_file(parallel={"world_size": 2, "shared_memory": True})
    assert run_main(capsys, "profile", config, "--steps", "4").returncode == 0
    folder = tmp_path / "run" / "profile"
    inside = []  # the operations recorded within each rank's gradient exchanges
    for rank in (0, 1):
        events = [
            e for e in trace_events(folder / f"rank{rank}.trace.json.gz") if e.get("ph") == "X"
        ]
        spans = [e for e in events if e["name"] == "qg.gradient_exchange"]
        assert len(spans) == 3
        inside.append(sum(
            1 for e in events if e["name"] != "qg.gradient_exchange"
            and any(x["tid"] == e["tid"] and x["ts"] <= e["ts"] <= x["ts"] + x["dur"] for x in spans)
        ))  # fmt: skip
    assert inside[0] == inside[1], inside  # the same reduction on both; waiting adds nothing


def test_profile_refuses_bad_arguments_in_one_line(capsys, config_file, tmp_path):
    config = config_file()
    assert_refused(run_main(capsys, "profile", config, "--steps", "0"), "--steps", "0")
    assert_refused(run_main(capsys, "profile", config, "trainig.num_epochs=3"), "trainig")
    assert run_main(capsys, "train", config).returncode == 0
    line = assert_refused(run_main(capsys, "profile", config), "holds a run", "--output")
    assert str(tmp_path / "run") in line


def test_profile_from_python(make_config, tmp_path):
    folder, rows = qg.profile(make_config(), steps=2, output=str(tmp_path / "p"))
    assert folder == tmp_path / "p" and len(rows) == 1 and rows[0]["steps"] == 2
    assert trace_events(folder / "rank0.trace.json.gz")
    with pytest.raises(qg.RunDirectoryError, match="choose another output or remove it"):
        qg.profile(make_config(), steps=2, output=str(folder))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_parts_are_cuda_event_times_and_memory_is_the_devices(make_config, tmp_path):
    from conftest import train

    from QuantumGravPy.training.monitoring.monitor import Monitor
    from QuantumGravPy.training.monitoring.timing import CudaClock

    trainer, history, _ = train(make_config("training.device=cuda", "training.num_epochs=2"))
    assert isinstance(trainer.monitor, Monitor) and isinstance(trainer.monitor.clock, CudaClock)
    _, rows = read_csv(tmp_path / "run" / "ranks.csv")
    assert len(rows) == 2
    for row in rows:
        parts = sum(row[f"{p}_s"] for p in PARTS)
        assert abs(parts - row["epoch_s"]) <= 0.1 * row["epoch_s"], row
        # torch.cuda.max_memory_allocated: the model, its gradients and a batch at least
        assert 0 < row["peak_memory_mb"] < 2_000
    assert all(math.isfinite(r["grad_norm_mean"]) and r["skipped_steps"] == 0 for r in history)

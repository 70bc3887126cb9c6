"""parallel.strategy: every strategy trains as ddp does, and its checkpoints are plain ones that
any strategy and any number of processes resumes.

The strategies are read from the registry: one added to the package (or by an extension) is
tested here without a line of this file changing; settings of its own take their defaults."""

import csv
import json

import pytest
import torch
from conftest import ROOT, assert_refused, run_main

import QuantumGravPy as qg
from QuantumGravPy.parallel.strategies import STRATEGIES

SHIPPED = ROOT / "configs" / "train_ddp.yaml"
EVERY = STRATEGIES.names()
# 24 graphs per step over the ranks, a multiple of every shipped strategy's cut (invariant's
# 12 micro-batches): the same batches, so the same weights, whatever the strategy
GLOBAL = "training.global_batch_size=24"


def small(tmp_path, data_root, name, *extra):
    return [
        f"data.root={data_root}", "data.num_graphs=160", "data.num_points=[16, 32]",
        "model.hidden_channels=16", "model.num_layers=2", "training.batch_size=8",
        "training.device=cpu", f"training.path={tmp_path / name}", "log_level=INFO", *extra,
    ]  # fmt: skip


def last(run):
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)


def exchanges(run) -> list[tuple[float, float, float]]:
    """Each row of ranks.csv: (exchange_s, exchange_exposed_s, bytes_exchanged)."""
    with open(run / "ranks.csv", newline="") as f:
        return [
            (float(r["exchange_s"]), float(r["exchange_exposed_s"]), float(r["bytes_exchanged"]))
            for r in csv.DictReader(f)
        ]


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("precision, tolerance", [("64", 1e-10), ("32", 1e-5)])
def test_every_strategy_trains_the_shipped_config_as_ddp_does(
    tmp_path, data_root, capsys, precision, tolerance
):
    """After 2 epochs, the same weights and optimizer state (the plain optimizer's, in the
    checkpoint) and the same accuracy; the log and environment.json name the strategy."""
    runs = {}
    for strategy in EVERY:
        args = small(tmp_path, data_root, strategy, "training.num_epochs=2", GLOBAL,
                     f"training.precision={precision}", f"parallel.strategy={strategy}")  # fmt: skip
        result = run_main(capsys, "train", SHIPPED, *args)
        assert result.returncode == 0, result.stderr
        runs[strategy] = tmp_path / strategy
    ddp = last(runs["ddp"])
    for strategy in EVERY:
        other = last(runs[strategy])
        assert f"strategy {strategy}" in (runs[strategy] / "train.log").read_text()
        environment = json.loads((runs[strategy] / "environment.json").read_text())
        assert environment[-1]["strategy"] == strategy
        if STRATEGIES.get(strategy).cuts_batches:
            continue  # batches cut its own way (invariant's fixed micro-batches): other numbers
        assert largest_difference(other["model"], ddp["model"]) <= tolerance, strategy
        states = other["optimizer"]["state"], ddp["optimizer"]["state"]
        assert states[0].keys() == states[1].keys()
        for i in states[1]:
            assert largest_difference(states[0][i], states[1][i]) <= tolerance, (strategy, i)
        accuracy = other["history"][-1]["val_accuracy"]
        assert accuracy == pytest.approx(ddp["history"][-1]["val_accuracy"], abs=0.02)
    for strategy, run in runs.items():
        # every strategy's exchange is timed (fsdp's reduce-scatters too), on every rank
        rows = exchanges(run)
        assert len(rows) == 4 and all(s > 0 and b > 0 for s, _, b in rows), (strategy, rows)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", [name for name in EVERY if name != "ddp"])
def test_a_sharded_checkpoint_resumes_in_one_process_and_is_tested(
    tmp_path, data_root, capsys, strategy
):
    """Checkpoints hold the plain optimizer's state: a 2-rank run of any strategy continues as
    one process (with ddp's numbering of the parameters), saying what the strategy does not do
    there, and `qg test` reads its best.pt."""
    args = small(
        tmp_path, data_root, "run", f"parallel.strategy={strategy}", "training.ema_decay=0.9",
        GLOBAL,
    )  # fmt: skip
    first = run_main(capsys, "train", SHIPPED, *args, "training.num_epochs=2")
    assert first.returncode == 0, first.stderr
    one = ("parallel.world_size=1", "training.num_epochs=3")
    again = run_main(capsys, "train", SHIPPED, *args, *one, "--resume")
    assert again.returncode == 0, again.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "resumed from" in log
    alone = qg.load_config(SHIPPED, [*args, *one])
    for notice in STRATEGIES.get(strategy).notices(alone, 1):
        assert notice in log, notice
    assert [row["epoch"] for row in last(tmp_path / "run")["history"]] == [1, 2, 3]
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    tested = run_main(capsys, "test", SHIPPED, *args, *one, "--checkpoint", best)
    assert tested.returncode == 0, tested.stderr
    assert "test_accuracy" in tested.stdout + tested.stderr


@pytest.mark.parametrize(
    "overrides, fragments",
    [
        (["parallel.strategy=zer0"], ["parallel.strategy", "zero"]),
        # a section of a strategy not chosen would do nothing: refused, naming both
        (
            ["parallel.fsdp.modules=[torch.nn.Linear]"],
            ["parallel.fsdp: the settings of strategy fsdp, but parallel.strategy is ddp"],
        ),
        (["parallel.fdsp.modules=[torch.nn.Linear]"], ["parallel.fdsp: unknown key", "fsdp?"]),
        (
            ["parallel.strategy=fsdp", "parallel.fsdp.units=[torch.nn.Linear]"],
            ["parallel.fsdp.units: unknown key (known here: modules)"],
        ),
        (
            [
                "parallel.strategy=invariant",
                "training.global_batch_size=24",
                "parallel.invariant.micro_batches=0",
            ],
            ["parallel.invariant.micro_batches: expected a positive number, found 0"],
        ),
        (
            ["parallel.strategy=zero", "parallel.zero.x=1"],
            ["parallel.zero: strategy zero has no settings"],
        ),
        (
            ["parallel.strategy=fsdp", "parallel.find_unused_parameters=true"],
            ["parallel.find_unused_parameters", "fsdp"],
        ),
    ],
)
def test_impossible_strategy_settings_are_refused(
    tmp_path, data_root, capsys, overrides, fragments
):
    result = run_main(capsys, "train", SHIPPED, *small(tmp_path, data_root, "x"), *overrides)
    assert_refused(result, *fragments)


def test_fsdp_units_of_a_users_model_are_named_by_class(tmp_path, data_root, capsys):
    """parallel.fsdp.modules: a class the model has no submodule of is refused, naming those
    it has; for the built-in model (sharded per block and head) the key is refused."""
    user = ["model={type: user_models.SmallGCN}", "model.kwargs={hidden: 12}",
            "parallel.strategy=fsdp"]  # fmt: skip
    result = run_main(
        capsys, "train", SHIPPED, *small(tmp_path, data_root, "a"), *user,
        "parallel.fsdp.modules=[torch.nn.LSTM]",
    )  # fmt: skip
    # found when the ranks build the model: after the launcher's preparation, which its
    # log_level INFO reports, the one error line, exit 2
    assert result.returncode == 2 and "Traceback" not in result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: rank ") and ": parallel.fsdp.modules: " in error
    assert "the model has no submodule of class torch.nn.LSTM" in error and "GCNConv" in error
    result = run_main(
        capsys, "train", SHIPPED, *small(tmp_path, data_root, "b"), "parallel.strategy=fsdp",
        "parallel.fsdp.modules=[torch.nn.Linear]",
    )  # fmt: skip
    assert_refused(result, "parallel.fsdp.modules", "built-in model")


@pytest.mark.timeout(300)
def test_a_users_model_sharded_by_its_layers_trains_as_under_ddp(tmp_path, data_root, capsys):
    user = ["model={type: user_models.SmallGCN}", "model.kwargs={hidden: 12}",
            "training.precision=64", "training.num_epochs=2"]  # fmt: skip
    runs = {}
    for name, extra in {
        "ddp": [],
        "fsdp": ["parallel.strategy=fsdp", "parallel.fsdp.modules=[torch_geometric.nn.GCNConv]"],
    }.items():
        result = run_main(
            capsys, "train", SHIPPED, *small(tmp_path, data_root, name), *user, *extra
        )
        assert result.returncode == 0, result.stderr
        runs[name] = last(tmp_path / name)
    assert largest_difference(runs["fsdp"]["model"], runs["ddp"]["model"]) <= 1e-10


def overflow_on_one_rank(rank, world_size):
    """One step of a 2-rank fsdp model whose gradient overflowed on rank 0 only."""
    from torch import nn

    from QuantumGravPy.parallel.strategies.fsdp import FSDPStrategy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    strategy = FSDPStrategy(torch.device("cpu"))
    optimizer = torch.optim.AdamW(strategy.prepare(model), lr=0.01, fused=True)
    scaler = strategy.grad_scaler(enabled=True)
    scaler.scale(model(torch.randn(6, 4)).sum()).backward()
    if rank == 0:
        with torch.no_grad():
            next(model.parameters()).grad.to_local()[0, 0] = float("inf")
    before = strategy.model_state(model)
    scaler.step(optimizer)
    scaler.update()
    after = strategy.model_state(model)
    unchanged = all(torch.equal(before[k], after[k]) for k in before) if rank == 0 else None
    return unchanged, float(scaler.get_scale())


@pytest.mark.timeout(120)
def test_under_fsdp_a_step_that_overflowed_on_one_rank_is_skipped_on_every_rank():
    """Each rank holds part of each gradient; the float16 scaler's overflow check must cover
    them all, and the fused optimizer of the shipped configs must then skip the step."""
    from conftest import run_ranks

    (unchanged, scale0), (_, scale1) = run_ranks(2, overflow_on_one_rank)
    assert unchanged
    assert scale0 == scale1 == 2.0**15  # both halved their scale


def train_on_gpu(rank, world_size, config):
    import QuantumGravPy as qg

    trainer = qg.TrainerDDP(rank, config)
    assert trainer.device == torch.device("cuda", rank)
    train, val, test = trainer.prepare_dataloaders()
    history = trainer.run_training(train, val)
    trainer.run_test(test)
    trainer.close()
    return history[-1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("strategy", ["zero", "fsdp"])
@pytest.mark.parametrize("precision", ["bf16", "16"])
def test_on_gpus_the_strategies_train_with_nccl_and_mixed_precision(
    make_config, strategy, precision
):
    """On every GPU there is (one process each, NCCL), in mixed precision: finite losses that
    fall, and a checkpoint one process reads."""
    from QuantumGravPy.parallel import spawn

    world_size = torch.cuda.device_count()
    config = make_config(
        "training.device=cuda", "parallel.backend=nccl", f"parallel.world_size={world_size}",
        f"parallel.strategy={strategy}", f"training.precision={precision}",
        "training.num_epochs=4",
    )  # fmt: skip
    rows = spawn(train_on_gpu, world_size, config, backend="nccl", timeout_s=300)
    assert all(row["epoch"] == 4 for row in rows)
    assert torch.isfinite(torch.tensor(rows[0]["train_loss"]))
    state = torch.load(config.run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert all(not hasattr(v, "placements") for v in state["model"].values())  # plain tensors


@pytest.mark.timeout(300)
def test_fsdp_trains_in_bfloat16_with_everything_else_on(tmp_path, data_root, capsys):
    """Units computing in bfloat16, recomputed activations, a sharded moving average,
    accumulation and a schedule: the loss falls and the checkpoint holds plain float32."""
    args = small(
        tmp_path, data_root, "bf16", "parallel.strategy=fsdp", "training.precision=bf16",
        "model.activation_checkpointing=true", "training.ema_decay=0.9",
        "training.accumulate_grad_batches=2", "training.num_epochs=4",
        "training.gradient_clip={max_norm: 1.0}",
    )  # fmt: skip
    result = run_main(capsys, "train", SHIPPED, *args)
    assert result.returncode == 0, result.stderr
    state = last(tmp_path / "bf16")
    history = state["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["lr"] < history[0]["lr"]  # the cosine schedule moved
    for weights in (state["model"], state["ema"]["model"]):
        assert all(v.dtype in (torch.float32, torch.int64) for v in weights.values())
        assert all(not hasattr(v, "placements") for v in weights.values())


@pytest.mark.timeout(300)
def test_a_moving_average_switched_on_when_resuming_starts_from_the_sharded_model(
    tmp_path, data_root, capsys
):
    """--force with training.ema_decay added: the average starts from the checkpoint's
    weights on every rank (under fsdp, only rank 0 holds a gathered copy of the model)."""
    args = small(tmp_path, data_root, "run", "parallel.strategy=fsdp", "training.precision=64")
    first = run_main(capsys, "train", SHIPPED, *args, "training.num_epochs=1")
    assert first.returncode == 0, first.stderr
    weights = last(tmp_path / "run")["model"]
    again = run_main(
        capsys, "train", SHIPPED, *args, "training.num_epochs=2", "training.ema_decay=0.999999",
        "--resume", "--force",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    ema = last(tmp_path / "run")["ema"]
    assert ema["updates"] > 0
    # a decay this close to 1 keeps the average within rounding of where it started
    assert largest_difference(ema["model"], weights) < 1e-3

"""qg tune: real studies on tiny data, with pruning, DDP trials, parallel trials, a killed and
resumed study, and every bad input refused in one line."""

from __future__ import annotations

import csv
import itertools
import math
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, assert_refused, run_forked, run_main, small_raw_config
from test_tracking import wandb_records

import QuantumGravPy as qg
from QuantumGravPy.tune import load_space
from QuantumGravPy.tune.storage import filesystem_type, open_storage, redact, warn_if_shared

optuna = pytest.importorskip("optuna")

LR = {"type": "float", "low": 1.0e-5, "high": 3.0e-2, "log": True}


def seeded_lr_space(seed: int) -> dict:
    """The learning rate drawn by a seeded random sampler, trials never pruned."""
    return {
        "training.optimizer.kwargs.lr": LR,
        "objective": {"metric": "val_loss"},
        "pruner": {"type": "none"},
        "sampler": {"type": "random", "seed": seed},
    }


def write_study_files(tmp_path, data_root, space: dict, **training) -> tuple[Path, Path, Path]:
    """(config file, space file, study folder)."""
    raw = small_raw_config(tmp_path, data_root)
    study = tmp_path / "study"
    raw["training"].update(path=str(study), **training)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(space))
    return config, space_file, study


def read_trials(study: Path) -> list[dict[str, str]]:
    with open(study / "trials.csv") as f:
        return list(csv.DictReader(f))


def stored_trials(study: Path, name: str = "test") -> list:
    return stored_trials_in(study / "study.journal", name)


def stored_trials_in(journal: Path, name: str) -> list:
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def test_a_study_prunes_and_its_best_config_trains(tmp_path, data_root, capsys, drawn):
    space = {
        "training.optimizer.kwargs.lr": LR,
        "model.hidden_channels": {"type": "int", "low": 8, "high": 24, "step": 8},
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "pruner": {"type": "median", "n_startup_trials": 2},
        "sampler": {"type": "random", "seed": 0},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=4)
    done = run_main(capsys, "tune", config, space_file, "--trials", "6", "log_level=INFO")
    assert done.returncode == 0, done.stderr
    rows = read_trials(study)
    assert [int(r["number"]) for r in rows] == list(range(6))
    states = [r["state"] for r in rows]
    assert states.count("PRUNED") >= 1 and states.count("COMPLETE") >= 2, rows
    for row, trial in zip(rows, stored_trials(study), strict=True):
        run = Path(row["run_dir"])
        assert run == study / f"trial_{trial.number:04d}"
        history = qg.runs.layout.read_history(run)
        # every epoch reported once, at its number; a pruned trial stopped before the end
        assert sorted(trial.intermediate_values) == [h["epoch"] for h in history]
        assert int(row["epochs"]) == len(history)
        if trial.state.name == "PRUNED":
            assert len(history) < 4
            assert not (run / "test_predictions.npz").exists()
        else:
            assert len(history) == 4
            best = min(h["val_loss"] for h in history)
            assert float(row["objective"]) == pytest.approx(best)
            assert trial.value == pytest.approx(best)
        assert float(row["training.optimizer.kwargs.lr"]) == pytest.approx(
            trial.params["training.optimizer.kwargs.lr"]
        )
    for name in ("optimization_history.png", "objective_vs_params.png"):
        assert (study / name).read_bytes()[:4] == b"\x89PNG", name
    # three finished trials, all with 16 hidden channels: too few to rank parameters, said once
    assert not (study / "param_importances.png").exists()
    log = (study / "tune.log").read_text()
    assert log.count("param_importances.png not drawn: 1 parameter(s) took different values") == 1
    # the history shows every finished trial at its number and objective, and the best so far
    finished = [(t.number, t.value) for t in stored_trials(study) if t.state.name == "COMPLETE"]
    ax = drawn.figure("optimization_history.png").axes[0]
    points = ax.collections[0].get_offsets()
    assert list(points[:, 0]) == [n for n, _ in finished]
    assert list(points[:, 1]) == pytest.approx([v for _, v in finished])
    # pruned trials too, at the last value they reported
    pruned = [
        (t.number, t.intermediate_values[max(t.intermediate_values)])
        for t in stored_trials(study)
        if t.state.name == "PRUNED"
    ]
    crosses = ax.collections[1].get_offsets()
    assert list(crosses[:, 0]) == [n for n, _ in pruned]
    assert list(crosses[:, 1]) == pytest.approx([v for _, v in pruned])
    line = ax.lines[0]  # at every trial number, the best finished trial up to it
    assert list(line.get_xdata()) == list(range(6))
    best = [min(v for k, v in finished if k <= n) for n in range(6)]  # trial 0 is a startup one
    assert list(line.get_ydata()) == pytest.approx(best)
    ticks = [t for t in ax.get_xticks() if 0 <= t <= 5]
    assert ticks and all(t == int(t) for t in ticks)  # trials are counted in whole numbers
    # objective against each parameter: the learning rate on a log axis, every trial visible
    panels = {ax.get_xlabel(): ax for ax in drawn.figure("objective_vs_params.png").axes}
    lr, hidden = panels["training.optimizer.kwargs.lr"], panels["model.hidden_channels"]
    assert lr.get_xscale() == "log" and hidden.get_xscale() == "linear"
    dots = lr.collections[0]
    assert len(dots.get_offsets()) == len(finished)
    edges = dots.get_edgecolors()
    assert len(edges) and all(tuple(e[:3]) == (0.0, 0.0, 0.0) for e in edges)  # outlined
    first = dots.to_rgba(dots.get_array())[0]  # trial 0's face: dark enough to see on grey
    assert sum(first[:3]) / 3 < 0.6
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    best_row = min(complete, key=lambda r: float(r["objective"]))
    best = qg.load_config(study / "best.yaml")
    assert best.training.path == str(study / "best")
    assert best.training.optimizer.kwargs["lr"] == pytest.approx(
        float(best_row["training.optimizer.kwargs.lr"])
    )
    assert best.model.hidden_channels == int(best_row["model.hidden_channels"])
    trained = run_main(capsys, "train", study / "best.yaml", "training.num_epochs=1")
    assert trained.returncode == 0, trained.stderr
    assert (study / "best" / "summary.json").exists()


def test_impossible_trials_are_recorded_as_failed_and_the_study_goes_on(
    tmp_path, data_root, capsys
):
    # AdamW takes no momentum: a config the schema accepts, refused when the trial builds it.
    space = {
        "training.optimizer.type": {
            "type": "categorical",
            "choices": ["torch.optim.AdamW", "torch.optim.SGD"],
        },
        "training.optimizer.kwargs.momentum": {"type": "float", "low": 0.5, "high": 0.9},
        "objective": {"metric": "val_accuracy"},
        "pruner": {"type": "none"},
        "sampler": {"type": "random", "seed": 3},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=1)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    wandb = ["tracking.wandb=qg-tests", "tracking.wandb_mode=offline"]
    done = run_main(
        capsys, "tune", config, space_file, "--trials", "4", f"tracking.mlflow={uri}", *wandb
    )
    assert done.returncode == 0, done.stderr
    rows = read_trials(study)
    assert len(rows) == 4
    # each trial that trained is a run of its own in MLflow, tagged with its number
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("test").experiment_id
    runs = client.search_runs([experiment])
    trained = [r for r in rows if r["state"] == "COMPLETE"]
    assert sorted(r.data.tags["trial"] for r in runs) == sorted(r["number"] for r in trained)
    assert {r.data.tags["study"] for r in runs} == {"test"}
    assert {r.info.run_name for r in runs} == {Path(r["run_dir"]).name for r in trained}
    # and in W&B, grouped by the study and named by trial
    for row in trained:
        (started,) = wandb_records(Path(row["run_dir"]), "run")
        assert started.run_group == "test" and started.job_type == "trial"
        assert started.display_name == f"test trial {row['number']}"
    for row in rows:
        if row["training.optimizer.type"] == "torch.optim.AdamW":
            assert row["state"] == "FAIL"
            assert "training.optimizer.kwargs" in row["error"] and "momentum" in row["error"]
        else:
            assert row["state"] == "COMPLETE" and row["error"] == ""
    assert {r["state"] for r in rows} == {"FAIL", "COMPLETE"}
    # the objective was maximised: best.yaml holds the most accurate trial
    best = max((r for r in rows if r["state"] == "COMPLETE"), key=lambda r: float(r["objective"]))
    assert str(qg.load_config(study / "best.yaml").training.optimizer.kwargs["momentum"]) == str(
        float(best["training.optimizer.kwargs.momentum"])
    )


@pytest.mark.timeout(240)
def test_ddp_trials_are_pruned_on_every_rank_and_run_two_at_a_time(tmp_path, data_root, capsys):
    space = {
        "training.optimizer.kwargs.lr": LR,
        "objective": {"metric": "val_loss"},
        "pruner": {"type": "median", "n_startup_trials": 1},
        "sampler": {"type": "random", "seed": 1},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=3)
    args = ["--trials", "4", "--parallel", "2", "parallel.world_size=2"]
    done = run_main(capsys, "tune", config, space_file, *args)
    assert done.returncode == 0, done.stderr
    rows = read_trials(study)
    assert [int(r["number"]) for r in rows] == list(range(4))
    assert any(r["state"] == "PRUNED" for r in rows), rows
    assert all(r["state"] in ("COMPLETE", "PRUNED") for r in rows), rows
    trials = stored_trials(study)
    for trial in trials:
        summary = yaml.safe_load((study / f"trial_{trial.number:04d}" / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["pruned"] == (trial.state.name == "PRUNED")
    # two at a time: some trial started before another had finished
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans))


def main_thread_waits_for_slots(main: int) -> bool:
    """Whether the main thread is inside the study's wait for its slots right now."""
    frame = sys._current_frames().get(main)
    while frame is not None:
        if frame.f_code.co_name == "wait_for_slots":
            return True
        frame = frame.f_back
    return False


def until(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.002)


@pytest.mark.timeout(30)
def test_ctrl_c_waits_until_every_parallel_trial_is_recorded(monkeypatch):
    """A Ctrl-C that lands while the study waits for its slots, and a second one while it waits
    for slot 0 after slot 1 has recorded its trial, must not let it stop waiting: the study ends
    only once slot 0 has recorded its trial too. Each interrupt lands at that point, not at a
    time: the slots send them once they see the main thread waiting."""
    from QuantumGravPy.tune.study import Tuner

    tuner = Tuner.__new__(Tuner)  # only what running the slots needs
    tuner.parallel, tuner.stopping = 2, False
    recorded, both_running, left = [], threading.Barrier(2), threading.Event()
    main, interrupts = threading.main_thread().ident, []

    def ctrl_c(signum, frame):  # Python's own handler, counting
        interrupts.append(signum)
        raise KeyboardInterrupt

    def one_trial() -> bool:  # a trial that ends with the study, as its processes do
        slot = threading.current_thread().name
        both_running.wait()
        if slot.endswith("1"):
            until(lambda: main_thread_waits_for_slots(main))
            signal.pthread_kill(main, signal.SIGINT)
        until(lambda: tuner.stopping)  # the study heard the first Ctrl-C
        if slot.endswith("0"):  # slot 0 records last, with a second Ctrl-C before it does
            until(lambda: recorded == ["trial slot 1"] and main_thread_waits_for_slots(main))
            signal.pthread_kill(main, signal.SIGINT)
            until(lambda: len(interrupts) == 2)
            until(lambda: main_thread_waits_for_slots(main) or left.is_set())
        recorded.append(slot)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner, "_one_trial", one_trial)
    previous = signal.signal(signal.SIGINT, ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            tuner._run_slots()
        when_done = list(recorded)
    finally:
        left.set()
        signal.signal(signal.SIGINT, previous)
    assert len(interrupts) == 2
    assert when_done == ["trial slot 1", "trial slot 0"]  # both, before the study went on


BAD_SPACES = [
    (
        {"trainig.batch_size": {"type": "int", "low": 8, "high": 16}},
        "trainig.batch_size: unknown config key 'trainig'",
    ),
    (
        {"model.hidden_channel": {"type": "int", "low": 8, "high": 16}},
        "did you mean model.hidden_channels",
    ),
    (
        {"model.hidden_channels": {"type": "int", "low": 16, "high": 16}},
        "model.hidden_channels: low must be below high",
    ),
    (
        {"training.optimizer.kwargs.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}},
        "training.optimizer.kwargs.lr: a log scale needs low > 0",
    ),
    (
        {"model.dropout": {"type": "float", "low": 0.1, "high": 1.5}},
        "model.dropout: the config refuses its high 1.5",
    ),
    (
        {"model.norm": {"type": "categorical", "choices": ["graph", "bogus"]}},
        "model.norm: the config refuses its choice 'bogus'",
    ),
    (
        {"model.hidden_channels": {"type": "int", "low": 8, "high": 16, "stepp": 2}},
        "model.hidden_channels.stepp: unknown key",
    ),
    ({"model": {"type": "categorical", "choices": [1]}}, "model: is a section"),
    (
        {"objective": {"metric": "val_los"}},
        "objective.metric: 'val_los' is not a validation column",
    ),
    (
        {"objective": {"metric": "train_loss"}},
        "objective.metric: 'train_loss' is not a validation column",
    ),
    (
        {"objective": {"metric": "val_loss", "direction": "maximize"}},
        "objective.direction: val_loss improves towards min",
    ),
    ({"pruner": {"type": "medain"}}, "pruner.type: expected one of median"),
    (
        {"pruner": {"type": "median", "patience": 3}},
        "pruner.patience: not an argument of the median pruner",
    ),
    ({"sampler": {"type": "tpe", "seed": "x"}}, None),
]


@pytest.mark.parametrize("change, message", BAD_SPACES)
def test_a_bad_search_space_is_one_line_naming_the_key(
    tmp_path, data_root, capsys, change, message
):
    space = {
        "model.hidden_channels": {"type": "int", "low": 8, "high": 16},
        "objective": {"metric": "val_loss"},
    }
    if not {"objective", "pruner", "sampler"} & set(change):
        del space["model.hidden_channels"]  # the parameter under test instead
    space.update(change)
    config, space_file, study = write_study_files(tmp_path, data_root, space)
    done = run_main(capsys, "tune", config, space_file, "--trials", "2")
    line = assert_refused(done, *([message] if message is not None else []))
    assert line.startswith(f"error: {space_file}: ")
    assert not any(study.glob("trial_*"))  # refused before any trial


def test_bad_storage_trials_and_reuse_of_a_study_are_refused(tmp_path, data_root, capsys):
    space = {
        "model.hidden_channels": {"type": "int", "low": 8, "high": 16},
        "objective": {"metric": "val_loss"},
        "pruner": {"type": "none"},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=1)
    cases = [
        (
            ["--storage", "sqlite:////no/such/folder/study.db"],
            "--storage sqlite:////no/such/folder/study.db: cannot open the study storage",
        ),
        (["--storage", str(tmp_path / "missing" / "study.journal")], "the folder"),
        (["--parallel", "0"], "--parallel: expected a positive number, found 0"),
        (["--trials", "0"], "--trials: expected a positive number, found 0"),
        (["--stale-after", "0"], "--stale-after: expected a positive number, found 0.0"),
    ]
    for extra, message in cases:
        args = ["tune", config, space_file, "--trials", "1", *extra]
        done = run_main(capsys, *args)
        assert_refused(done, message)
        assert "secret" not in done.stderr
    # a database server that does not answer is an outage, not a mistake (exit 1), its
    # password hidden
    down = ["--storage", "postgresql://user:secret@127.0.0.1:1/db"]
    done = run_main(capsys, "tune", config, space_file, "--trials", "1", *down)
    assert done.returncode == 1 and "secret" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "error: --storage postgresql://user:***@127.0.0.1:1/db: the study's database server "
        "cannot be reached"
    ), done.stderr
    # a database URL that opens: the study lives there, under its --study name
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    done = run_main(capsys, "tune", config, space_file, "--trials", "1", "--storage", url,
                    "--study", "lr-scan", "training.path=" + str(tmp_path / "in-db"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (trial,) = optuna.load_study(study_name="lr-scan", storage=url).trials
    assert trial.state.name == "COMPLETE" and not (tmp_path / "in-db" / "study.journal").exists()
    assert run_main(capsys, "tune", config, space_file, "--trials", "1").returncode == 0
    again = run_main(capsys, "tune", config, space_file, "--trials", "1")
    assert_refused(again, "already has 1 trials: continue it with --resume")
    # a folder holding an ordinary run is not a study
    run = run_main(
        capsys, "tune", config, space_file, "--trials", "1", f"training.path={study / 'trial_0000'}"
    )
    assert_refused(run, "holds a training run, not a study")


def test_the_command_line_shows_no_traceback(tmp_path, data_root):
    space = {
        "model.hidden_channels": {"type": "int", "low": 32, "high": 16},
        "objective": {"metric": "val_loss"},
    }
    config, space_file, _ = write_study_files(tmp_path, data_root, space)
    done = run_forked("tune", config, space_file, "--trials", "2")
    line = assert_refused(done)
    assert line == (
        f"error: {space_file}: model.hidden_channels: low must be below high, found low 32, high 16"
    )


def test_sqlite_on_a_network_file_system_is_warned_about(caplog):
    mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/home /home nfs4 rw 0 0\nfs /scratch lustre rw 0 0\n"
    assert filesystem_type(Path("/home/alice/study.db"), mounts) == "nfs4"
    assert filesystem_type(Path("/tmp/study.db"), mounts) == "ext4"
    assert warn_if_shared("sqlite:////scratch/me/study.db", mounts)
    assert "lustre" in caplog.text and "journal" in caplog.text
    assert not warn_if_shared("sqlite:////tmp/study.db", mounts)
    assert redact("postgresql://me:pw@host/db") == "postgresql://me:***@host/db"


def test_without_optuna_the_error_names_the_extra(tmp_path, data_root, capsys, monkeypatch):
    space = {"model.hidden_channels": {"type": "int", "low": 8, "high": 16}}
    config, space_file, _ = write_study_files(tmp_path, data_root, space)
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    done = run_main(capsys, "tune", config, space_file, "--trials", "1")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: qg tune needs the 'tune' extra (Optuna): pip install 'QuantumGravPy[tune]'"
    )


def test_the_shipped_search_space_fits_the_shipped_configs():
    from QuantumGravPy.tune import load_space

    for name in ("train.yaml", "train_ddp.yaml"):
        config = qg.load_config(ROOT / "configs" / name)
        space = load_space(ROOT / "configs" / "search_space.yaml", config)
        assert "model.hidden_channels" in [p.key for p in space.params]
        assert (space.metric, space.direction) == ("val_loss", "minimize")


# --- the cluster recipe: several workers of one study ------------------------------------------


def test_jobs_opening_a_new_database_at_once_all_open_it(postgres):
    """Optuna's tables are created by whichever job comes first; the others, which raced it,
    wait and join (without that, most of six such jobs failed on a unique-key violation)."""
    import threading

    for _ in range(3):
        url, errors = postgres(), []
        start = threading.Barrier(6)

        def job(url=url, errors=errors, start=start):
            start.wait()
            try:
                open_storage(url)
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=job) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        optuna.create_study(study_name="s", storage=url)  # the tables are whole


def test_a_database_url_without_its_driver_names_the_extra(postgres, monkeypatch):
    url = postgres()
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(qg.ConfigError) as info:
        open_storage(url)
    assert "needs the Python package 'psycopg'" in str(info.value)
    assert "pip install 'QuantumGravPy[tune]'" in str(info.value)


def test_a_trial_asked_for_past_n_by_a_second_job_at_once_is_surplus(
    tmp_path, data_root, monkeypatch
):
    """Two jobs start at once: both find no study, one creates it and the other continues it.
    Both counted N - 1 trials and ask at the same moment: the storage numbers the trials, and
    the one after N counted ones is failed at once, shown and counted nowhere."""
    from QuantumGravPy.tune import load_space
    from QuantumGravPy.tune.results import counted, write_outputs
    from QuantumGravPy.tune.study import Tuner

    space = {"training.optimizer.kwargs.lr": LR, "objective": {"metric": "val_loss"}}
    config, space_file, study = write_study_files(tmp_path, data_root, space)
    base = qg.load_config(config)
    first = Tuner(base, load_space(space_file, base), trials=1, resume=True)
    # the second looked for the study just before the first created it
    monkeypatch.setattr(optuna, "get_all_study_summaries", lambda storage: [])
    second = Tuner(base, load_space(space_file, base), trials=1, resume=True)
    assert second.study._study_id == first.study._study_id
    asked = [job.study.ask() for job in (first, second)]  # both before either checks
    assert [first._surplus(asked[0]), second._surplus(asked[1])] == [False, True]
    trials = stored_trials(study)
    assert [t.state.name for t in trials] == ["RUNNING", "FAIL"]
    assert [counted(t) for t in trials] == [True, False]
    write_outputs(first.study, first.space, study)
    assert [int(r["number"]) for r in read_trials(study)] == [0]


def test_importances_rank_only_the_parameters_that_varied_among_enough_trials(tmp_path, drawn):
    """One bar per parameter that took different values among the finished trials, and only
    once there are three finished trials for each of them; before that, the reason."""
    import optuna

    from QuantumGravPy.tune.results import draw_plots
    from QuantumGravPy.tune.space_file import parse_space

    base = qg.config.config_from_dict(small_raw_config(tmp_path, tmp_path / "data"))
    space = parse_space(
        {
            "training.optimizer.kwargs.lr": LR,
            "model.hidden_channels": {"type": "int", "low": 8, "high": 24, "step": 8},
            "model.num_layers": {"type": "int", "low": 1, "high": 3},
            "objective": {"metric": "val_loss", "direction": "minimize"},
        },
        base,
    )
    distributions = {
        "training.optimizer.kwargs.lr": optuna.distributions.FloatDistribution(
            1e-5, 3e-2, log=True
        ),
        "model.hidden_channels": optuna.distributions.IntDistribution(8, 24, step=8),
        "model.num_layers": optuna.distributions.IntDistribution(1, 3),
    }
    study = optuna.create_study()
    rng = np.random.default_rng(0)

    def add(count: int) -> None:
        for _ in range(count):
            lr, hidden = float(10 ** rng.uniform(-4.5, -2)), int(rng.choice([8, 16, 24]))
            params = {"training.optimizer.kwargs.lr": lr, "model.hidden_channels": hidden,
                      "model.num_layers": 2}  # fmt: skip
            value = abs(math.log10(lr) + 2.5) + hidden / 100
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions=distributions, value=value))  # fmt: skip

    add(5)  # two parameters varied: six trials needed
    why = draw_plots(study, tmp_path, space)
    assert not (tmp_path / "param_importances.png").exists()
    assert why.startswith("param_importances.png not drawn: 2 parameter(s)") and "(6 here)" in why
    add(1)
    assert draw_plots(study, tmp_path, space) is None
    bars = drawn.figure("param_importances.png").axes[0]
    labels = {t.get_text() for t in bars.get_yticklabels()}
    assert labels == {"training.optimizer.kwargs.lr", "model.hidden_channels"}  # not num_layers


def test_a_grid_search_tries_every_combination_once(tmp_path, data_root, capsys):
    """sampler grid: the parameters' listed values (choices, or low to high in steps), each
    combination one trial, also with two trials at a time; more trials than combinations, or a
    range with no list of values, is refused naming the key."""
    space = {
        "model.hidden_channels": {"type": "int", "low": 8, "high": 16, "step": 8},
        "training.optimizer.kwargs.lr": {"type": "categorical", "choices": [0.01, 0.001]},
        "objective": {"metric": "val_loss"},
        "pruner": {"type": "none"},
        "sampler": {"type": "grid", "seed": 0},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=1)
    too_many = run_main(capsys, "tune", config, space_file, "--trials", "5")
    assert_refused(too_many, "--trials: 5 trials, but the grid has 4 combinations (2 x 2)")
    done = run_main(capsys, "tune", config, space_file, "--trials", "4", "--parallel", "2")
    assert done.returncode == 0, done.stderr
    rows = read_trials(study)
    tried = sorted((int(r["model.hidden_channels"]), float(r["training.optimizer.kwargs.lr"]))
                   for r in rows)  # fmt: skip
    assert tried == [(8, 0.001), (8, 0.01), (16, 0.001), (16, 0.01)]
    base = qg.load_config(config)
    for spec, message in (
        ({"type": "float", "low": 0.1, "high": 0.5}, "a float needs a step to be searched"),
        ({"type": "float", "low": 0.1, "high": 0.5, "log": True}, "a log scale has no grid"),
    ):
        wrong = {**space, "model.dropout": spec}
        with pytest.raises(qg.ConfigError, match=f"model.dropout: {message}"):
            load_space(wrong, base)


def test_a_grid_too_large_to_list_is_refused_before_it_is_listed(tmp_path, data_root, capsys):
    """A grid of 2 x 10^12 combinations: counted, not listed (listing it is a MemoryError),
    and refused naming each parameter's count; nothing is written."""
    space = {
        "model.hidden_channels": {"type": "int", "low": 1, "high": 10**12},
        "training.optimizer.kwargs.lr": {"type": "categorical", "choices": [0.01, 0.001]},
        "objective": {"metric": "val_loss"},
        "sampler": {"type": "grid"},
    }
    config, space_file, study = write_study_files(tmp_path, data_root, space, num_epochs=1)
    refused = run_main(capsys, "tune", config, space_file, "--trials", "2")
    assert_refused(
        refused,
        str(space_file),
        "the grid has 2,000,000,000,000 combinations (model.hidden_channels "
        "(1,000,000,000,000) x training.optimizer.kwargs.lr (2)), more than the 100,000",
    )
    assert not study.exists()


@pytest.mark.timeout(60)
def test_a_hostile_space_file_is_refused_as_a_config_is(tmp_path, data_root, capsys):
    """The search space file is read within a config's limits: a billion-laughs file (9^9
    values if expanded) and one nested 330 levels are each one line naming the file."""
    config, space_file, study = write_study_files(tmp_path, data_root, seeded_lr_space(0))
    laughs = ['&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"&{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    # one choice holding them all: the refusal of a choice that is a list would print it
    bomb = "model.hidden_channels: {type: categorical, choices: [[" + ", ".join(laughs) + "]]}"
    deep = "model.kwargs.deep: " + "{a: " * 330 + "1" + "}" * 330
    for body, message in ((bomb, "100,000 values"), (deep, "64 levels")):
        space_file.write_text(yaml.safe_dump(seeded_lr_space(0)) + body + "\n")
        refused = run_main(capsys, "tune", config, space_file, "--trials", "2")
        assert_refused(refused, str(space_file), message)
    assert not study.exists()


def test_a_journal_record_cut_short_is_dropped_by_the_resume_the_error_suggests(
    tmp_path, data_root, capsys
):
    """A full device (or a kill) in the middle of a write to the journal cuts its last record
    short; ``--resume`` drops it with a warning, the trial it recorded runs again, and the
    journal reads whole (before, the resumed study's next record went onto the cut line and
    every later reading failed with a JSONDecodeError)."""
    config, space_file, study = write_study_files(
        tmp_path, data_root, seeded_lr_space(2), num_epochs=1
    )
    # a job of its own, gone when resumed (as the one the full device stopped)
    assert run_forked("tune", config, space_file, "--trials", "1").returncode == 0
    journal = study / "study.journal"
    data = journal.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    journal.write_bytes(data[: last + (len(data) - last) // 2])  # the last record cut in half
    done = run_main(capsys, "tune", config, space_file, "--trials", "2", "--resume")
    assert done.returncode == 0, done.stderr
    assert "study.journal: dropped its last record, cut short" in done.stderr
    trials = stored_trials(study)  # Optuna's own reader: every line a whole record
    counted = [t for t in trials if not t.user_attrs.get("interrupted")]
    assert len(counted) == 2 and all(t.state.name == "COMPLETE" for t in counted)
    again = run_main(capsys, "tune", config, space_file, "--trials", "2", "--resume")
    assert again.returncode == 0 and "dropped" not in again.stderr, again.stderr
    assert len(stored_trials(study)) == len(trials)

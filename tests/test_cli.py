"""The command line: what a user sees on success and on every kind of mistake."""

import json
from importlib.metadata import entry_points

import pytest
from conftest import assert_refused, run_cli, run_main

from QuantumGravPy.cli import main


def test_train_then_test_through_the_real_command(config_file, tmp_path, capsys):
    cfg = config_file()
    result = run_cli("train", cfg)
    assert result.returncode == 0, result.stderr
    assert "test_accuracy" in result.stdout and str(tmp_path / "run") in result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    checkpoint = tmp_path / "run" / "checkpoints" / "best.pt"
    result = run_main(capsys, "test", cfg, "--checkpoint", str(checkpoint))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["test_accuracy"] == summary["test_accuracy"]
    # a second train into the same directory is refused, and the first run is untouched
    before = (tmp_path / "run" / "history.csv").read_text()
    result = run_main(capsys, "train", cfg, "training.num_epochs=1")
    assert_refused(result, str(tmp_path / "run"), "--overwrite")
    assert (tmp_path / "run" / "history.csv").read_text() == before


def test_a_bad_config_key_is_one_line_naming_it(config_file):
    result = run_cli("train", config_file(training={"batch_size": -4}))  # as a user sees it
    assert_refused(result, "training.batch_size", "positive", "-4")


def test_debug_shows_the_traceback(config_file, capsys):
    result = run_main(
        capsys, "train", config_file(), "model.conv=torch_geometric.nn.NoConv", "--debug"
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "model.conv" in result.stderr


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["train", "missing.yaml"], ["config file not found", "missing.yaml"]),
        (["train", "{cfg}", "training.batch_size"], ["expected key.path=value"]),
        (["train", "{cfg}", "training.nope=3"], ["training.nope: unknown key"]),
        (["generate", "{cfg}", "data.split=[1, 0, 0, 0]"], ["data.split"]),
        (["test", "{cfg}", "--checkpoint", "nowhere.pt"], ["checkpoint not found", "nowhere.pt"]),
        (["test", "{cfg}", "--checkpoint", "{junk}"], ["junk.pt", "corrupt or truncated"]),
    ],
)
def test_user_errors_exit_2_with_one_line(config_file, tmp_path, capsys, argv, fragments):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"PK\x03\x04 definitely not a zip")
    argv = [a.format(cfg=config_file(), junk=junk) for a in argv]
    assert_refused(run_main(capsys, *argv), *fragments)


def test_a_checkpoint_of_another_model_is_refused_by_test(config_file, tmp_path, capsys):
    cfg = config_file()
    assert main(["train", cfg]) == 0
    checkpoint = str(tmp_path / "run" / "checkpoints" / "last.pt")
    refused = run_main(capsys, "test", cfg, "--checkpoint", checkpoint, "model.hidden_channels=12")
    assert_refused(refused, "does not fit the configured model")


def test_generate_builds_the_cache(config_file, tmp_path, capsys):
    cfg = config_file(data={"root": str(tmp_path / "cache"), "num_graphs": 12})
    assert main(["generate", cfg]) == 0
    assert "12 graphs" in capsys.readouterr().out
    assert len(list((tmp_path / "cache" / "processed").glob("causal_sets_*.pt"))) == 1


def test_qg_console_script_is_installed():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("qg") == "QuantumGravPy.cli:run"


def test_an_unwritable_run_directory_is_one_line(config_file, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cfg = config_file(training={"path": str(blocker / "run")})
    assert_refused(run_main(capsys, "train", cfg), str(blocker))

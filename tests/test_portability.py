"""What keeps results and start-up the same on any machine: the package and the command line load
no model library before they need one, and a run whose bits must not depend on the number of
processes computes on one thread (restored afterwards)."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT

import QuantumGravPy as qg
from QuantumGravPy.parallel.distributed import one_thread

HEAVY = ("torch", "torch_geometric", "torchmetrics", "scipy", "matplotlib")

# In a fresh interpreter: what `import QuantumGravPy`, `qg --help` and a config mistake load.
STARTUP = """
import sys
import QuantumGravPy as qg
from QuantumGravPy.cli import main
HEAVY = {heavy!r}
loaded = lambda: sorted(m for m in HEAVY if m in sys.modules)
print("import", loaded())
try:
    main(["train", "--help"])
except SystemExit as e:
    print("help", e.code, loaded())
print("mistake", main(["train", {config!r}]), loaded())
print("config", type(qg.load_config({good!r})).__name__, loaded())
"""


def test_the_package_and_the_command_line_answer_without_loading_torch(tmp_path):
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text("training:\n  num_epoch: 3\n")
    good.write_text("training:\n  num_epochs: 3\n")
    script = STARTUP.format(heavy=HEAVY, config=str(bad), good=str(good))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "import []"
    assert lines[-3:] == ["help 0 []", "mistake 2 []", "config Config []"]
    assert "training.num_epoch: unknown key" in result.stderr


def test_every_public_name_loads_on_first_use_and_submodules_keep_their_names():
    for name in qg.__all__:
        assert getattr(qg, name) is not None, name
    assert set(qg.__all__) <= set(dir(qg))
    # the documented names and the earlier ones are the lazy table's
    assert sorted([*qg.__all__, *qg._EARLIER]) == sorted(qg._SOURCE_OF)
    for name in qg._EARLIER:
        assert getattr(qg, name) is not None, name
    # predict and tune are both a subpackage and the function it defines: qg.NAME is the function
    from QuantumGravPy.predict import read  # noqa: F401
    from QuantumGravPy.tune import results  # noqa: F401

    assert callable(qg.predict) and callable(qg.tune)
    assert qg.config.per_process is not None and qg.runs.layout is not None
    with pytest.raises(AttributeError, match="no attribute 'Trainr'"):
        qg.Trainr  # noqa: B018


def test_one_thread_holds_within_the_block_and_restores_after():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread(torch.device("cpu")):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), one_thread(torch.device("cpu")):
            raise RuntimeError("the block failed")
        assert torch.get_num_threads() == 2
        with one_thread(torch.device("meta")):  # not the CPU's threads: left alone
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_an_invariant_run_trains_on_one_thread_and_gives_the_threads_back(make_config):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        config = make_config("parallel.strategy=invariant", "training.global_batch_size=24")
        trainer = qg.Trainer(config)
        assert torch.get_num_threads() == 1
        trainer.close()
        assert torch.get_num_threads() == 2
        plain = qg.Trainer(make_config("training.path=" + str(config.run_dir) + "_plain"))
        assert torch.get_num_threads() == 2  # only invariance pins the threads
        plain.close()
    finally:
        torch.set_num_threads(before)

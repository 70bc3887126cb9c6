"""``parallel.strategy: invariant``: a job killed on four processes and resumed on two ends with
the bits of one process (the same bits on any number of processes: tests/test_invariant.py)."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, TESTS, run_main
from resuming import killed
from test_invariant import assert_same_bits, everything, write_config
from test_monitor import read_csv

from QuantumGravPy.runs import layout as rd

pytestmark = pytest.mark.timeout(300)


def test_killed_on_four_processes_resumed_on_two_ends_as_one_process_does(
    tmp_path, data_root, capsys
):
    whole = write_config(tmp_path, data_root, "whole")
    assert run_main(capsys, "train", whole).returncode == 0
    cut = write_config(tmp_path, data_root, "cut", "parallel.world_size=4", "log_level=INFO")
    killed(cut, {"QG_TEST_KILL_AT": "train:3:2"}, expect_epoch=2)
    shutil.copytree(tmp_path / "cut", tmp_path / "elastic")  # the same killed run, twice
    # resumed on 2 in this process (its ranks forked from this worker's server: no imports)
    resumed = run_main(capsys, "train", cut, "--resume", "parallel.world_size=2")
    assert resumed.returncode == 0, resumed.stderr
    log = (tmp_path / "cut" / "train.log").read_text()
    assert "resuming a run trained with 4 process(es) on 2" in log
    # the exact exchange is timed, and all of it waited for (it follows the backward pass)
    _, ranks = read_csv(tmp_path / "cut" / rd.RANKS)
    assert [(r["epoch"], r["rank"]) for r in ranks][-2:] == [(3, 0), (3, 1)]
    for row in ranks:
        assert row["exchange_s"] > 0 and row["bytes_exchanged"] > 0, row
        assert row["exchange_exposed_s"] == pytest.approx(row["exchange_s"]), row
    assert_same_bits(everything(tmp_path / "cut"), everything(tmp_path / "whole"))
    # the other copy through torchrun, on another --nproc_per_node
    from QuantumGravPy.parallel.distributed import free_port

    elastic = write_config(
        tmp_path, data_root, "elastic", "parallel.world_size=4", "log_level=INFO"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=3",
        "--master_port", str(free_port()), "-m", "QuantumGravPy", "train", str(elastic),
        "--resume",
    ]  # fmt: skip
    resumed = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming a run trained with 4 process(es) on 3" in resumed.stderr
    assert_same_bits(everything(tmp_path / "elastic"), everything(tmp_path / "whole"))

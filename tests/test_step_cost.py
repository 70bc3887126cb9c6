"""What a training step costs beyond the work it does, counted on the CPU stand-in for a
launch-bound GPU step (bench/step.py): non-view operations dispatched a step, against a
hand-written loop doing the same work. The counts are deterministic."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))


@pytest.mark.timeout(120)
def test_a_step_dispatches_at_most_three_operations_beyond_the_loop_doing_its_work(tmp_path):
    import step

    args = step.parser().parse_args(["--graphs", "80"])
    loops = {loop.name: loop for loop in step.build(args, str(tmp_path), with_lightning=False)}
    for loop in loops.values():
        loop.time()  # the first epoch: what is made once (task constants, buffers)
        loop.count()
    above = loops["qg"].ops - loops["hand, qg's work"].ops
    # 9.4 a step before the masked update and the step's own sums left the default step
    assert above <= 3, f"{above:.1f} operations a step beyond the work"

"""What a training step costs beyond the work it does, counted on the CPU stand-in for a
launch-bound GPU step (bench/step.py): non-view operations dispatched a step, against a
hand-written loop doing the same work. The counts are deterministic."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))


@pytest.mark.timeout(120)
def test_a_step_dispatches_at_most_two_operations_beyond_the_loop_doing_its_work(tmp_path):
    """Over epochs of 35 steps, the stand-in's own (what runs once an epoch is shared out over
    them), on the loader's host path and on data.device's (gathered with torch operations, as
    on a GPU)."""
    import step

    args = step.parser().parse_args(["--graphs", "400"])
    loops = {loop.name: loop for loop in step.build(args, str(tmp_path), with_lightning=False)}
    for loop in loops.values():
        loop.time()  # the first epoch: what is made once (task constants, buffers)
        loop.count()
    work = loops["hand, qg's work"]
    # 9.4 a step before the masked update and the step's own sums left the default step, and
    # data.device's path gathered each batch anew (some 19 a step)
    for name in ("qg", "qg, data.device's path"):
        above = loops[name].ops - work.ops
        assert above <= 2, f"{name}: {above:.1f} operations a step beyond the work"
    # the step's own Python: progress, checks and sums, a little beyond the loop's
    assert loops["qg"].calls <= 1.1 * work.calls

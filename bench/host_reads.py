"""Counting the places where the host waits for a tensor's value.

On a GPU, reading a tensor's value on the host (``item()``, ``float(t)``, ``bool(t)``,
``tolist()``, ``numpy()``, ``cpu()``) waits until every kernel queued before it has run: the
host cannot queue the next step's launches while the GPU works, and the GPU idles while the
host catches up. A training step that reads nothing lets the host run ahead by a step or more.

:class:`HostReads` counts such reads while it is active, as a ``TorchFunctionMode``: on a CPU
they cost nothing, but they are the same calls, so a count taken on a CPU says what a GPU
would wait for. The step counters of torch's optimizers are left out: a non-capturable
optimizer keeps them on the host by design and reads them there.
"""

from __future__ import annotations

import collections
import traceback
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The tensor methods that hand a value to the host.
READS = frozenset(
    {
        torch.Tensor.item,
        torch.Tensor.__float__,
        torch.Tensor.__int__,
        torch.Tensor.__bool__,
        torch.Tensor.__index__,
        torch.Tensor.tolist,
        torch.Tensor.numpy,
        torch.Tensor.cpu,
    }
)


class HostReads(TorchFunctionMode):
    """``with HostReads(optimizer) as reads: ...``; then ``reads.count`` and ``reads.where``
    (a Counter of the code lines that read: file:line of the innermost frame in the package or
    the caller's code, not in torch). ``optimizer``: its step counters are not counted."""

    def __init__(self, *optimizers: torch.optim.Optimizer | None):
        super().__init__()
        self._optimizers = [o for o in optimizers if o is not None]
        self.count = 0
        self.where: collections.Counter[str] = collections.Counter()

    def _step_counters(self) -> set[int]:
        ids = set()
        for optimizer in self._optimizers:
            for state in optimizer.state.values():
                step = state.get("step") if isinstance(state, dict) else None
                if isinstance(step, torch.Tensor):
                    ids.add(id(step))
        return ids

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        if func in READS and args and isinstance(args[0], torch.Tensor):
            if id(args[0]) not in self._step_counters():
                self.count += 1
                self.where[_caller()] += 1
        return func(*args, **(kwargs or {}))


def _caller() -> str:
    """The innermost frame of the stack outside torch and this module."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename.replace("\\", "/")
        if "/torch/" in name or name.endswith("host_reads.py"):
            continue
        return f"{name.rsplit('/', 2)[-2]}/{name.rsplit('/', 1)[-1]}:{frame.lineno}"
    return "?"

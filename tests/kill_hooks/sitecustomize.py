"""Imported by every Python process of a test job whose PYTHONPATH holds this directory (and
run by a job forked from a test worker, ``conftest.ForkedJob``, whose environment names it).

It kills the job at a chosen point, as a preemption would, so the kill tests know where it
landed (and fail if the job ends without it):

- ``QG_TEST_KILL_IN_WRITE=N``: in the middle of the N-th write of ``last.pt``; the temporary
  file is cut to half its size first, as if the write had stopped there.
- ``QG_TEST_KILL_AT=PHASE:EPOCH:BATCH``: as batch BATCH (from 1) of epoch EPOCH (from 1) of the
  training pass (``train``) or of the validation (``validate``) reaches the device, counted in
  each process.

The kill is SIGKILL to the whole process group (``QG_TEST_KILL_SCOPE=group``, the default, as a
batch system's preemption does) or to this process only (``process``). Only while
``TORCHELASTIC_RESTART_COUNT`` is 0 or unset, so a job restarted by torchrun runs normally.
"""

import os
import signal
import sys


def _kill():
    if os.environ.get("QG_TEST_KILL_SCOPE", "group") == "process":
        os.kill(os.getpid(), signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)


_ARMED = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) == 0
_IN_WRITE = int(os.environ.get("QG_TEST_KILL_IN_WRITE", "0"))
_AT = os.environ.get("QG_TEST_KILL_AT", "")

if _ARMED and _IN_WRITE:
    _real_fsync = os.fsync
    _writes = 0

    def _fsync(fd):
        global _writes
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if ".last.pt.tmp" in os.path.basename(name):
            _writes += 1
            if _writes == _IN_WRITE:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)
                _kill()
        return _real_fsync(fd)

    os.fsync = _fsync

if _ARMED and _AT:
    import importlib.abc
    import importlib.machinery

    _phase, _epoch, _batch = _AT.split(":")
    _TARGET = (_phase, int(_epoch), int(_batch))
    _TRAINER = "QuantumGravPy.training.loop.trainer"

    def _plant(trainer):
        """Count the batches each pass is handed: the training pass iterates
        ``step.fed(...)``, validation (and testing) ``evaluation.fed(...)``."""
        evaluation = sys.modules["QuantumGravPy.training.evaluation.evaluator"]
        step = sys.modules["QuantumGravPy.training.loop.step"]  # imported by the trainer's module
        counts = {"epoch": 0, "train": 0, "validate": 0}
        train_epoch = trainer.Trainer.train_epoch

        def counted_train_epoch(self, loader):
            counts.update(epoch=self.epoch + 1, train=0, validate=0)
            return train_epoch(self, loader)

        class Counted:
            def __init__(self, phase, batches):
                self.phase, self.batches = phase, batches

            def __len__(self):
                return len(self.batches)

            def __iter__(self):
                for batch in self.batches:
                    counts[self.phase] += 1
                    if (self.phase, counts["epoch"], counts[self.phase]) == _TARGET:
                        _kill()
                    yield batch

        def counting(phase, fed):
            return lambda *args, **kwargs: Counted(phase, fed(*args, **kwargs))

        trainer.Trainer.train_epoch = counted_train_epoch
        step.fed = counting("train", step.fed)
        evaluation.fed = counting("validate", evaluation.fed)

    class _PlantAfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != _TRAINER:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None:
                run = spec.loader.exec_module

                def exec_module(module):
                    run(module)
                    _plant(module)

                spec.loader.exec_module = exec_module
            return spec

    if _TRAINER in sys.modules:  # a job forked from a process that imported it already
        _plant(sys.modules[_TRAINER])
    else:
        sys.meta_path.insert(0, _PlantAfterImport())

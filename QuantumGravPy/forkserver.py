"""What the forkserver of :func:`~QuantumGravPy.parallel.spawn.spawn` imports before it forks
any rank: the libraries every rank uses, and a quick exit. It sits above every layer, as
``__main__`` does: the server process imports whatever the ranks will run.

``import QuantumGravPy`` alone loads no library (its names load on first use), so the server
imports the heavy ones itself: torch, torch_geometric (which loads torch._dynamo) and torchmetrics
(which loads scipy.signal), seconds of imports that every rank forked from the server then starts
with, and the package's data and training layers, which every training rank loads (0.17 s of
every rank's start when each loaded them after its fork, from whatever module a program's first
job ran).
:func:`~QuantumGravPy.parallel.spawn.spawn` also preloads the module of the function it runs.

A quick exit: a process that imported torch, torch_geometric and torchmetrics holds millions of
objects, and the garbage collections Python runs while it shuts down walk all of them, 1 to
1.5 s per process once its work is done. ``gc.freeze()`` moves them out of the collector's
sight; reference counting still releases them as the modules are cleared, and the other exit
handlers (logging's flush) still run. The ``qg`` program (:func:`QuantumGravPy.cli.run`) and
every spawned rank (once its result is written and its process group left) freeze the same way;
here the server does, when it ends with the program that started it. A rank also freezes what it
starts with, before its work, so that its own collections skip the libraries too.
"""

import atexit
import gc

import torch  # noqa: F401
import torch_geometric  # noqa: F401
import torchmetrics  # noqa: F401

from . import data, training  # noqa: F401

atexit.register(gc.freeze)

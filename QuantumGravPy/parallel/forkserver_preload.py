"""What the forkserver imports before it forks any rank: the libraries every rank uses, and a
quick exit.

``import QuantumGravPy`` alone loads no library (its names load on first use), so the server
imports the heavy ones itself: torch, torch_geometric (which loads torch._dynamo) and torchmetrics
(which loads scipy.signal), seconds of imports that every rank forked from the server then starts
with. :func:`~QuantumGravPy.parallel.spawn.spawn` also preloads the module of the function it
runs, which brings the package's own modules that function needs.

A quick exit: a process that imported torch, torch_geometric and torchmetrics holds millions of
objects, and the garbage collections Python runs while it shuts down walk all of them, 1 to
1.5 s per process once its work is done. ``gc.freeze()`` moves them out of the collector's
sight; reference counting still releases them as the modules are cleared, and the other exit
handlers (logging's flush) still run. The ``qg`` program (:func:`QuantumGravPy.cli.run`) and
every spawned rank (once its result is written and its process group left) freeze the same way;
here the server does, when it ends with the program that started it.
"""

import atexit
import gc

import torch  # noqa: F401
import torch_geometric  # noqa: F401
import torchmetrics  # noqa: F401

atexit.register(gc.freeze)

"""What a run watches inside itself: each rank's time by part of the step and its stragglers
(:mod:`.timing`), the gradient checks kept on the device until read (:mod:`.gradients`), and
the monitor that holds them and compares the replicas (:mod:`.monitor`). What a step reads on
the host is counted by the benchmarks' and tests' own instrument, ``bench/host_reads.py``.

The bottom of the training layer, with :mod:`..evaluation`: it imports nothing else of it.
"""

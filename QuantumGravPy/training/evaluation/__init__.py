"""What a run measures: each task's target, loss and outputs (:mod:`.tasks`), the task metrics
combined over processes (:mod:`.metrics`), and validation and testing as sums over graphs,
exact for any number of processes (:mod:`.evaluator`: :class:`Validator`, :class:`Tester`).

The bottom of the training layer, with :mod:`..monitoring`: it imports nothing else of it.
"""

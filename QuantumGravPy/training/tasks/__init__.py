"""A run's tasks at run time (:mod:`.task`): each task kind of :mod:`QuantumGravPy.tasks` made
concrete for one run's data, with its number of outputs, its loss and its target's scaling.

The bottom of the training layer: the kinds say what a task is, this room says what it does
in a step, and everything above it (evaluation, the step, checkpoints, prediction) reads it.
"""

"""What a run measures: the task metrics combined over processes (:mod:`.metrics`), and
validation and testing as sums over graphs, exact for any number of processes
(:mod:`.evaluator`: :class:`Validator`, :class:`Tester`).

Above :mod:`..tasks` alone, with :mod:`..monitoring`: it imports nothing else of the layer.
"""

"""The tests of whole jobs started, stopped or spread as users do it (make test-jobs).

A package, so that a module here may share its name with the module in tests/ that holds the
rest of the same subject's tests: jobs/test_tune.py beside test_tune.py, whose helpers it imports
as ``from test_tune import ...`` (tests/ is on the path, as for ``from conftest import ...``).
"""

"""Every test in this folder is marked ``jobs``: make test leaves them out (-m "not jobs") and
make test-jobs runs them (-m jobs). tests/test_jobs_folder.py checks that no test outside this
folder carries the mark."""

from pathlib import Path

import pytest

JOBS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(items):
    for item in items:
        if JOBS in item.path.parents:
            item.add_marker(pytest.mark.jobs)

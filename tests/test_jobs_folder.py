"""The tests marked ``jobs`` are the tests in tests/jobs/, and no others: make test leaves out the
one (-m "not jobs"), make test-jobs runs it (-m jobs), and the tree shows the split."""

import ast
import os
import re
import subprocess
import sys

from conftest import ROOT, TESTS

JOBS = TESTS / "jobs"


def jobs_marks_outside(tests):
    """``file:line`` of every ``mark.jobs`` (a decorator, a pytestmark, a param's marks) in the
    Python files under ``tests`` but outside its jobs/ folder."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        if (tests / "jobs") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "jobs"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "mark"
            ):
                found.append(f"{path.relative_to(tests)}:{node.lineno}")
    return found


def collect(*args):
    """``pytest --collect-only -q ARGS`` in a fresh interpreter at the repository's root: the
    test ids it selects and the number it deselects."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode in (0, 5), result.stdout[-4000:] + result.stderr[-4000:]
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    deselected = re.search(r"\((\d+) deselected\)", result.stdout)
    return ids, int(deselected.group(1)) if deselected else 0


def test_no_test_outside_the_jobs_folder_is_marked_jobs():
    marks = jobs_marks_outside(TESTS)
    assert not marks, "marked jobs outside tests/jobs/ (move the test there): " + ", ".join(marks)


def test_the_check_finds_a_jobs_mark_put_back_in_tests(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "test_kept.py").write_text(
        "import pytest\n\n@pytest.mark.jobs\ndef test_a(): pass\n"
    )
    (tmp_path / "test_back.py").write_text(
        "import pytest\n\n\ndef test_a(): pass\n\n\n@pytest.mark.jobs\ndef test_b(): pass\n"
    )
    (tmp_path / "test_module.py").write_text("import pytest\npytestmark = [pytest.mark.jobs]\n")
    assert jobs_marks_outside(tmp_path) == ["test_back.py:7", "test_module.py:2"]


def test_pytest_selects_as_jobs_exactly_the_tests_in_the_jobs_folder():
    jobs, _ = collect("-m", "jobs")
    assert jobs, "no test marked jobs"
    outside = [test for test in jobs if not test.startswith("tests/jobs/")]
    assert not outside, f"marked jobs outside tests/jobs/: {outside}"
    # every test in the folder is marked: "not jobs" selects none of them
    unmarked, deselected = collect("-m", "not jobs", str(JOBS.relative_to(ROOT)))
    assert not unmarked, f"in tests/jobs/ but not marked jobs: {unmarked}"
    assert deselected == len(jobs)

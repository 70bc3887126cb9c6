"""The Physics page and the README quote the last run of the studies (STUDIES.md), against the
strongest classical baseline of each kind."""

import physics_page
import pytest
from physics_page import ROOT, STUDIES


@pytest.mark.parametrize("path", physics_page.TARGETS)
def test_the_physics_figures_are_those_of_the_last_run_of_the_studies(path):
    """Generated from STUDIES.md; make studies (or studies/physics_page.py --write) renews them."""
    text = (ROOT / path).read_text(encoding="utf-8")
    studies = STUDIES.read_text(encoding="utf-8")
    found = 0
    for name in physics_page.BLOCKS:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start in text:
            found += 1
            block = text[text.index(start) : text.index(end) + len(end)]
            assert block == physics_page.block(name, path, studies), (
                f"{path}: the {name} table is stale: run python studies/physics_page.py --write"
            )
    assert found


def test_the_gnn_is_compared_against_the_strongest_baseline():
    """The GNN against the best classical method of each kind, not a weaker one."""
    rows = {
        (k, n): (method, best)
        for k, n, method, best, _ in physics_page.baseline_rows(
            physics_page.sections(STUDIES.read_text(encoding="utf-8"))
        )
    }
    method, best = rows[("manifold_like", "32-64")]
    assert "Myrheim-Meyer" not in method and float(best) > 0.9


def test_a_table_of_another_shape_is_an_error_naming_the_study(tmp_path):
    """A study whose output changed shape stops the page's generation with the study's name."""
    text = STUDIES.read_text(encoding="utf-8").replace("`python studies/ricci_bound.py`", "")
    with pytest.raises(physics_page.BenchmarksError, match="studies/ricci_bound.py"):
        physics_page.ricci_block(text)


def test_a_new_report_keeps_the_findings_where_they_are(tmp_path):
    """STUDIES.md's write-up lives under its header: a full rerun (studies/run.py) writes it
    there again, and a rerun of some studies (--only) keeps it with the header."""
    import run
    from report import previous_header, write_report

    report = tmp_path / "STUDIES.md"
    report.write_text(STUDIES.read_text(encoding="utf-8"), encoding="utf-8")
    kept = run.findings(report)
    assert "### What a GNN learns that classical estimators do not" in kept
    assert kept in previous_header(report)  # what --only keeps
    write_report(
        (), run.HERE, report, None, "Physics studies", "make studies", note=run.note(report)
    )
    rewritten = report.read_text(encoding="utf-8")
    assert run.findings(report) == kept and rewritten.startswith("# Physics studies\n")
    assert not any(title.startswith("How the") for title in physics_page.sections(rewritten))

"""The documentation: the site builds strictly, documents every config key and public name,
quotes the last benchmark run, and the README stays a page a visitor reads."""

import dataclasses
import inspect
import os
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

import QuantumGravPy as qg
from QuantumGravPy import tasks
from QuantumGravPy.config.docs import END, START, reference_markdown, reference_rows
from QuantumGravPy.parallel import strategies

DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIG_PAGE = (DOCS / "config.md").read_text(encoding="utf-8")
SITE = "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))

sys.path.insert(0, str(ROOT / "bench"))
import headline  # noqa: E402


@pytest.mark.timeout(180)
def test_the_site_builds_in_strict_mode(tmp_path):
    """No broken link or anchor, no missing include, every API entry resolved."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    api = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    for name in qg.__all__:
        assert f'id="QuantumGravPy.{name}"' in api, f"{name} is not rendered in the API page"
    assert ":class:" not in api  # the hook turns Sphinx roles into code
    tutorial = (tmp_path / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert tutorial.count("data:image/png;base64") >= 4  # the notebook's plots
    # the table of strategies, made from their classes: each says what it does, its own keys
    # and what it refuses
    page = (tmp_path / "distributed" / "index.html").read_text(encoding="utf-8")
    for cls in strategies.STRATEGIES:
        assert f"<td><code>{cls.name}</code></td>" in page, cls.name
        keys = dataclasses.fields(cls.Settings) if cls.Settings else ()
        assert all(f"<code>{f.name}</code> (" in page for f in keys), cls.name
    assert "<!-- strategies -->" not in page
    # and the table of task kinds with their metrics
    page = (tmp_path / "training" / "index.html").read_text(encoding="utf-8")
    for kind in tasks.KINDS:
        assert f"<td><code>{kind.name}</code></td>" in page, kind.name
        assert all(f"<code>{m}</code>" in page for m in kind.metrics), kind.name


def test_every_public_name_is_in_the_api_reference_with_a_docstring():
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    listed = re.findall(r"^::: QuantumGravPy\.(\w+)$", page, flags=re.M)
    assert sorted(listed) == sorted(qg.__all__), (
        f"docs/api.md lists {sorted(set(listed) - set(qg.__all__))} beyond qg.__all__ and "
        f"misses {sorted(set(qg.__all__) - set(listed))}"
    )
    undocumented = [name for name in qg.__all__ if not inspect.getdoc(getattr(qg, name))]
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_the_configuration_reference_is_generated_from_the_current_schema():
    block = CONFIG_PAGE[CONFIG_PAGE.index(START) : CONFIG_PAGE.index(END) + len(END)]
    assert block == reference_markdown(), (
        "docs/config.md's reference is stale: run "
        "python -m QuantumGravPy.config.docs --write docs/config.md"
    )


def test_every_key_has_a_type_a_default_and_a_meaning():
    rows = reference_rows()
    assert len(rows) > 50
    undocumented = [key for key, _, _, meaning in rows if not meaning]
    assert not undocumented, (
        f"add a comment beside these fields in config/schema.py: {undocumented}"
    )


def schema_keys(tree, keys, prefix=""):
    """The dotted keys of a config file, down to the schema's leaves (not into kwargs maps)."""
    found = []
    for name, value in tree.items():
        key = prefix + name
        found.append(key)
        if isinstance(value, dict) and any(k.startswith(key + ".") for k in keys):
            found += schema_keys(value, keys, key + ".")
    return found


def test_every_key_of_the_shipped_configs_is_documented():
    keys = {key for key, *_ in reference_rows()}
    sections = {key.split(".")[0] for key in keys}
    configs = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))
    assert {"train.yaml", "curvature.yaml", "ricci.yaml"} <= set(configs)
    for name in configs:
        if name == "search_space.yaml":  # a search space for qg tune, not a config
            continue
        raw = yaml.safe_load((ROOT / "configs" / name).read_text())
        for key in schema_keys(raw, keys):
            assert key in keys or key in sections, f"{name}: {key} is not in the reference"
            if key in keys:
                assert f"| `{key}` |" in CONFIG_PAGE, f"{name}: {key} missing from docs/config.md"


def test_the_docs_have_the_launch_recipes():
    for recipe in (
        "torchrun --nproc_per_node=4 -m QuantumGravPy train",
        "torchrun --nnodes=2",
        "#SBATCH --nodes=2",
        "srun python -m QuantumGravPy train",
        "qg plot RUN_DIR",
        "--resume",
        "qg predict RUN_DIR",
        "qg tune CONFIG SPACE",
    ):
        assert recipe in SITE, recipe


def test_the_readme_is_a_few_screens_that_link_into_the_site():
    assert README.count("\n") <= 250
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        included = re.fullmatch(r'--8<-- "([^"]+)"\n', text)  # a page that is a root file
        target = included.group(1) if included else f"docs/{page.name}"
        if page.name != "index.md":
            assert f"({target}" in README, f"README.md does not link to {target}"


@pytest.mark.parametrize("path", ["README.md", "docs/getting-started.md"])
def test_the_minimal_config_loads_as_written(path, tmp_path):
    text = (ROOT / path).read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# manifold_like.yaml\n.*?)```", text, flags=re.S)
    assert block, f"{path}: no manifold_like.yaml example"
    file = tmp_path / "manifold_like.yaml"
    file.write_text(block.group(1))
    config = qg.load_config(file)
    assert config.data.kind == "manifold_like" and config.tasks[0].type == "binary"
    assert config.parallel.world_size == 2


@pytest.mark.parametrize("path", headline.TARGETS)
def test_the_benchmark_figures_are_those_of_the_last_bench_run(path):
    """Generated from BENCHMARKS.md; make bench (or bench/headline.py --write) renews them."""
    text = (ROOT / path).read_text(encoding="utf-8")
    benchmarks = headline.BENCHMARKS.read_text(encoding="utf-8")
    found = 0
    for name in headline.BLOCKS:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start in text:
            found += 1
            block = text[text.index(start) : text.index(end) + len(end)]
            assert block == headline.block(name, path, benchmarks), (
                f"{path}: the {name} table is stale: run python bench/headline.py --write"
            )
    assert found


def test_the_sites_notebook_is_the_tutorial_as_it_last_ran():
    """docs/tutorial.ipynb is the example notebook with its outputs (make docs-notebook)."""
    import nbformat

    stored = nbformat.read(DOCS / "tutorial.ipynb", as_version=4)
    example = nbformat.read(ROOT / "examples" / "train_ddp_tutorial.ipynb", as_version=4)
    assert [c.source for c in stored.cells] == [c.source for c in example.cells], (
        "docs/tutorial.ipynb is not the current tutorial: run make docs-notebook"
    )
    outputs = [out for cell in stored.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert sum("image/png" in out.get("data", {}) for out in outputs) >= 4

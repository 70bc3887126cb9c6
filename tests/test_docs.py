"""The README documents every configuration key, generated from the schema, and the recipes."""

import yaml
from conftest import ROOT

from QuantumGravPy.config.docs import END, START, reference_markdown, reference_rows

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_reference_is_generated_from_the_current_schema():
    block = README[README.index(START) : README.index(END) + len(END)]
    assert block == reference_markdown(), (
        "README.md's configuration reference is stale: run "
        "python -m QuantumGravPy.config.docs --write README.md"
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
                assert f"| `{key}` |" in README, f"{name}: {key} missing from README.md"


def test_the_readme_has_the_launch_recipes():
    for recipe in (
        "torchrun --nproc_per_node=4 -m QuantumGravPy train",
        "torchrun --nnodes=2",
        "#SBATCH --nodes=2",
        "srun python -m QuantumGravPy train",
        "qg plot RUN_DIR",
        "--resume",
    ):
        assert recipe in README, recipe

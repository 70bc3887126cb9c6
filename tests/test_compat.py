"""The dependencies' internals the library relies on live in QuantumGravPy/compat/, one adapter
per dependency, each with a check that names the dependency and its version when an internal
moved; nothing else in the package touches a private name of a dependency."""

import ast
import importlib

import pytest
import torch
from conftest import ROOT

from QuantumGravPy import compat

PACKAGE = ROOT / "QuantumGravPy"
# Private-looking names that are not a dependency's internals: the public os._exit and
# namedtuple._replace, and the library's own classes reading another instance of themselves.
OWN = {
    ("parallel/failures.py", "os._exit"),  # the standard library's, named so on purpose
    ("parallel/deadline.py", "os._exit"),
    ("parallel/orphans.py", "os._exit"),
    ("data/batches/batching.py", "stored._replace"),
    ("data/storage/disk.py", "other._compact"),
    ("data/storage/disk.py", "other._length"),
}


@pytest.mark.parametrize("name", compat.ADAPTERS)
def test_each_adapter_finds_every_internal_it_uses_in_the_installed_version(name):
    adapter = importlib.import_module(f"QuantumGravPy.compat.{name}")
    if compat.installed(adapter.DISTRIBUTION) == "not installed":
        pytest.skip(f"{adapter.DISTRIBUTION} is not installed (an optional extra)")
    adapter.check()


def test_an_internal_that_moved_is_named_with_the_dependency_and_its_version(monkeypatch):
    monkeypatch.delattr(torch, "_foreach_norm")
    with pytest.raises(compat.CompatError) as info:
        compat.check_all(("torch",))
    message = str(info.value)
    assert message.startswith(f"torch {compat.installed('torch')}: torch._foreach_norm is gone")
    assert "setup.cfg" in message


def test_an_adapter_that_reads_the_wrong_thing_is_caught_too(monkeypatch):
    from torch_geometric.data import Batch

    real = Batch.from_data_list

    def without_bookkeeping(data_list, *args, **kwargs):
        batch = real(data_list, *args, **kwargs)
        batch._inc_dict = {}  # as if PyG kept the increments elsewhere
        return batch

    monkeypatch.setattr(Batch, "from_data_list", staticmethod(without_bookkeeping))
    with pytest.raises(compat.CompatError, match=r"^torch-geometric [\d.]+\S*: a batch's _slice"):
        compat.check_all(("pyg",))


def private_uses(root=PACKAGE) -> list[str]:
    """Every private name of another object the package uses outside compat/: attributes
    (``x._name`` but for ``self``/``cls``), ``getattr``-style strings, private modules and
    names imported."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("compat/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = None
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    text = ast.unparse(node)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and _private(str(node.args[1].value))
            ):
                text = ast.unparse(node)
            elif isinstance(node, ast.keyword) and node.arg and _private(node.arg):
                text = f"{node.arg}=..."
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if node.module != "__future__" and (
                    any(map(_private, parts)) or any(_private(a.name) for a in node.names)
                ):
                    text = f"from {node.module} import ..."
            elif isinstance(node, ast.Import):
                text = next(
                    (a.name for a in node.names if any(map(_private, a.name.split(".")))), None
                )
            if text and (relative, text) not in OWN:
                found.append(f"QuantumGravPy/{relative}:{node.lineno}: {text}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_of_a_dependency_is_used_outside_its_adapter():
    found = private_uses()
    assert not found, "move these into QuantumGravPy/compat/:\n" + "\n".join(found)


def test_the_check_finds_a_private_name_where_it_should_not_be(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "loader.py").write_text(
        "from torch.distributed.fsdp._fully_shard import x\n"
        "def stop(loader):\n    loader._iterator._shutdown_workers()\n"
        "    return getattr(loader, '_iterator', None)\n"
    )
    found = private_uses(tmp_path)
    assert sorted(line.split(": ", 1)[1] for line in found) == sorted(
        [
            "from torch.distributed.fsdp._fully_shard import ...",
            "loader._iterator._shutdown_workers",
            "loader._iterator",
            "getattr(loader, '_iterator', None)",
        ]
    ), found

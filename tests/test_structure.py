"""The shape ARCHITECTURE.md promises: layers point inward (inside core/ too, in the order
it lists), no import circles, small modules.

Read from the source with `ast` (module-level imports; those under `TYPE_CHECKING` are for
the type checker only and do not run)."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "adapters", "bot")
PLATFORM_LIBRARIES = ("discord", "slack_bolt", "slack_sdk", "aiohttp")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(path: Path) -> set[str]:
    """Names of every module the file imports when it runs."""
    names: set[str] = set()
    for statement in ast.parse(path.read_text()).body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.dump(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: (imported(path) & known.keys()) - {name} for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for other in edges[node]:
            if other not in order:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], order[other])
        if low[node] == order[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in edges:
        if node not in order:
            visit(node)
    return found


def test_core_knows_no_platform_and_nothing_above_it():
    for name, path in modules().items():
        if not name.startswith("core"):
            continue
        outward = {
            m for m in imported(path) if m.split(".")[0] in ("adapters", "bot", *PLATFORM_LIBRARIES)
        }
        assert not outward, f"{name} imports {sorted(outward)}"


def core_layers() -> list[str]:
    """core/'s layers as ARCHITECTURE.md lists them, each importing only from those above it:
    the folder of each (the first, "core/*.py", is core's own modules, with BASE_FOLDERS)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    block = text.split("Layers, each importing only from the ones above it", 1)[1]
    block = block.split("```", 2)[1]
    return re.findall(r"^(core/\S*)", block, re.M)


BASE_FOLDERS = {"wire", "models"}  # in core's first layer, beside core/*.py (ARCHITECTURE.md)


def layer_of(module: str, layers: list[str]) -> int | None:
    parts = module.split(".")
    if parts[0] != "core":
        return None
    if len(parts) == 1:
        return 0
    folder = f"core/{parts[1]}/" if len(parts) > 2 or module in _packages() else None
    if folder is None or parts[1] in BASE_FOLDERS:
        return 0
    return layers.index(folder)


def _packages() -> set[str]:
    return {name for name, path in modules().items() if path.name == "__init__.py"}


def upward_imports(edges: dict[str, set[str]], layers: list[str]) -> list[str]:
    found = []
    for name, others in sorted(edges.items()):
        mine = layer_of(name, layers)
        for other in sorted(others):
            theirs = layer_of(other, layers)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{name} imports {other} ({layers[theirs]}, below {layers[mine]})")
    return found


def test_every_folder_of_core_has_its_layer():
    layers = core_layers()
    assert layers[0] == "core/*.py" and len(layers) == len(set(layers))
    first = (ROOT / "ARCHITECTURE.md").read_text().split(layers[1], 1)[0].split(layers[0])[-1]
    assert all(f"core/{folder}/" in first for folder in BASE_FOLDERS), first
    folders = {p.name for p in (ROOT / "core").iterdir() if (p / "__init__.py").exists()}
    assert {f"core/{f}/" for f in folders - BASE_FOLDERS} == set(layers[1:])


def test_core_layers_import_only_the_layers_above_them():
    assert upward_imports(graph(), core_layers()) == []


def test_an_import_from_a_layer_below_is_found():
    """core/config.py importing core/schedule/policy.py, as it did until issue 26."""
    layers = core_layers()
    edges = {"core.config": {"core.schedule.policy"}, "core.memory.turn": {"core.config"}}
    assert upward_imports(edges, layers) == [
        "core.config imports core.schedule.policy (core/schedule/, below core/*.py)"
    ]


PLATFORM_WORDS = re.compile(r"discord|slack|guild|snowflake|channel_id", re.IGNORECASE)


def platform_literals(source: str) -> list[str]:
    """The strings of code (not docstrings or comments) that name a platform or its ids."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and PLATFORM_WORDS.search(node.value)
    ]


def test_core_code_names_no_platform():
    """Platform knowledge (meta keys, id formats) lives in the adapters, which hand it in."""
    found = {
        name: words
        for name, path in modules().items()
        if name.startswith("core") and (words := platform_literals(path.read_text()))
    }
    assert found == {}


def test_a_platform_s_meta_key_in_core_is_found():
    source = '"""Reads Discord back."""\nchannel = meta["channel_id"].astext\n'
    assert platform_literals(source) == ["channel_id"]


def test_adapters_never_reach_into_the_composition_root():
    for name, path in modules().items():
        if name.startswith("adapters"):
            above = {m for m in imported(path) if m.split(".")[0] == "bot"}
            assert not above, f"{name} imports {sorted(above)}"


def test_no_import_circles():
    assert circles(graph()) == []


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]


def test_no_product_module_is_over_the_size_limit():
    long = {
        name: lines
        for name, path in modules().items()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}

"""The training modules import each other one way only, and never each other's private names."""
import ast
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[3] / "mulosd_core" / "train"


def train_imports() -> dict[str, list[tuple[str, list[str]]]]:
    """module -> [(imported train module, names)] for every `from .x import ...` (at any depth in the file)."""
    out = {}
    for path in TRAIN.glob("*.py"):
        found = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                found.append((node.module, [a.name for a in node.names]))
        out[path.stem] = found
    return out


def test_no_private_names_cross_modules():
    bad = [(m, src, n) for m, deps in train_imports().items() for src, names in deps for n in names if n.startswith("_")]
    assert bad == []


def test_no_import_cycle():
    graph = {m: {src for src, _ in deps} for m, deps in train_imports().items()}
    assert "family" not in graph["upsampler"]

    def reaches(a: str, b: str, seen=frozenset()) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n})) for n in graph.get(a, ()))
    assert [m for m in graph if reaches(m, m)] == []

"""The library's shape, read from its source: a stage in one place, the question analysed once,
generators used through their protocol. (The import layers are checked by `make lint`.)"""

import ast
from pathlib import Path

from .conftest import ROOT

RAG = ROOT / "rag"
# What only the question analysis (rag/query/) derives from a question's text; every later stage
# reads it from the `Ask` (or its `Reading`).
ANALYSIS_ONLY = {"asks_for_several", "without_exclusions", "intent_of", "expanded", "facts_of", "topic_of"}
CONCRETE_GENERATORS = {"ExtractiveGenerator", "LLMGenerator"}


def modules(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        alias.asname or alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for alias in n.names
    }


def test_no_stage_but_the_analysis_derives_what_a_question_asks():
    outside = [p for p in modules(RAG) if RAG / "query" not in p.parents]
    offenders = {str(p.relative_to(ROOT)): sorted(names_used(p) & ANALYSIS_ONLY) for p in outside}
    assert not {p: n for p, n in offenders.items() if n}
    # The assistant analyses a question once; no other stage analyses it again.
    analysing = [str(p.relative_to(ROOT)) for p in outside if "analyse" in names_used(p)]
    assert analysing == ["rag/assistant.py"]


def test_generators_are_used_through_their_protocol():
    for path in [*modules(RAG), *modules(ROOT / "server")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                args = [ast.unparse(a) for a in node.args[1:]]
                if node.func.id == "isinstance":
                    assert not CONCRETE_GENERATORS & {a.split(".")[-1] for a in args}, (path, ast.unparse(node))
                if node.func.id in ("getattr", "hasattr"):
                    assert "generator" not in ast.unparse(node.args[0]), (path, ast.unparse(node))


def test_every_stage_is_a_package_of_small_modules():
    top = sorted(p.name for p in RAG.glob("*.py"))
    assert len(top) <= 8, top
    stages = {p.name for p in RAG.iterdir() if (p / "__init__.py").exists()}
    assert {"common", "index", "query", "retrieve", "judge", "answer", "evaluation"} <= stages
    for stage in stages:
        assert ast.get_docstring(ast.parse((RAG / stage / "__init__.py").read_text())), f"rag/{stage} says what it owns"
    long = {str(p.relative_to(ROOT)): n for p in modules(RAG) if (n := len(p.read_text().splitlines())) > 500}
    assert not long

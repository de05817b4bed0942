"""The `rag` command in a subprocess, as a user runs it."""

import json
import os
import subprocess
import sys

import pytest

from .conftest import ROOT, SEEDS


def rag(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def env(index_dir):
    return {"RAG_INDEX_DIR": str(index_dir), "RAG_SEEDS_DIR": str(SEEDS)}


def test_search_prints_a_readable_table(env):
    out = rag("search", "rotary embeddings for vision transformers", "-k", "3", env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(" 1. Spiral RoPE")
    assert sum(line[:3].strip().rstrip(".").isdigit() for line in lines) == 3


def test_search_json_has_the_http_shape(env):
    out = rag("search", "caching for diffusion language models", "--json", env=env)
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)["results"]
    assert len(results) == 5
    assert set(results[0]) >= {"paper_id", "rank", "score", "name", "text", "code_url", "snippet"}
    assert results[0]["name"] == "dLLM-Cache"


def test_index_if_needed_leaves_a_fresh_index_alone(env):
    out = rag("index", "--if-needed", env=env)
    assert out.returncode == 0, out.stderr
    assert "up to date" in out.stdout


def test_index_builds_with_a_summary_line(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "one.txt").write_bytes(sorted(SEEDS.glob("*.txt"))[0].read_bytes())
    out = rag(
        "index",
        "-q",
        env={"RAG_INDEX_DIR": str(tmp_path / "idx"), "RAG_SEEDS_DIR": str(seeds), "RAG_MULTILINGUAL": "false"},
    )
    assert out.returncode == 0, out.stderr
    assert "indexed 19 papers" in out.stdout and " chunks in " in out.stdout


def test_python_m_server_is_the_rag_command_and_knows_its_version():
    import rag as package

    out = subprocess.run([sys.executable, "-m", "server", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"rag {package.__version__}"
    helped = subprocess.run([sys.executable, "-m", "server", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert helped.returncode == 0 and "eval" in helped.stdout and "usage: rag" in helped.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["frobnicate"],
        ["search"],
        ["search", "q", "-k", "0"],
        ["search", "q", "-k", "x"],
        ["serve", "--port", "99999"],
    ],
)
def test_bad_arguments_print_usage_and_exit_2(args):
    out = rag(*args)
    assert out.returncode == 2
    assert "usage: rag" in out.stderr
    assert "Traceback" not in out.stderr


def test_library_errors_are_messages_not_tracebacks(tmp_path):
    out = rag("index", env={"RAG_SEEDS_DIR": str(tmp_path), "RAG_INDEX_DIR": str(tmp_path / "index")})
    assert out.returncode == 1
    assert out.stderr.startswith("rag: ") and "no seed files" in out.stderr
    assert "Traceback" not in out.stderr
    out = rag("search", "anything", env={"RAG_INDEX_DIR": str(tmp_path / "none"), "RAG_SEEDS_DIR": str(SEEDS)})
    assert out.returncode == 1 and "rag index" in out.stderr
    out = rag("search", "anything", env={"RAG_K": "500"})
    assert out.returncode == 2 and "invalid configuration" in out.stderr


def test_ask_prints_the_answer_and_numbered_sources(env):
    out = rag("ask", "What speedup does Jacobi Forcing report?", env=env)
    assert out.returncode == 0, out.stderr
    assert "3.8" in out.stdout and "[1]" in out.stdout
    assert "Sources:\n  [1] Jacobi Forcing" in out.stdout and "Confidence: high" in out.stdout


def test_ask_json_follow_up_and_stream(env):
    out = rag(
        "ask", "What speedup does it report?", "--history", "user:How does Jacobi Forcing work?", "--json", env=env
    )
    body = json.loads(out.stdout)
    assert body["citations"][0]["name"] == "Jacobi Forcing" and "Jacobi Forcing" in body["query"]
    assert body["confidence"] == "high"
    out = rag("ask", "What is MedMosaic?", "--stream", env=env)
    assert out.returncode == 0 and "MedMosaic" in out.stdout and "Sources:" in out.stdout


def test_ask_rejects_a_bad_history_turn(env):
    out = rag("ask", "What is it?", "--history", "robot:hello", env=env)
    assert out.returncode == 1 and "ROLE:TEXT" in out.stderr and "Traceback" not in out.stderr


SPEED, DLLM_CACHE, MEDSCOPE = "3b1953c4f7da", "65846cd55df9", "22b01627a253"
SPEED_UPS = "Which papers speed up diffusion language models, and by how much?"


def test_ask_and_search_within_chosen_papers_cite_only_them(env):
    everywhere = json.loads(rag("ask", SPEED_UPS, "--json", env=env).stdout)
    assert {c["paper_id"] for c in everywhere["citations"]} - {SPEED, DLLM_CACHE}  # the scope has work to do
    out = rag("ask", SPEED_UPS, "--paper", SPEED, "--paper", DLLM_CACHE, "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert {c["paper_id"] for c in json.loads(out.stdout)["citations"]} == {SPEED, DLLM_CACHE}
    # ids separated by commas, the printed table: only the scope ranked, however far from the query
    out = rag("search", SPEED_UPS, "--paper", f"{MEDSCOPE}, {SPEED}", "-k", "10", env=env)
    assert out.returncode == 0, out.stderr
    ranked = [line for line in out.stdout.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert len(ranked) == 2 and f"[{SPEED}]" in ranked[0] and f"[{MEDSCOPE}]" in ranked[1]


def test_an_unknown_paper_id_is_one_line_naming_it(env):
    out = rag("ask", "Which papers build medical benchmarks?", "--paper", f"{MEDSCOPE},000000000000", env=env)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == "rag: no paper with id '000000000000'\n"
    out = rag("search", "medical benchmarks", "--paper", "nope", "--paper", MEDSCOPE, env=env)
    assert out.returncode == 1 and out.stderr == "rag: no paper with id 'nope'\n"
    out = rag("search", "medical benchmarks", "--paper", ",", env=env)
    assert out.returncode == 2 and "--paper takes a paper id" in out.stderr and "Traceback" not in out.stderr

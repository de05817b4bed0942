"""`rag index --titles llm`: an LLM writes a title for each unnamed paper when indexing, kept only
when grounded in its abstract. The real CLI builds real indexes of a few seed abstracts; the LLM
is a scripted OpenAI-compatible endpoint on loopback (its titles chosen exactly), or llama.cpp
with SmolLM2 for real."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from rag.common.settings import Settings
from rag.index.corpus import Paper
from rag.index.llm_titles import check_title, write_titles

from .conftest import ROOT, Server, free_port

LIPSCHITZ, REWEIGHTING, CALIBRATION = "dead6e3e5157", "c76bcddaa534", "eb9032ba386d"  # unnamed seed papers
TAGGER = Settings().judging.tagger_model
GROUNDED = "Lipschitz-Continuous In-Context Transformers"
UNGROUNDED = "Quantum Loss Reweighting for Long-Tailed Classification"  # "Quantum": not in the abstract


class ScriptedTitles(BaseHTTPRequestHandler):
    """/v1/chat/completions answering each abstract with the title its `script` gives (a phrase of
    the abstract -> the title), or an HTTP failure (`mode`); every request is kept in `seen`."""

    script: dict[str, str]
    seen: list[dict]
    mode = "script"

    def do_POST(self):  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.seen.append(request)
        if self.mode == "500":
            return self.reply(500, {"error": {"message": "boom"}})
        if self.mode == "garbage":
            return self.reply(200, "<html>definitely not JSON</html>")
        abstract = request["messages"][-1]["content"]
        title = next((title for phrase, title in self.script.items() if phrase in abstract), "")
        choice = {"index": 0, "message": {"role": "assistant", "content": title}, "finish_reason": "stop"}
        reply = {"id": "t", "object": "chat.completion", "created": 0, "model": "scripted", "choices": [choice]}
        return self.reply(200, reply)

    def reply(self, status: int, body) -> None:
        raw = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture()
def endpoint():
    """A scripted endpoint of its own for each test: `endpoint.script`, `.seen`, `.mode`, `.url`."""
    handler = type("Endpoint", (ScriptedTitles,), {"script": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield handler
    server.shutdown()
    server.server_close()


def seed_file(path: Path, papers: list[Paper]) -> Path:
    path.write_text("ICML 2026 Papers\n\n" + "\n\n".join(p.text for p in papers) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def few(tmp_path, corpus) -> dict:
    """A seed folder of two unnamed abstracts and a named one, and where its index goes."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    named = next(p for p in corpus.papers if p.named)
    seed_file(seeds / "few.txt", [corpus.get(LIPSCHITZ), corpus.get(REWEIGHTING), named])
    return {"RAG_SEEDS_DIR": str(seeds), "RAG_INDEX_DIR": str(tmp_path / "index"), "RAG_MULTILINGUAL": "false"}


def rag(*args: str, env: dict) -> subprocess.CompletedProcess:
    """The `rag` command as a user runs it, with no LLM endpoint but the one `env` names."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_LLM_", "OPENAI_", "RAG_TITLES"))}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env={**inherited, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def papers_of(env: dict) -> dict[str, Paper]:
    """The papers the current build keeps, as the index's reader reads them."""
    stored = json.loads((Path(env["RAG_INDEX_DIR"]) / "current" / "papers.json").read_text())
    return {p["paper_id"]: Paper(**p) for p in stored["papers"]}


def llm(url: str) -> dict:
    return {"RAG_LLM_BASE_URL": url, "RAG_LLM_MODEL": "scripted", "RAG_LLM_MAX_RETRIES": "0"}


@pytest.mark.parametrize(
    ("title", "problem"),
    [
        (GROUNDED, None),
        ("Approximation Guarantees for Lipschitz Transformers", None),
        ("Lipschitz MLP and Attention Blocks", None),  # acronyms as the abstract writes them
        ("Lipschitz transformers via negative gradient flow", None),  # "flows" in the abstract: same stem
        ("Quantum Lipschitz Transformers", "ungrounded: 'Quantum'"),
        ("Lipschitz VIT Transformers", "ungrounded: 'VIT'"),  # an acronym not written so
        ('"Lipschitz Transformers"', "markup"),
        ("**Lipschitz** Transformers", "markup"),
        ("Lipschitz Transformers.", "sentence"),
        ("We introduce Lipschitz transformers", "sentence"),
        ("Gradient flows make Transformers stable", "sentence"),
        ("Transformers", "length"),
        ("Lipschitz " * 9, "length"),
        ("", "empty"),
    ],
)
def test_a_title_is_kept_only_when_grounded_in_its_abstract(corpus, title, problem):
    found = check_title(title.strip(), corpus.get(LIPSCHITZ).text, 8, TAGGER)
    assert found == problem or (found or "").split(":")[0] == problem


def test_grounded_llm_titles_are_shown_kept_through_adds_and_ungrounded_ones_refused(endpoint, few, corpus, tmp_path):
    endpoint.script = {"Lipschitz constant": GROUNDED, "long-tailed": UNGROUNDED}
    env = few | llm(endpoint.url)
    out = rag("index", "-q", "--titles", "llm", env=env)
    assert out.returncode == 0, out.stderr
    summary = "LLM titles: 2 written, 1 kept, 1 refused (a word not in the abstract: 1)"
    assert summary in out.stdout and summary in out.stderr  # printed, and logged as a warning
    assert len(endpoint.seen) == 2  # once per unnamed paper, never for the named one
    assert all(r["temperature"] == 0 and r["model"] == "scripted" for r in endpoint.seen)
    asked = [r["messages"][-1]["content"] for r in endpoint.seen]
    assert [sum(corpus.get(pid).text in prompt for prompt in asked) for pid in (LIPSCHITZ, REWEIGHTING)] == [1, 1]
    papers = papers_of(env)
    assert papers[LIPSCHITZ].llm_title == GROUNDED and papers[LIPSCHITZ].display_name == GROUNDED
    refused = papers[REWEIGHTING]
    assert refused.llm_title is None and refused.derived_title and refused.display_name == refused.derived_title

    # An add asks only about its new paper (RAG_TITLES=llm, the setting the flag overrides);
    # the titles of the build before are kept, not asked again.
    endpoint.script["Calibration, the alignment"] = "Calibration of Predicted Probabilities"
    new = seed_file(tmp_path / "new.txt", [corpus.get(CALIBRATION)])
    added = rag("add", str(new), env=env | {"RAG_TITLES": "llm"})
    assert added.returncode == 0, added.stderr
    assert "LLM titles: 1 written, 1 kept, 0 refused" in added.stdout
    assert len(endpoint.seen) == 3
    papers = papers_of(env)
    assert papers[CALIBRATION].display_name == "Calibration of Predicted Probabilities"
    assert papers[LIPSCHITZ].display_name == GROUNDED and papers[REWEIGHTING].llm_title is None

    service = Server({k: v for k, v in env.items() if not k.startswith("RAG_LLM")}, tmp_path / "server.log")
    try:
        shown = httpx.get(f"{service.url}/papers/{LIPSCHITZ}", timeout=30).json()
        assert shown["name"] == GROUNDED
        listed = {p["paper_id"]: p["name"] for p in httpx.get(f"{service.url}/papers", timeout=30).json()["papers"]}
        assert listed[REWEIGHTING] == refused.derived_title
    finally:
        service.stop()
    assert len(endpoint.seen) == 3  # serving never asks the LLM for titles


def test_a_dead_endpoint_leaves_the_derived_titles_and_the_build_succeeds(few):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    out = rag("index", "-q", "--titles", "llm", env=few | llm(dead))
    assert out.returncode == 0, out.stderr
    assert f"cannot reach the LLM at {dead}: 2 papers keep their derived titles" in out.stderr  # the warning
    assert "LLM titles: 0 written" in out.stdout and "indexed 3 papers" in out.stdout
    papers = papers_of(few)
    assert all(p.llm_title is None for p in papers.values())
    assert papers[LIPSCHITZ].derived_title and papers[LIPSCHITZ].display_name == papers[LIPSCHITZ].derived_title


@pytest.mark.parametrize(
    ("command", "asked"),
    [(["index"], "flag"), (["add", "FILE"], "flag"), (["index"], "setting"), (["serve"], "setting")],
)
def test_llm_titles_without_an_endpoint_stop_before_any_work(few, command, asked, tmp_path):
    """Asked by the flag or by RAG_TITLES: one line, a non-zero exit, nothing written; the service does not start."""
    args = [str(seed_file(tmp_path / "x.txt", [])) if a == "FILE" else a for a in command]
    flag, env = (["--titles", "llm"], few) if asked == "flag" else ([], few | {"RAG_TITLES": "llm"})
    out = rag(*args, *flag, env=env)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "RAG_TITLES=llm" in lines[0] and "RAG_LLM_BASE_URL" in lines[0], lines
    assert not Path(few["RAG_INDEX_DIR"]).exists()  # nothing written


def test_the_default_asks_no_llm_for_titles(endpoint, few):
    endpoint.script = {"Lipschitz constant": GROUNDED}
    out = rag("index", "-q", env=few | llm(endpoint.url))
    assert out.returncode == 0, out.stderr
    assert endpoint.seen == [] and "LLM titles" not in out.stdout + out.stderr
    assert all(p.llm_title is None for p in papers_of(few).values())


@pytest.mark.parametrize(
    ("mode", "refused", "failure"),
    [("garbage", {"unreadable": 2}, None), ("500", {}, "answered HTTP 500")],
)
def test_an_endpoint_answering_garbage_or_failing_leaves_the_derived_titles(endpoint, corpus, mode, refused, failure):
    endpoint.mode = mode
    papers = [dataclasses.replace(corpus.get(pid), derived_title="kept") for pid in (LIPSCHITZ, REWEIGHTING)]
    settings = Settings(titles="llm", llm_base_url=endpoint.url, llm_max_retries=0)
    report = write_titles(papers, settings)
    assert (report.kept, dict(report.refused)) == (0, refused)
    assert (report.failure or "").endswith(failure or "") and bool(report.failure) == bool(failure)
    assert len(endpoint.seen) == (2 if mode == "garbage" else 1)  # a failing endpoint is not asked again
    assert all(p.llm_title is None and p.display_name == "kept" for p in papers)


def test_a_real_llm_writes_titles_kept_only_when_grounded(llama_server, few):
    env = few | {"RAG_LLM_BASE_URL": llama_server, "RAG_LLM_MODEL": "smollm2", "RAG_LLM_TIMEOUT": "120"}
    out = rag("index", "-q", "--titles", "llm", env=env)
    assert out.returncode == 0, out.stderr
    manifest = json.loads((Path(few["RAG_INDEX_DIR"]) / "current" / "manifest.json").read_text())
    asked = manifest["llm_titles"]
    assert asked["asked"] == 2 and "failure" not in asked, asked
    assert asked["kept"] + sum(asked["refused"].values()) == 2
    for paper in papers_of(env).values():
        if paper.llm_title is not None:  # whatever SmolLM2 wrote, what is kept passes the check
            assert check_title(paper.llm_title, paper.text, 8, TAGGER) is None, paper.llm_title
            assert paper.display_name == paper.llm_title
        elif not paper.named:
            assert paper.display_name == paper.derived_title

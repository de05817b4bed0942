"""Start-up with bad and failing settings, on the real service: a value that cannot work stops
`rag serve` with one line and exit status 2; a part that is down or fails (the LLM endpoint, the
feedback database, Milvus, metrics, suggestions, MCP) is a state in /health and never fails an
answer. One small index (one seed file, English model) serves every case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from rag.common.settings import load_settings

from .conftest import ROOT, Server, free_port


def run(env: dict, *command: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, **env}
    command_line = [sys.executable, "-m", *command]
    return subprocess.run(command_line, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)


def serve(env: dict) -> subprocess.CompletedProcess:
    return run(env, "server.cli", "serve", "--host", "127.0.0.1", "--port", str(free_port()))


BAD = [
    ("RAG_FEEDBACK_DB", "mysqlx://rag:hunter2@db/rag", "not a database URL"),
    ("RAG_FEEDBACK_DB", "{a_file}/feedback.db", "is not a folder"),
    ("RAG_FEEDBACK_DB", "postgresql://rag@db:99999/rag", "port"),
    ("RAG_FEEDBACK_DB", "postgresql://[broken", "not a host name or an IP address"),
    ("RAG_FEEDBACK_DB", "postgresql://rag:hunter2@secret@db/rag", "in a password, @ is written %40"),
    ("RAG_LLM_BASE_URL", "http://[broken/v1", "not a host name or an IP address"),
    ("RAG_LLM_BASE_URL", "http://llm host:8080/v1", "not a host name or an IP address"),
    ("RAG_MILVUS_URI", "http://[::1:19530", "not a host name or an IP address"),
    ("RAG_CORS_ORIGINS", "http://[ui", "not an origin"),
    ("RAG_MODEL_CACHE", "{a_file}/models", "cannot be created"),
    ("RAG_LLM_BASE_URL", "localhost:8080/v1", "http://"),
    ("OPENAI_BASE_URL", "ftp://models.example/v1", "http://"),
    ("RAG_INDEX_DIR", "{a_file}/index", "cannot be created"),
    ("RAG_SEEDS_DIR", "{a_file}", "not a folder"),
    ("RAG_PORT", "70000", "65535"),
    ("RAG_HOST", "not a host", "host name"),
    ("RAG_MILVUS_URI", "grpc://milvus:19530", "http://"),
    ("RAG_CORS_ORIGINS", "http://ui.example/page", "not an origin"),
    ("RAG_API_KEY", "  ", "blank"),
    ("RAG_LOG_FORMAT", "xml", "'json' or 'text'"),
    ("RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE", "2", "less than or equal to 1"),
    ("RAG_EMBEDDING_MODEL", "no-such-model-package", "pip install no-such-model-package"),
    ("RAG_TAGGER_MODEL", "en_core_web_xx", "pip install en_core_web_xx"),
]


@pytest.mark.parametrize(("variable", "value", "problem"), BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_a_setting_that_cannot_work_stops_start_up_with_one_line(small_service, variable, value, problem):
    done = serve({**small_service["env"], variable: value.format(a_file=small_service["a_file"])})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    said = json.loads(lines[0])  # a service's stderr is JSON lines, even this one
    assert said["level"] == "CRITICAL" and said["logger"] == "rag.settings"
    message = said["message"]
    assert variable in message and problem in message and "for example" in message, message
    assert "hunter2" not in message


def test_with_text_logs_the_line_is_plain_text(small_service):
    done = serve({**small_service["env"], "RAG_LOG_FORMAT": "text", "RAG_PORT": "0"})
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert " CRITICAL rag.settings: invalid configuration: RAG_PORT='0': " in line and "RAG_PORT=8000" in line


def test_other_commands_say_it_as_a_message(small_service):
    done = run({**small_service["env"], "RAG_K": "0"}, "server.cli", "search", "anything")
    assert done.returncode == 2
    assert (
        done.stderr
        == "rag: invalid configuration: RAG_K='0': Input should be greater than or equal to 1; for example RAG_K=5\n"
    )


def test_uvicorn_given_the_factory_stops_the_same_way(small_service):
    env = {**small_service["env"], "RAG_LLM_BASE_URL": "127.0.0.1:8080"}
    done = run(env, "uvicorn", "server.app:create_app", "--factory", "--port", str(free_port()))
    assert done.returncode == 2
    said = [json.loads(line)["message"] for line in done.stderr.splitlines()]
    assert [m for m in said if "RAG_LLM_BASE_URL='127.0.0.1:8080': not an http://" in m], said
    assert "Traceback" not in done.stderr


def closed_port_url(scheme: str, path: str = "") -> str:
    return f"{scheme}://127.0.0.1:{free_port()}{path}"  # nothing listens there


FAILING = {
    "llm-down": ({"RAG_LLM_BASE_URL": closed_port_url("http", "/v1"), "RAG_LLM_MAX_RETRIES": "0"}, "llm"),
    "feedback-down": ({"RAG_FEEDBACK_DB": closed_port_url("postgresql", "/rag")}, "feedback"),
    "feedback-fails": ({"RAG_FAIL_PARTS": "feedback"}, "feedback"),
    "metrics-fail": ({"RAG_FAIL_PARTS": "metrics"}, "metrics"),
    "suggestions-fail": ({"RAG_FAIL_PARTS": "suggestions"}, "suggestions"),
    "mcp-fails": ({"RAG_FAIL_PARTS": "mcp"}, "mcp"),
}


@pytest.mark.parametrize(("extra", "part"), FAILING.values(), ids=FAILING.keys())
def test_a_failing_part_is_a_state_in_health_and_never_fails_an_answer(small_service, tmp_path, extra, part):
    service = Server(
        {**small_service["env"], **extra},
        tmp_path / "server.log",
        args=[sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "{port}"],
    )
    try:
        asked = {"question": small_service["question"]}
        answer = httpx.post(f"{service.url}/ask", json=asked, timeout=60)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["citations"] and body["answer"]
        streamed = httpx.post(f"{service.url}/ask", json={**asked, "stream": True}, timeout=60)
        assert streamed.status_code == 200 and "event: done" in streamed.text, streamed.text
        chat = {"model": "icml-rag", "messages": [{"role": "user", "content": small_service["question"]}]}
        assert httpx.post(f"{service.url}/v1/chat/completions", json=chat, timeout=60).status_code == 200

        parts = httpx.get(f"{service.url}/health").json()["parts"]
        assert parts[part] == "failing", parts
        assert all(state in ("ok", "off") for name, state in parts.items() if name != part), parts
        if part == "llm":
            assert body["fallback"] is True
        if part == "suggestions":
            assert body["suggestions"] == []
        else:
            assert body["suggestions"]
        mcp = httpx.post(f"{service.url}/mcp/", json={}, timeout=10)
        assert (mcp.status_code == 503) == (part == "mcp"), mcp.text
        metrics = httpx.get(f"{service.url}/metrics")
        assert metrics.status_code == 200
        if part != "llm":  # an LLM that fails is counted as rag_answers_total{outcome="fallback"}
            assert f'rag_part_failures_total{{part="{part}"}}' in metrics.text
    finally:
        service.stop()
    assert "Traceback" not in service.log()
    warned = [e for e in service.entries() if e["message"] == "part_failed"]
    assert warned and {e["part"] for e in warned} == {part}, warned


def test_milvus_down_at_start_is_a_state_not_a_refusal(small_service, tmp_path):
    uri = closed_port_url("http")
    service = Server(
        {**small_service["env"], "RAG_VECTOR_STORE": "milvus", "RAG_MILVUS_URI": uri, "RAG_MILVUS_TIMEOUT": "2"},
        tmp_path / "server.log",
        args=[sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "{port}"],
        until=lambda response: response.json().get("parts", {}).get("store") == "unreachable",
    )
    try:
        health = service.last_health
        assert health.status_code == 503 and health.json()["error"]["code"] in ("loading", "store_unavailable")
        answer = httpx.post(f"{service.url}/ask", json={"question": small_service["question"]}, timeout=60)
        assert answer.status_code == 503 and answer.json()["error"]["code"] in ("loading", "store_unavailable")
    finally:
        service.stop()
    assert "Traceback" not in service.log()
    assert any(e["message"] == "part_failed" and e["part"] == "store" for e in service.entries())


def test_a_plain_feedback_path_is_checked_like_a_folder(small_service, tmp_path):
    from rag.common.settings import load_settings

    settings = load_settings(feedback_db=str(tmp_path / "new" / "feedback.db"))
    assert settings.feedback_url == f"sqlite:///{tmp_path / 'new' / 'feedback.db'}"
    assert not Path(tmp_path / "new").exists()  # checked, not made: the store makes it on first use


def test_the_fitted_weights_are_read_from_their_file_and_written_back_the_same(tmp_path):
    from rag.common.weights import FITTED_WEIGHTS, fit_record, fitted, read_fitted, write_fitted

    packaged = fitted()
    assert packaged.english.answer_above == 0.11 and packaged.several.at_least == 2
    assert load_settings().judging.evidence == packaged  # the settings' defaults are the file's
    figures = {"false_abstention": np.float64(0.03), "answerable": np.int64(50)}  # as NumPy gives them
    record = {"english": fit_record(["dev", "dev leave-one-out"], every=3, **figures)}
    changed = packaged.model_copy(update={"english": packaged.english.model_copy(update={"bias": -6.123456789})})
    written = tmp_path / "fitted_weights.toml"
    write_fitted(written, changed, record)
    assert read_fitted(written) == changed and read_fitted(written).english.bias == -6.123456789
    assert 'date = "' in written.read_text() and "[fit.english]" in written.read_text()
    assert "false_abstention = 0.03\nansw" in written.read_text()
    write_fitted(written, packaged, fit={})  # the records of the parts not refitted are kept
    assert read_fitted(written) == packaged and "false_abstention = 0.03\nansw" in written.read_text()
    assert written.read_text().split("\n[fit.")[0] == FITTED_WEIGHTS.read_text().split("\n[fit.")[0]
    written.write_text(written.read_text().replace("cite_share = 0.7\n", ""))
    with pytest.raises(ValueError, match=r"\[english\] must hold"):
        read_fitted(written)


def test_each_setting_is_set_by_its_variable_and_read_in_its_group(monkeypatch, tmp_path):
    from rag.common.settings import FLAT_NAMES

    for variable, value in {
        "RAG_K": "7",
        "RAG_LLM_MODEL": "local",
        "OPENAI_BASE_URL": "http://127.0.0.1:8080/v1",
        "RAG_MAP_TOPICS": "3",
        "RAG_FEEDBACK_KEEP_HOURS": "2",
        "RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE": "0.2",
        "RAG_EVIDENCE__FRAMING__ASIDE__BELOW": "0.07",
        "RAG_CORS_ORIGINS": "http://a.example,http://b.example",
    }.items():
        monkeypatch.setenv(variable, value)
    settings = load_settings(index_dir=tmp_path / "index", generator="extractive")
    assert (settings.retrieval.k, settings.llm.model, settings.llm.base_url) == (7, "local", "http://127.0.0.1:8080/v1")
    assert (settings.map.topics, settings.feedback.keep_hours, settings.answering.generator) == (3, 2.0, "extractive")
    assert settings.judging.evidence.english.answer_above == 0.2
    assert settings.judging.evidence.english.bias == load_settings().judging.evidence.english.bias  # the others kept
    aside = settings.judging.evidence.framing.aside  # at any depth
    assert aside.below == 0.07 and aside.inside == load_settings().judging.evidence.framing.aside.inside != 0
    assert settings.service.cors_origins == ["http://a.example", "http://b.example"]
    assert settings.indexing.index_dir == tmp_path / "index"
    dense = settings.model_copy(update={"retrieval_mode": "dense", "llm_fallback": False})
    assert (dense.retrieval.retrieval_mode, dense.llm.fallback, dense.retrieval.k) == ("dense", False, 7)
    assert settings.retrieval.retrieval_mode == "hybrid"
    with pytest.raises(KeyError, match="not a setting"):
        settings.model_copy(update={"retrieval_mod": "dense"})
    # Every setting is in the full configuration table (docs/configuration.md, which the README's
    # configuration section links), by its variable.
    readme = (ROOT / "README.md").read_text().split("## Configuration")[1].split("\n### ")[0]
    assert "docs/configuration.md" in readme
    table = (ROOT / "docs" / "configuration.md").read_text()
    named = {v.lower().split("__")[0] for v in re.findall(r"`RAG_([A-Z0-9_]+)", table)}
    assert set(FLAT_NAMES) <= named, set(FLAT_NAMES) - named

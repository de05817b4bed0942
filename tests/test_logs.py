"""Everything a running service writes on stderr is JSON lines: `rag serve` with two workers,
read from its first line to its last, through start, answers, errors, MCP and shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import httpx

from .conftest import ROOT, Server, free_port

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
}


def test_every_stderr_line_of_rag_serve_is_one_json_object(small_service, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        **small_service["env"],
        "RAG_FEEDBACK_DB": f"postgresql://rag@127.0.0.1:{free_port()}/rag",  # down: a warning, then errors
        "RAG_LLM_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",  # down: every answer falls back
        "RAG_LLM_MAX_RETRIES": "0",
        "RAG_LIBRARY_LOG_LEVEL": "INFO",  # httpx, the MCP SDK, FAISS's loader... all write lines too
        "PYTHONWARNINGS": "always",
    }
    stderr = tmp_path / "stderr"
    with open(stderr, "w") as sink:
        service = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        deadline, healthy = time.monotonic() + 120, 0
        while healthy < 6:  # several answers in a row: both workers have their index
            assert service.poll() is None and time.monotonic() < deadline, stderr.read_text()
            with contextlib.suppress(httpx.TransportError):
                healthy = healthy + 1 if httpx.get(f"{url}/health", timeout=2).status_code == 200 else 0
            time.sleep(0.2)
        question = {"question": small_service["question"]}
        for _ in range(2):
            assert httpx.post(f"{url}/ask", json=question, timeout=60).status_code == 200
        assert httpx.post(f"{url}/ask", json={**question, "stream": True}, timeout=60).status_code == 200
        assert httpx.post(f"{url}/search", json={"query": "robustness"}, timeout=60).status_code == 200
        assert httpx.get(f"{url}/papers/nope", timeout=10).status_code == 404
        assert (
            httpx.post(
                f"{url}/ask", content=b"{not json", headers={"Content-Type": "application/json"}, timeout=10
            ).status_code
            == 400
        )
        assert httpx.post(f"{url}/feedback", json={"answer_id": "0" * 32, "rating": "up"}).status_code == 503
        mcp = httpx.post(
            f"{url}/mcp/", json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"}, timeout=10
        )
        assert mcp.status_code == 200, mcp.text
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=30)

    lines = stderr.read_text().splitlines()
    records = []
    for line in lines:
        record = json.loads(line)  # fails on any line that is not one JSON object
        assert isinstance(record, dict) and {"time", "level", "logger", "message"} <= set(record), line
        records.append(record)
    loggers = {r["logger"] for r in records}
    messages = [r["message"] for r in records]
    assert {"uvicorn.error", "rag.http", "rag.parts", "faiss.loader", "mcp.server.streamable_http"} <= loggers
    assert any(m.startswith("Started parent process") for m in messages)
    assert sum(m.startswith("Started server process") for m in messages) == 2  # each worker
    assert sum(m.startswith("Finished server process") for m in messages) >= 2
    requests = [r for r in records if r["message"] == "request"]
    assert {r["status"] for r in requests} >= {200, 400, 404, 503}
    assert all(len(r["request_id"]) == 32 for r in requests if r["route"] != "/health")
    assert any(r["logger"] == "rag.parts" and r["level"] == "WARNING" and r["part"] == "feedback" for r in records)
    assert not any("color_message" in r for r in records)


def test_a_service_that_builds_its_first_index_writes_json_lines_too(small_service, tmp_path):
    env = {**small_service["env"], "RAG_INDEX_DIR": str(tmp_path / "index"), "RAG_LIBRARY_LOG_LEVEL": "INFO"}
    log = tmp_path / "stderr"
    service = Server(
        env, log, args=[sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "{port}"]
    )
    try:
        assert service.first_health.status_code == 503  # building, then 200
    finally:
        service.stop()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r["message"] == "caught_up" for r in records), records[-5:]

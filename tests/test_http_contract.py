"""The HTTP contract beyond the happy path: OpenAI compatibility, bad requests, auth, load
state, concurrency, logging, several workers. Every server here is a real uvicorn process."""

import json
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from openai import OpenAI

from rag.index.corpus import load_corpus

from .conftest import Server, index_env

PAPER_ID = "c9f6ac55caba"  # Spiral RoPE
LONG = "x" * 2001

# (method, path, request kwargs, expected status, expected error code)
BAD_REQUESTS = [
    (
        "POST",
        "/search",
        {"content": b"{not json", "headers": {"content-type": "application/json"}},
        400,
        "invalid_json",
    ),
    ("POST", "/search", {"json": {}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": ""}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "   \n "}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": LONG}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": 42}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "rope", "k": 0}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "rope", "k": 51}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "rope", "k": "five"}}, 422, "invalid_request"),
    ("POST", "/search", {"json": ["query", "rope"]}, 422, "invalid_request"),
    (
        "POST",
        "/search",
        {"content": b'{"query": "' + b"y" * 70_000 + b'"}', "headers": {"content-type": "application/json"}},
        413,
        "body_too_large",
    ),
    ("POST", "/ask", {"json": {"question": ""}}, 422, "invalid_request"),
    ("POST", "/ask", {"json": {"question": LONG}}, 422, "invalid_request"),
    ("POST", "/ask", {"json": {"question": None}}, 422, "invalid_request"),
    (
        "POST",
        "/ask",
        {"json": {"question": "q", "history": [{"role": "user", "content": "x"}] * 21}},
        422,
        "invalid_request",
    ),
    (
        "POST",
        "/ask",
        {"json": {"question": "q", "history": [{"role": "robot", "content": "x"}]}},
        422,
        "invalid_request",
    ),
    ("POST", "/ask", {"json": {"question": "q", "history": "not a list"}}, 422, "invalid_request"),
    ("POST", "/ask", {"json": {"question": "q", "k": -1}}, 422, "invalid_request"),
    ("POST", "/ask", {"json": {"question": "q", "stream": "maybe"}}, 422, "invalid_request"),
    ("POST", "/ask", {"json": {"question": "q", "paper_ids": []}}, 422, "invalid_scope"),
    ("POST", "/ask", {"json": {"question": "q", "paper_ids": "c9f6ac55caba"}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "q", "paper_ids": [""]}}, 422, "invalid_request"),
    ("POST", "/search", {"json": {"query": "q", "paper_ids": ["000000000000"]}}, 404, "paper_not_found"),
    (
        "POST",
        "/ask",
        {"content": b"question=hi", "headers": {"content-type": "application/x-www-form-urlencoded"}},
        422,
        "invalid_request",
    ),
    ("GET", "/papers/000000000000", {}, 404, "paper_not_found"),
    ("GET", "/papers/../../etc/passwd", {}, 404, "not_found"),
    ("GET", "/nowhere", {}, 404, "not_found"),
    ("GET", "/search", {}, 405, "method_not_allowed"),
    ("DELETE", "/papers", {}, 405, "method_not_allowed"),
    ("PUT", "/ask", {"json": {"question": "q"}}, 405, "method_not_allowed"),
    ("POST", "/v1/chat/completions", {"json": {"messages": []}}, 422, "invalid_request"),
    (
        "POST",
        "/v1/chat/completions",
        {"json": {"messages": [{"role": "assistant", "content": "hi"}]}},
        422,
        "invalid_request",
    ),
    ("POST", "/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": ""}]}}, 422, "invalid_request"),
    (
        "POST",
        "/v1/chat/completions",
        {"json": {"messages": [{"role": "wizard", "content": "hi"}]}},
        422,
        "invalid_request",
    ),
    ("POST", "/v1/chat/completions", {"json": {"model": "icml-rag"}}, 422, "invalid_request"),
]


def test_bad_requests_answer_4xx_with_an_error_object(server):
    assert len(BAD_REQUESTS) >= 25
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for method, path, kwargs, status, code in BAD_REQUESTS:
            response = client.request(method, path, **kwargs)
            assert response.status_code == status, (method, path, response.text)
            error = response.json()["error"]
            assert error["code"] == code and error["message"], (method, path, error)
            assert "Traceback" not in response.text
        assert client.get("/health").json()["status"] == "ok"
    assert "Traceback" not in server.log()


def test_the_openai_client_non_streaming(server):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["icml-rag"]
    reply = client.chat.completions.create(
        model="icml-rag",
        messages=[
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "What speedup does Jacobi Forcing report?"},
        ],
    )
    text = reply.choices[0].message.content
    assert "3.8" in text and "[1]" in text
    assert text.rstrip().endswith("[1] Jacobi Forcing (paper bf7c34110fa6)")
    assert reply.model_extra["citations"][0]["name"] == "Jacobi Forcing"
    assert reply.model_extra["confidence"] == "high"
    low = client.chat.completions.create(
        model="icml-rag", messages=[{"role": "user", "content": "Does MedMosaic include dermatology photographs?"}]
    )
    assert low.model_extra["confidence"] == "low"
    assert low.choices[0].message.content.startswith(f'None of these abstracts mentions "{low.model_extra["missing"]}"')


def test_the_openai_client_streaming_with_history(server):
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="icml-rag",
        stream=True,
        messages=[
            {"role": "user", "content": "How does Jacobi Forcing work?"},
            {"role": "assistant", "content": "It post-trains a causal multi-token predictor [1]."},
            {"role": "user", "content": "What speedup does it report?"},
        ],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert len(chunks) > 5 and "3.8" in text and "Sources:\n[1] Jacobi Forcing" in text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["citations"][0]["name"] == "Jacobi Forcing"
    assert chunks[-1].model_extra["confidence"] == "high"


def test_the_openapi_page_has_every_route_with_examples(server):
    assert httpx.get(f"{server.url}/docs").status_code == 200
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert {"/health", "/search", "/ask", "/papers", "/papers/{paper_id}", "/v1/chat/completions", "/v1/models"} <= set(
        spec["paths"]
    )
    assert "examples" in json.dumps(spec["components"]["schemas"]["AskRequest"])
    # The key is a declared bearer scheme on the keyed routes: /docs shows an Authorize button.
    assert spec["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "RAG_API_KEY, when the service has one",
    }
    assert spec["paths"]["/ask"]["post"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in spec["paths"]["/health"]["get"]


def test_twenty_simultaneous_asks_match_the_sequential_answers(server):
    questions = [
        "What speedup does Jacobi Forcing report?",
        "What is MedMosaic?",
        "Who won the 2022 FIFA World Cup?",
        "How many problems are in OMNI-Geometry?",
        "Which benchmark evaluates agents under noisy environments?",
    ] * 4
    with httpx.Client(base_url=server.url, timeout=120) as client:

        def ask(q):
            response = client.post("/ask", json={"question": q})
            assert response.status_code == 200
            body = response.json()
            return body["answer"], [c["paper_id"] for c in body["citations"]], body["abstained"]

        sequential = [ask(q) for q in questions]
        with ThreadPoolExecutor(max_workers=20) as pool:
            concurrent = list(pool.map(ask, questions))
    assert concurrent == sequential


def test_requests_are_logged_as_json_lines_with_their_id_and_without_the_question(server):
    response = httpx.post(
        f"{server.url}/ask",
        json={"question": "What does the secret word zanzibar mean?"},
        headers={"X-Request-ID": "7d6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"},
        timeout=60,
    )
    assert response.headers["X-Request-ID"] == "7d6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"  # the caller's id, echoed
    fresh = httpx.get(f"{server.url}/health", timeout=10).headers["X-Request-ID"]  # or a new one
    deadline = time.monotonic() + 5  # a request's line is written as its response ends
    while not any(e["request_id"] == fresh for e in server.requests()) and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = server.requests()
    mine = [e for e in lines if e["request_id"] == "7d6f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"]
    assert [(e["method"], e["route"], e["status"]) for e in mine] == [("POST", "/ask", 200)]
    assert any(e["request_id"] == fresh and e["route"] == "/health" for e in server.requests())
    assert all(e["ms"] >= 0 and e["level"] == "INFO" for e in lines)
    assert "zanzibar" not in server.log()


def test_liveness_readiness_and_metrics(server):
    assert httpx.get(f"{server.url}/livez", timeout=10).json() == {"status": "alive"}
    ready = httpx.get(f"{server.url}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["papers"] == 86

    def answers() -> dict:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        return {o: float(v) for o, v in re.findall(r'^rag_answers_total\{outcome="(\w+)"\} (\S+)$', text, re.M)}

    before = answers()
    httpx.post(f"{server.url}/ask", json={"question": "What speedup does Jacobi Forcing report?"}, timeout=60)
    httpx.post(f"{server.url}/ask", json={"question": "How do I bake sourdough bread?", "stream": True}, timeout=60)
    after = answers()
    assert after.get("answered", 0) - before.get("answered", 0) == 1
    assert after.get("abstained", 0) - before.get("abstained", 0) == 1
    text = httpx.get(f"{server.url}/metrics", timeout=10)
    assert text.headers["content-type"].startswith("text/plain")
    assert re.search(r'^rag_http_requests_total\{method="POST",route="/ask",status="200"\} \d', text.text, re.M)
    assert re.search(r'^rag_http_request_seconds_bucket\{le="0.05",route="/ask"\} \d', text.text, re.M)
    assert "rag_index_papers 86.0" in text.text and "rag_answers_in_flight 0.0" in text.text


def test_a_service_still_loading_is_alive_but_not_ready(tmp_path):
    empty = Server(
        index_env(tmp_path / "no-index"), tmp_path / "loading.log", until=lambda response: response.status_code == 503
    )
    try:
        assert httpx.get(f"{empty.url}/livez", timeout=10).status_code == 200
        not_ready = httpx.get(f"{empty.url}/readyz", timeout=10)
        assert not_ready.status_code == 503 and not_ready.json()["error"]["code"] in ("loading", "index_missing")
    finally:
        empty.stop()


def test_with_an_api_key_every_route_but_the_probes_needs_it(keyed_server):
    url = keyed_server.url
    for probe in ("/health", "/livez", "/readyz"):
        assert httpx.get(f"{url}{probe}").status_code == 200
    for method, path, body in [
        ("POST", "/search", {"query": "rope"}),
        ("POST", "/ask", {"question": "rope?"}),
        ("GET", "/papers", None),
        ("GET", f"/papers/{PAPER_ID}", None),
        ("GET", "/v1/models", None),
        ("GET", "/metrics", None),
    ]:
        for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}]:
            response = httpx.request(method, f"{url}{path}", json=body, headers=headers, timeout=60)
            assert response.status_code == 401, (path, headers)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
        ok = httpx.request(method, f"{url}{path}", json=body, headers={"Authorization": "Bearer s3cret"}, timeout=60)
        assert ok.status_code == 200, path
    reply = OpenAI(base_url=f"{url}/v1", api_key="s3cret").chat.completions.create(
        model="icml-rag", messages=[{"role": "user", "content": "What is MedMosaic?"}]
    )
    assert "MedMosaic" in reply.choices[0].message.content


def test_cors_allows_only_the_configured_origins(keyed_server, server):
    preflight = {"Origin": "http://ui.example", "Access-Control-Request-Method": "POST"}
    allowed = httpx.options(f"{keyed_server.url}/search", headers=preflight)
    assert allowed.headers.get("access-control-allow-origin") == "http://ui.example"
    other = httpx.options(f"{keyed_server.url}/search", headers={**preflight, "Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    default = httpx.get(f"{server.url}/health", headers={"Origin": "http://ui.example"})
    assert "access-control-allow-origin" not in default.headers


def test_health_is_503_while_loading_and_when_there_is_no_index(tmp_path, index_dir, small_seeds):
    starting = Server(index_env(index_dir), tmp_path / "starting.log")
    try:
        first = starting.first_health
        assert first.status_code == 503 and first.json()["error"]["code"] == "loading"
        assert first.headers["retry-after"] == "2"
    finally:
        starting.stop()

    def loaded_or_failed(response):
        return response.status_code == 200 or response.json()["error"]["code"] != "loading"

    # No index yet: the port opens at once, and the first build is made behind it.
    fresh = Server(
        index_env(tmp_path / "no-index", RAG_SEEDS_DIR=str(small_seeds), RAG_MULTILINGUAL="false"),
        tmp_path / "fresh.log",
        until=loaded_or_failed,
    )
    try:
        assert fresh.first_health.status_code == 503 and fresh.first_health.json()["error"]["code"] == "loading"
        assert fresh.first_health.headers["retry-after"] == "2"
        assert fresh.last_health.status_code == 200, fresh.last_health.text
        assert fresh.last_health.json()["papers"] == len(load_corpus(small_seeds))
    finally:
        fresh.stop()

    # No index and nothing to build it from: 503 with the reason, on every route that needs one.
    empty = Server(
        index_env(tmp_path / "none", RAG_SEEDS_DIR=str(tmp_path / "no-seeds")),
        tmp_path / "empty.log",
        until=loaded_or_failed,
    )
    try:
        health = empty.last_health
        assert health.status_code == 503 and health.json()["error"]["code"] == "corpus_error"
        assert "no-seeds: not a directory" in health.json()["error"]["message"]
        search = httpx.post(f"{empty.url}/search", json={"query": "rope"})
        assert search.status_code == 503 and search.json()["error"]["code"] == "corpus_error"
    finally:
        empty.stop()


def test_rag_serve_runs_several_workers(tmp_path, index_dir):
    command = [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", "{port}", "--workers", "2"]
    served = Server(index_env(index_dir), tmp_path / "workers.log", args=command)
    try:
        with httpx.Client(base_url=served.url, timeout=60) as client:
            # Each worker loads the index itself and answers 503 "loading" until it has; which
            # worker accepts a connection is up to the kernel, so wait for both to say "ready".
            deadline = time.monotonic() + 120
            while sum(e["message"] == "ready" for e in served.entries()) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            for _ in range(30):
                response = client.post(
                    "/search",
                    json={"query": "rotary embeddings for vision transformers"},
                    headers={"Connection": "close"},
                )
                assert response.json()["results"][0]["name"] == "Spiral RoPE"
        assert served.log().count("Started server process") >= 2
    finally:
        served.stop()

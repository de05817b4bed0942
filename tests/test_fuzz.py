"""Schemathesis fuzzes every operation of the service's own /openapi.json, against a real
uvicorn server that serves a copy of the session index (POST /papers writes a new build and a
seed file, so the index and the seeds folder are both copies).

It proves, for every request Schemathesis makes (the schema's examples, its coverage cases,
then random valid and invalid requests): no 5xx; a documented status code and content type; a
body that matches the documented schema; every error is `{"error": {"code", "message"}}`; and
every operation answered 2xx at least once, so the fuzzing got past validation.

Every error status the service answers is declared in /openapi.json with the error body
(`test_errors_are_documented_with_their_body`), so the status check tolerates nothing.

Budget: RAG_FUZZ_EXAMPLES random requests per operation (default 10), on top of the examples
and coverage cases; each request must answer within REQUEST_TIMEOUT (the whole test within the
suite's pytest-timeout). A larger run:
    RAG_FUZZ_EXAMPLES=200 .venv/bin/python -m pytest tests/test_fuzz.py -x -q -s
(-s also prints how many requests the server answered, by route and status.)
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from .conftest import SEEDS, Server, index_env

EXAMPLES = int(os.environ.get("RAG_FUZZ_EXAMPLES", "10"))
REQUEST_TIMEOUT = 30  # seconds; instead of Hypothesis' deadline, which is flaky on a loaded machine
API_KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}

# Operations whose 2xx body has no schema in /openapi.json: body conformance is vacuous there.
UNDESCRIBED = {"GET /v1/models", "POST /v1/chat/completions"}


def error_envelope(ctx, response, case):
    """Every 4xx/5xx body is {"error": {"code": str, "message": str}}."""
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError) as e:
            raise AssertionError(f"{response.status_code} without an error object: {response.text[:300]!r}") from e
        assert isinstance(error.get("code"), str) and isinstance(error.get("message"), str), error


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    error_envelope,
]
SEEN: dict[str, set[int]] = {}  # operation -> the statuses it answered while fuzzed


def answered(server) -> Counter:
    """(method, route, status) of every request, from the server's one log line per request."""
    return Counter((r["method"], r["route"], r["status"]) for r in server.requests())


@pytest.fixture(scope="module")
def fuzz_server(index_dir, tmp_path_factory):
    link = os.readlink(index_dir / "current")
    assert not os.path.isabs(link), f"`current` -> {link} is absolute: a copy would serve the original"
    work = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(index_dir, work / "index", symlinks=True)
    shutil.copytree(SEEDS, work / "seeds")
    env = index_env(work / "index", RAG_SEEDS_DIR=str(work / "seeds"), RAG_API_KEY=API_KEY, RAG_GENERATOR="extractive")
    server = Server(env, work / "server.log")
    yield server
    server.stop()
    served = answered(server)
    print(f"\nfuzz server: {sum(served.values())} requests answered (method, route, status):")
    for (method, route, status), n in sorted(served.items()):
        print(f"  {n:5d}  {status}  {method} {route}")


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    loaded = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    papers = httpx.get(f"{fuzz_server.url}/papers", headers=AUTH).json()["papers"]
    real_ids = st.sampled_from([paper["paper_id"] for paper in papers]).map(lambda paper_id: {"paper_id": paper_id})

    @loaded.hook
    def before_generate_path_parameters(context, strategy):
        """Random ids only ever find 404: draw real ones too."""
        return st.one_of(strategy, real_ids)

    given = [
        httpx.post(f"{fuzz_server.url}/ask", json={"question": q}, headers=AUTH, timeout=60).json()["answer_id"]
        for q in ("What speedup does Jacobi Forcing report?", "What does MedScope do?")
    ]
    ratings = st.fixed_dictionaries(
        {"answer_id": st.sampled_from(given), "rating": st.sampled_from(["up", "down"])},
        optional={"comment": st.text(max_size=50)},
    )

    @loaded.hook
    def before_generate_body(context, strategy):
        """The same for the answers a rating names: random ids are never answers that were given."""
        return st.one_of(strategy, ratings) if context.operation.path == "/feedback" else strategy

    return loaded


@pytest.fixture(autouse=True)
def _nodeid(request):
    """schemathesis 4.32.5's from_fixture reads and renames `item._nodeid`, which pytest 9.2 no
    longer has (it became `_id`); give it back (it only names the per-operation reports)."""
    request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_fuzz_every_operation(case):
    response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=REQUEST_TIMEOUT)
    SEEN.setdefault(case.operation.label, set()).add(response.status_code)


def test_every_operation_answered_2xx(api_schema):
    if not SEEN:
        pytest.skip("run together with test_fuzz_every_operation")
    operations = {result.ok().label for result in api_schema.get_all_operations()}
    reached = {label for label, statuses in SEEN.items() if any(200 <= s < 300 for s in statuses)}
    assert operations <= reached, f"never answered 2xx: {sorted(operations - reached)}; seen: {SEEN}"


# "\ud800" is valid JSON but a lone surrogate: text the generators above never draw.
SURROGATES = [
    ("/search", {"query": "rope \ud800"}),
    ("/ask", {"question": "rope \ud800"}),
    ("/ask", {"question": "rope \ud800", "stream": True}),
    ("/papers", {"filename": "new.txt", "content": "Title\n\nWe propose \ud800."}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "rope \ud800"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "rope \udfff"}]}]}),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "\ud800"}, {"role": "user", "content": "rope"}]},
    ),
]


@pytest.mark.parametrize("path, body", SURROGATES)
def test_lone_surrogates_are_refused_not_crashed(fuzz_server, path, body):
    response = httpx.post(
        f"{fuzz_server.url}{path}",
        content=json.dumps(body),
        timeout=REQUEST_TIMEOUT,
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"


def test_errors_are_documented_with_their_body(fuzz_server):
    """Every declared 4xx/5xx answers ErrorResponse; UNDESCRIBED is exactly the 2xx without a schema."""
    spec = httpx.get(f"{fuzz_server.url}/openapi.json").json()
    operations = {f"{method.upper()} {path}": op for path, item in spec["paths"].items() for method, op in item.items()}
    for label, op in operations.items():
        for status, response in op["responses"].items():
            if status[0] in "45":
                body = response.get("content", {}).get("application/json", {}).get("schema", {})
                assert body.get("$ref", "").endswith("/ErrorResponse"), (label, status, response)
        assert "401" in op["responses"] or label in ("GET /health", "GET /livez", "GET /readyz"), (
            label
        )  # the open probes
    undescribed = {
        label
        for label, op in operations.items()
        if not any(
            media.get("schema")
            for status, response in op["responses"].items()
            if status[0] == "2"
            for media in response.get("content", {}).values()
        )
    }
    assert undescribed == UNDESCRIBED

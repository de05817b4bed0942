"""/v1 as chat UIs use it: long chats with system messages and tool definitions, "continue",
background requests (title, tags, follow-ups, queries), usage, and citations as annotations.

The request shapes recorded from a real Open WebUI are replayed from tests/fixtures/open_webui/."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

FIXTURES = Path(__file__).parent / "fixtures" / "open_webui"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "d" * 1900,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for i in range(36)
]


def chat(server, **body) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json={"model": "icml-rag", **body}, timeout=120)


def streamed(server, **body) -> list[dict]:
    """The chunks of a streamed reply, [DONE] checked and dropped."""
    response = chat(server, stream=True, **body)
    assert response.status_code == 200, response.text
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def long_chat(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer in English."}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Question {i} about rotary embeddings?"},
            {"role": "assistant", "content": f"Answer {i} about Spiral RoPE [1]."},
        ]
    return messages + [{"role": "user", "content": "What speedup does Jacobi Forcing report?"}]


def test_a_long_chat_with_tools_and_a_system_message_is_answered(server):
    messages = long_chat(30)  # 62 messages; the service reads the last 20 turns
    body = {"messages": messages, "tools": TOOLS, "tool_choice": "auto", "temperature": 0.7}
    assert len(json.dumps(body)) > 64 * 1024  # over the limit of the other routes
    response = chat(server, **body)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert "3.8" in reply["choices"][0]["message"]["content"] and reply["citations"][0]["name"] == "Jacobi Forcing"
    assert httpx.post(f"{server.url}/ask", json={"question": "x", "pad": "y" * 70_000}).status_code == 413
    too_big = chat(server, messages=messages, padding="z" * (1024 * 1024))
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "body_too_large"


def test_usage_counts_real_tokens_and_grows_with_the_history(server):
    short = chat(server, messages=[{"role": "user", "content": "What speedup does Jacobi Forcing report?"}]).json()
    longer = chat(server, messages=long_chat(3)).json()
    for reply in (short, longer):
        usage = reply["usage"]
        assert usage["prompt_tokens"] > 5 and usage["completion_tokens"] > 10
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert longer["usage"]["prompt_tokens"] > short["usage"]["prompt_tokens"]

    chunks = streamed(
        server, messages=[{"role": "user", "content": "What is MedMosaic?"}], stream_options={"include_usage": True}
    )
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 10
    assert all("usage" not in c for c in chunks[:-1])
    plain = streamed(server, messages=[{"role": "user", "content": "What is MedMosaic?"}])
    assert all("usage" not in c for c in plain)


def test_citations_go_out_as_url_citation_annotations(server):
    reply = chat(server, messages=[{"role": "user", "content": "What speedup does Jacobi Forcing report?"}]).json()
    message = reply["choices"][0]["message"]
    notes = message["annotations"]
    assert [n["type"] for n in notes] == ["url_citation"] * len(reply["citations"])
    first = notes[0]["url_citation"]
    assert first["title"] == "Jacobi Forcing" and first["url"].endswith(f"/#paper={reply['citations'][0]['paper_id']}")
    cited = message["content"][first["start_index"] : first["end_index"]]
    assert cited.endswith("[1]") and "speedup" in cited and "\n" not in cited

    chunks = streamed(server, messages=[{"role": "user", "content": "What speedup does Jacobi Forcing report?"}])
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    final = chunks[-1]["choices"][0]
    assert final["finish_reason"] == "stop"
    span = final["delta"]["annotations"][0]["url_citation"]
    assert content[span["start_index"] : span["end_index"]].endswith("[1]")
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    parsed = client.chat.completions.create(
        model="icml-rag", messages=[{"role": "user", "content": "What is MedMosaic?"}]
    )
    assert parsed.choices[0].message.annotations[0].url_citation.title == "MedMosaic"


def test_continue_response_gets_a_well_formed_completion(server):
    messages = [
        {"role": "user", "content": "What speedup does Jacobi Forcing report?"},
        {"role": "assistant", "content": "The trained models achieve 3.8x [1]."},
    ]
    reply = chat(server, messages=messages)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"] == {"role": "assistant", "content": ""}
    chunks = streamed(server, messages=messages)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


CONVERSATION = (
    "<chat_history>\nUSER: How does Jacobi Forcing work?\nASSISTANT: Jacobi Forcing post-trains a "
    "causal multi-token predictor [1].\nUSER: What speedup does it report?\nASSISTANT: 3.8x [1].\n"
    "</chat_history>"
)


@pytest.mark.parametrize(
    "ask_for,key,kind",
    [
        ('Generate a concise title for the chat. Respond only with JSON: { "title": "your title" }', "title", str),
        ('Generate 1-3 broad tags categorizing the chat. JSON format: { "tags": ["tag1", "tag2"] }', "tags", list),
        (
            'Suggest 3-5 follow-up questions. JSON format: { "follow_ups": ["Question 1?", "Question 2?"] }',
            "follow_ups",
            list,
        ),
        ('Generate search queries. Return JSON: { "queries": ["query1"] }', "queries", list),
    ],
)
def test_background_requests_get_the_json_they_ask_for(server, ask_for, key, kind):
    prompt = "### Task:\n" + ask_for + "\n### Guidelines:\n" + "- be brief\n" * 200 + CONVERSATION
    assert len(prompt) > 2000
    reply = chat(server, messages=[{"role": "user", "content": prompt}])
    assert reply.status_code == 200, reply.text
    answer = json.loads(reply.json()["choices"][0]["message"]["content"])
    assert list(answer) == [key] and isinstance(answer[key], kind) and answer[key]
    if key == "title":
        assert answer[key].startswith("How does Jacobi Forcing work")
    if key == "follow_ups":
        assert all(q.endswith("?") for q in answer[key]) and any("Jacobi Forcing" in q for q in answer[key])
    if key == "queries":
        assert answer[key] == ["What speedup does it report?"]
    chunks = streamed(server, messages=[{"role": "user", "content": prompt}])
    assert json.loads("".join(c["choices"][0]["delta"].get("content", "") for c in chunks)) == answer


def test_a_long_question_that_asks_for_nothing_in_json_is_still_refused(server):
    reply = chat(server, messages=[{"role": "user", "content": "rope " * 500}])
    assert reply.status_code == 422 and "at most 2000" in reply.json()["error"]["message"]


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_open_webui_requests_are_served(server, fixture):
    """Each request shape recorded from Open WebUI 0.12.4 gets the reply that UI can use."""
    recorded = json.loads(fixture.read_text())
    expect = recorded["expect"]
    response = httpx.request(recorded["method"], f"{server.url}{recorded['path']}", json=recorded["body"], timeout=120)
    assert response.status_code == expect["status"], (recorded["what"], response.text[:500])
    if response.status_code != 200 or recorded["method"] == "GET":
        return
    body = recorded["body"]
    if body.get("stream"):
        chunks = [
            json.loads(line[6:])
            for line in response.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
        assert response.text.rstrip().endswith("data: [DONE]")
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert ("usage" in chunks[-1]) == bool(expect.get("usage"))
    else:
        content = response.json()["choices"][0]["message"]["content"]
    if expect.get("answer"):
        assert "[1]" in content or "not covered" in content.lower() or "abstracts" in content.lower(), content[:300]
    if "json" in expect:
        reply = json.loads(content)
        assert list(reply) == [expect["json"]], reply
        if expect["json"] == "follow_ups":
            assert 1 <= len(reply["follow_ups"]) <= 5 and all(len(q) <= 400 for q in reply["follow_ups"])
        if expect["json"] == "title":
            assert 0 < len(reply["title"]) <= 80

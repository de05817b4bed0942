"""Questions scoped to chosen papers (`paper_ids`) on the real service: /search, /ask (JSON and
SSE), the OpenAI-compatible /v1 (the scope in `metadata`), its errors, and the page's scope chips
in Debian's Chromium. MCP's tools are scoped in test_mcp.py. Each question's unscoped answer cites
papers outside the scope, so a scope that leaks fails here."""

from __future__ import annotations

import json

import httpx
from openai import OpenAI
from playwright.sync_api import Page, expect

from .conftest import ARTIFACTS, ask

SPEED, DLLM_CACHE, MEDSCOPE = "3b1953c4f7da", "65846cd55df9", "22b01627a253"
SPEED_UPS = "Which papers speed up diffusion language models, and by how much?"
SCOPE = {SPEED, DLLM_CACHE}
MEDICAL = "Which papers build medical benchmarks?"


def cited(body: dict) -> set[str]:
    return {c["paper_id"] for c in body["citations"]}


def test_search_and_ask_within_chosen_papers_cite_only_them(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as client:
        everywhere = client.post("/ask", json={"question": SPEED_UPS}).json()
        assert cited(everywhere) - SCOPE and cited(everywhere) & SCOPE  # the scope has work to do
        scoped = client.post("/ask", json={"question": SPEED_UPS, "paper_ids": sorted(SCOPE)}).json()
        assert cited(scoped) == SCOPE and scoped["confidence"] == "high" and not scoped["abstained"]
        assert all(str(c["n"]) in scoped["answer"] for c in scoped["citations"])
        # the whole ranking is the scope's, however far a chosen paper is from the query
        results = client.post("/search", json={"query": SPEED_UPS, "k": 10, "paper_ids": [MEDSCOPE, SPEED]}).json()
        assert [r["paper_id"] for r in results["results"]] == [SPEED, MEDSCOPE]
        unscoped = client.post("/search", json={"query": SPEED_UPS, "k": 10}).json()["results"]
        assert MEDSCOPE not in {r["paper_id"] for r in unscoped}
        # null is no scope at all: the same answer as without the field
        assert cited(client.post("/ask", json={"question": SPEED_UPS, "paper_ids": None}).json()) == cited(everywhere)


def test_within_one_chosen_paper_it_is_that_paper(server_url):
    """ "What data does it use?" from a paper's page: the paper is its subject, not a stranger's."""
    with httpx.Client(base_url=server_url, timeout=60) as client:
        alone = client.post("/ask", json={"question": "What data does it use?"}).json()
        assert cited(alone) != {MEDSCOPE}
        scoped = client.post("/ask", json={"question": "What data does it use?", "paper_ids": [MEDSCOPE]}).json()
        assert cited(scoped) == {MEDSCOPE} and not scoped["abstained"]


def test_a_streamed_answer_within_chosen_papers_cites_only_them(server_url):
    body = {"question": SPEED_UPS, "paper_ids": sorted(SCOPE), "stream": True}
    with httpx.stream("POST", f"{server_url}/ask", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = list(response.iter_lines())
    citations = json.loads(lines[lines.index("event: citations") + 1][6:])["citations"]
    done = json.loads(lines[lines.index("event: done") + 1][6:])
    assert {c["paper_id"] for c in citations} == SCOPE and cited(done) == SCOPE


def test_the_openai_endpoint_reads_the_scope_from_metadata(server_url):
    client = OpenAI(base_url=f"{server_url}/v1", api_key="unused")
    messages = [{"role": "user", "content": MEDICAL}]
    everywhere = client.chat.completions.create(model="icml-rag", messages=messages)
    assert {c["paper_id"] for c in everywhere.model_extra["citations"]} - {MEDSCOPE}
    scoped = client.chat.completions.create(model="icml-rag", messages=messages, metadata={"paper_ids": [MEDSCOPE]})
    assert [c["paper_id"] for c in scoped.model_extra["citations"]] == [MEDSCOPE]
    assert scoped.choices[0].message.content.rstrip().endswith(f"[1] MedScope (paper {MEDSCOPE})")
    # OpenAI's metadata values are strings: the ids may come as one, separated by commas
    stream = client.chat.completions.create(
        model="icml-rag", messages=messages, stream=True, metadata={"paper_ids": f"{SPEED}, {MEDSCOPE}"}
    )
    last = list(stream)[-1]
    assert {c["paper_id"] for c in last.model_extra["citations"]} == {MEDSCOPE}


def test_unknown_ids_are_404_naming_them_and_an_empty_scope_is_422(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as client:
        for path, body in [
            ("/ask", {"question": MEDICAL, "paper_ids": [MEDSCOPE, "000000000000", "nope"]}),
            ("/ask", {"question": MEDICAL, "paper_ids": [MEDSCOPE, "000000000000", "nope"], "stream": True}),
            ("/search", {"query": MEDICAL, "paper_ids": ["000000000000", "nope"]}),
        ]:
            response = client.post(path, json=body)
            assert response.status_code == 404, (path, response.text)
            error = response.json()["error"]
            assert error["code"] == "paper_not_found" and "'000000000000', 'nope'" in error["message"]
            assert MEDSCOPE not in error["message"]
        chat = {"messages": [{"role": "user", "content": MEDICAL}], "metadata": {"paper_ids": ["000000000000"]}}
        unknown = client.post("/v1/chat/completions", json=chat)
        assert unknown.status_code == 404 and "'000000000000'" in unknown.json()["error"]["message"]
        for path, body in [
            ("/ask", {"question": MEDICAL, "paper_ids": []}),
            ("/search", {"query": MEDICAL, "paper_ids": []}),
            ("/v1/chat/completions", {**chat, "metadata": {"paper_ids": []}}),
            ("/v1/chat/completions", {**chat, "metadata": {"paper_ids": ""}}),
        ]:
            response = client.post(path, json=body)
            assert response.status_code == 422, (path, response.text)
            error = response.json()["error"]
            assert error == {
                "code": "invalid_scope",
                "message": "paper_ids must name at least one paper; leave it out to search every paper",
            }
        too_many = client.post("/ask", json={"question": MEDICAL, "paper_ids": [f"{i:012x}" for i in range(101)]})
        assert too_many.status_code == 422 and too_many.json()["error"]["message"] == (
            "paper_ids may name at most 100 papers"
        )


# -- the page ----------------------------------------------------------------------------


def open_paper(page: Page, name: str) -> None:
    if page.locator("#papers").is_hidden():
        page.click("#show-papers")
    page.fill("#paper-filter", name)
    page.locator("#paper-list li button", has_text=name).first.click()
    expect(page.locator("#source-name")).to_have_text(name)


def test_a_question_from_the_paper_view_is_asked_within_that_paper_until_its_chip_is_removed(chat: Page):
    sent: list[dict] = []
    chat.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/ask") else None)
    expect(chat.locator("#scope")).to_be_hidden()
    open_paper(chat, "MedScope")
    chat.click("#ask-about")
    expect(chat.locator("#question")).to_be_focused()
    expect(chat.locator("#scope")).to_have_text("Asking within: MedScope×")
    answer = ask(chat, MEDICAL)
    expect(answer.locator(".sources li")).to_have_text(["MedScope"])
    expect(chat.locator(".turn.user .who").last).to_have_text("You, within MedScope")
    assert sent[-1]["paper_ids"] == [MEDSCOPE]
    ARTIFACTS.mkdir(exist_ok=True)
    chat.screenshot(path=str(ARTIFACTS / "scope.png"))

    open_paper(chat, "MedMosaic")
    chat.click("#ask-about")
    expect(chat.locator("#scope-list li")).to_have_text(["MedScope×", "MedMosaic×"])
    remove = chat.get_by_role("button", name="Remove MedScope from the scope")
    remove.focus()
    chat.keyboard.press("Enter")  # the keyboard removes a chip, and focus moves to the next one
    expect(chat.get_by_role("button", name="Remove MedMosaic from the scope")).to_be_focused()
    chat.keyboard.press("Enter")  # the last chip: no scope any more
    expect(chat.locator("#scope")).to_be_hidden()
    expect(chat.locator("#question")).to_be_focused()
    answer = ask(chat, MEDICAL)
    sources = answer.locator(".sources li")
    expect(sources.first).to_be_visible()
    assert len(set(sources.all_inner_texts())) > 1  # the unscoped answer cites other papers too
    assert "paper_ids" not in sent[-1]


def test_a_kept_conversation_keeps_its_scope_across_a_reload_and_a_new_chat_starts_unscoped(chat: Page):
    sent: list[dict] = []
    chat.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/ask") else None)
    open_paper(chat, "MedScope")
    chat.click("#ask-about")
    expect(ask(chat, MEDICAL).locator(".sources li")).to_have_text(["MedScope"])

    chat.reload()
    expect(chat.locator("#scope")).to_have_text("Asking within: MedScope×")
    expect(chat.locator(".turn.user .who")).to_have_text(["You, within MedScope"])
    # a follow-up that alone cites other papers (test_within_one_chosen_paper_it_is_that_paper)
    answer = ask(chat, "What data does it use?")
    expect(answer.locator(".sources li")).to_have_text(["MedScope"])
    assert sent[-1]["paper_ids"] == [MEDSCOPE] and len(sent[-1]["history"]) == 2

    chat.click("#new-chat")
    expect(chat.locator("#scope")).to_be_hidden()
    chat.click("#show-chats")
    chat.locator("#chat-list .open-chat").first.click()
    expect(chat.locator("#scope")).to_have_text("Asking within: MedScope×")

    chat.get_by_role("button", name="Remove MedScope from the scope").click()  # clearing it is kept too
    expect(chat.locator("#scope")).to_be_hidden()
    chat.reload()
    expect(chat.locator(".turn.user")).to_have_count(2)  # the same conversation, now unscoped
    expect(chat.locator("#scope")).to_be_hidden()
    answer = ask(chat, MEDICAL)
    sources = answer.locator(".sources li")
    expect(sources.first).to_be_visible()
    assert len(set(sources.all_inner_texts())) > 1 and "paper_ids" not in sent[-1]

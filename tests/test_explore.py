"""Exploring the papers over HTTP (/map, /papers/{id}/similar), against the real service."""

from __future__ import annotations

import httpx

from .conftest import API_KEY

JACOBI = "bf7c34110fa6"  # Jacobi Forcing
SPEED_UPS = {"SPEED", "dLLM-Cache", "LoSA"}  # the other diffusion language model speed-ups


def test_map_gives_every_paper_a_place_and_a_topic_once_per_index_state(server_url):
    response = httpx.get(f"{server_url}/map")  # httpx accepts gzip and decodes it
    assert response.status_code == 200 and response.headers["content-encoding"] == "gzip"
    body = response.json()
    papers, topics = body["papers"], body["topics"]
    assert len(papers) == 86 and len({p["paper_id"] for p in papers}) == 86
    assert set(papers[0]) == {"paper_id", "name", "x", "y", "topic"}
    assert all(0 <= p["x"] <= 1 and 0 <= p["y"] <= 1 for p in papers)
    ids = {t["id"] for t in topics}
    assert {p["topic"] for p in papers} == ids
    assert sum(t["size"] for t in topics) == 86 and all(t["label"] and t["size"] >= 1 for t in topics)
    plain = httpx.get(f"{server_url}/map", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.json() == body
    again = httpx.get(f"{server_url}/map", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and not again.content


def test_similar_papers_come_with_the_sentences_that_tie_them(server_url):
    response = httpx.get(f"{server_url}/papers/{JACOBI}/similar", params={"k": 3})
    assert response.status_code == 200
    body = response.json()
    assert body["paper_id"] == JACOBI and {s["name"] for s in body["similar"]} == SPEED_UPS
    jacobi = httpx.get(f"{server_url}/papers/{JACOBI}").json()
    for similar in body["similar"]:
        paper = httpx.get(f"{server_url}/papers/{similar['paper_id']}").json()
        assert similar["pair"]["asked"] in jacobi["text"] and similar["pair"]["similar"] in paper["text"]
        assert 0 < similar["score"] <= 1 and isinstance(similar["topic"], int)
    assert len(httpx.get(f"{server_url}/papers/{JACOBI}/similar").json()["similar"]) == 5  # k = 5


def test_similar_refuses_unknown_papers_and_bad_k_with_the_error_envelope(server_url, keyed_server):
    unknown = httpx.get(f"{server_url}/papers/000000000000/similar")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "paper_not_found" and "000000000000" in unknown.json()["error"]["message"]
    for k in ("0", "51", "five", "2.5"):
        bad = httpx.get(f"{server_url}/papers/{JACOBI}/similar", params={"k": k})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request", k
        assert "k" in bad.json()["error"]["message"]
    for path in ("/map", f"/papers/{JACOBI}/similar"):
        assert httpx.get(keyed_server.url + path).status_code == 401
        keyed = httpx.get(keyed_server.url + path, headers={"Authorization": f"Bearer {API_KEY}"})
        assert keyed.status_code == 200

"""Exploring the papers over HTTP (/map, /papers/{id}/similar) and on the page (the Map view, a
paper's similar papers, "Ask about this paper") in Debian's Chromium, against the real service."""

from __future__ import annotations

import json

import httpx
from playwright.sync_api import Page, expect

from .conftest import API_KEY, ARTIFACTS

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
    # the seeds without a sibling subject among them: one last topic, 'other subjects', without words
    assert [t["other"] for t in topics] == [False] * (len(topics) - 1) + [True], topics
    assert topics[-1]["label"] == "other subjects" and topics[-1]["words"] == []
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


# -- the page ----------------------------------------------------------------------------

COLOURED_PIXELS = """() => {
    const canvas = document.getElementById('map-canvas');
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let coloured = 0;
    for (let i = 0; i < data.length; i += 4) {
        const [r, g, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
        if (a > 200 && Math.abs(r - g) + Math.abs(g - b) + Math.abs(r - b) > 60) coloured++;
    }
    return coloured;
}"""


def open_map(page: Page, url: str):
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(url + "/")
    page.click("#show-map")
    canvas = page.locator("#map-canvas")
    expect(canvas).to_have_attribute("data-papers", "86")
    return canvas


def test_the_map_draws_every_paper_on_one_canvas_coloured_by_topic(page: Page, server_url):
    canvas = open_map(page, server_url)
    topics = httpx.get(f"{server_url}/map").json()["topics"]
    expect(canvas).to_have_attribute("aria-label", f"Map of 86 papers in {len(topics)} topics")
    expect(canvas).to_be_focused()
    expect(page.locator(".chat")).to_be_hidden()
    expect(page.locator("#map-topics li")).to_have_count(len(topics))
    named = [t for t in topics if not t["other"]]
    expect(page.locator("#map-topics li").first).to_contain_text(max(named, key=lambda t: t["size"])["label"])
    expect(page.locator("#map-topics li").last).to_contain_text("other subjects")  # listed last, whatever its size
    # every dot of a topic is drawn in colour (those of the papers no topic fits in grey)
    assert page.evaluate(COLOURED_PIXELS) > sum(t["size"] for t in named) * 20
    # no element per paper: the view holds the canvas, the tip and one button per topic
    assert page.locator("#map-view *").count() < 12 + 4 * len(topics)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "map.png"))
    # a topic chosen in the list fades the others
    before = page.evaluate(COLOURED_PIXELS)
    page.locator("#map-topics li button").last.click()
    expect(page.locator("#map-topics li button").last).to_have_attribute("aria-pressed", "true")
    assert page.evaluate(COLOURED_PIXELS) < before


def test_no_label_covers_another_or_a_dot_and_a_paper_of_no_topic_names_its_nearest(page: Page, server_url):
    canvas = open_map(page, server_url)
    boxes = json.loads(canvas.get_attribute("data-labels"))
    dots = json.loads(canvas.get_attribute("data-dots"))
    radius = float(canvas.get_attribute("data-dot-radius"))
    topics = httpx.get(f"{server_url}/map").json()
    assert len(boxes) == sum(not t["other"] for t in topics["topics"]) and len(dots) == 86
    for i, (x, y, w, h) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1 :]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y, "two labels overlap"
        covered = [(dx, dy) for dx, dy in dots if x - radius < dx < x + w + radius and y - radius < dy < y + h + radius]
        assert not covered, f"a label covers the dots at {covered}"
    other = next(t["id"] for t in topics["topics"] if t["other"])
    lone = next(p for p in topics["papers"] if p["topic"] == other)
    point = page.evaluate("id => mapPointOf(id)", lone["paper_id"])
    page.mouse.move(point["x"], point["y"])
    expect(page.locator("#map-tip")).to_contain_text(f"{lone['name']} · other subjects, nearest ")


def test_hover_names_a_paper_and_a_click_opens_it_with_its_similar_papers(page: Page, server_url):
    open_map(page, server_url)
    point = page.evaluate("id => mapPointOf(id)", JACOBI)
    page.mouse.move(point["x"], point["y"])
    tip = page.locator("#map-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("Jacobi Forcing")
    page.mouse.click(point["x"], point["y"])
    expect(page.locator("#source-name")).to_have_text("Jacobi Forcing")
    expect(page.locator("#source-text")).to_contain_text("Jacobi Forcing")
    similar = page.locator("#similar-list li")
    expect(similar).to_have_count(5)
    assert {similar.nth(i).locator(".similar-open").inner_text() for i in range(3)} == SPEED_UPS
    expect(similar.first.locator(".pair q")).to_have_count(2)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "map-paper.png"))
    similar.locator(".similar-open", has_text="dLLM-Cache").click()
    expect(page.locator("#source-name")).to_have_text("dLLM-Cache")
    expect(page.locator("#source-code a")).to_have_attribute("href", "https://github.com/maomaocun/dLLM-cache")
    expect(page.locator("#similar-list li .similar-open").first).not_to_have_text("dLLM-Cache")
    page.click("#ask-about")
    expect(page.locator(".chat")).to_be_visible()
    expect(page.locator("#map-view")).to_be_hidden()
    expect(page.locator("#question")).to_be_focused()
    expect(page.locator("#scope-list li")).to_have_text(["dLLM-Cache×"])  # questions now asked within it


def test_the_map_and_the_paper_are_reachable_from_the_keyboard(page: Page, server_url):
    page.goto(server_url + "/")
    page.focus("#show-map")
    page.keyboard.press("Enter")
    canvas = page.locator("#map-canvas")
    expect(canvas).to_have_attribute("data-papers", "86")
    expect(canvas).to_be_focused()
    papers = {p["name"]: p for p in httpx.get(f"{server_url}/map").json()["papers"]}
    tip = page.locator("#map-tip")
    page.keyboard.press("ArrowRight")  # the first paper
    first = tip.inner_text().split(" · ")[0]
    page.keyboard.press("ArrowRight")  # then the nearest paper to its right
    second = tip.inner_text().split(" · ")[0]
    assert first != second and papers[second]["x"] > papers[first]["x"]
    page.keyboard.press("Enter")
    expect(page.locator("#source-name")).to_have_text(second)
    expect(page.locator("#source")).to_be_focused()
    for _ in range(6):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "ask-about":
            break
    expect(page.locator("#ask-about")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#question")).to_be_focused()
    expect(page.locator("#scope-list li")).to_have_text([f"{second}×"])

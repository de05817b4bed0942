"""The chat page in a real browser (Debian's Chromium through Playwright) against the real
service. Only the two faults (a 500 and a dead connection) are injected with page.route."""

import re

import pytest
from playwright.sync_api import Page, expect

from .conftest import ANSWER, ARTIFACTS, Server, ask, index_env


def test_an_answer_streams_in_with_citation_links_that_open_the_abstract(chat: Page):
    chat.evaluate("""() => {
        window.__updates = 0;
        new MutationObserver((m) => { window.__updates += m.length; })
            .observe(document.getElementById('conversation'), {subtree: true, childList: true, characterData: true});
    }""")
    answer = ask(chat, "What speedup does Jacobi Forcing report?")
    expect(answer.locator(".body")).to_contain_text("3.8")
    assert chat.evaluate("window.__updates") > 10  # token by token, not one block
    links = answer.locator(".cite")
    assert links.count() >= 1
    expect(answer.locator(".sources li")).to_have_text(["Jacobi Forcing"])
    links.first.click()
    expect(chat.locator("#source")).to_be_visible()
    expect(chat.locator("#source-name")).to_have_text("Jacobi Forcing")
    mark = chat.locator("#source-text mark")
    expect(mark).to_have_count(1)
    assert mark.inner_text() in chat.locator("#source-text").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    chat.screenshot(path=str(ARTIFACTS / "answer.png"), full_page=True)


def test_several_papers_and_a_figure_come_as_a_table_and_a_comparison_as_a_list(chat: Page):
    table = ask(chat, "Which papers speed up diffusion language models, and by how much?").locator(".body table")
    expect(table).to_have_count(1)
    expect(table.locator("th")).to_have_text(["Paper", "What it does", "Figure"])
    expect(table.locator("tbody tr").first.locator("td")).to_have_count(3)
    expect(table).to_contain_text("12.2")
    expect(table.locator(".cite").first).to_be_visible()
    assert "|" not in table.inner_text()  # laid out, not shown as Markdown
    items = ask(chat, "Compare SPEED and dLLM-Cache").locator(".body li")
    expect(items).to_have_count(2)
    expect(items.locator("strong")).to_have_text(["SPEED", "dLLM-Cache"], ignore_case=False)
    ARTIFACTS.mkdir(exist_ok=True)
    chat.screenshot(path=str(ARTIFACTS / "table.png"), full_page=True)


def test_a_follow_up_is_answered_in_context(chat: Page):
    ask(chat, "How does Jacobi Forcing work?")
    answer = ask(chat, "What speedup does it report?")
    expect(answer.locator(".body")).to_contain_text("3.8")
    expect(answer.locator(".sources li").first).to_have_text("Jacobi Forcing")
    chat.click("#new-chat")
    expect(chat.locator(".turn")).to_have_count(0)


def test_an_off_corpus_question_shows_an_abstention_not_an_error(chat: Page):
    answer = ask(chat, "Who won the 2022 FIFA World Cup?")
    expect(answer).to_have_class(re.compile("abstained"))
    expect(answer).not_to_have_class(re.compile("error"))
    expect(answer.locator(".body")).to_contain_text("do not cover this question")


def test_the_three_outcomes_look_different(chat: Page):
    high = ask(chat, "What speedup does Jacobi Forcing report?")
    expect(high).to_have_attribute("data-confidence", "high")
    expect(high.locator(".coverage")).to_be_hidden()
    low = ask(chat, "Does MedMosaic include dermatology photographs?")
    expect(low).to_have_attribute("data-confidence", "low")
    expect(low.locator(".coverage")).to_be_visible()
    expect(low.locator(".coverage")).to_have_text("Partly covered: the closest papers, not an exact answer.")
    expect(low.locator(".body")).to_contain_text("None of these abstracts mentions")
    expect(low.locator(".sources li")).to_have_text(["MedMosaic"])
    none = ask(chat, "How do I bake sourdough bread?")
    expect(none).to_have_attribute("data-confidence", "none")
    expect(none.locator(".coverage")).to_have_text("Not covered by these abstracts.")
    ARTIFACTS.mkdir(exist_ok=True)
    chat.screenshot(path=str(ARTIFACTS / "confidence.png"), full_page=True)


def test_server_errors_show_a_message_and_the_page_keeps_working(chat: Page):
    chat.route(
        "**/ask",
        lambda route: route.fulfill(
            status=500,
            content_type="application/json",
            body='{"error": {"code": "internal_error", "message": "internal error; it has been logged"}}',
        ),
    )
    answer = ask(chat, "What is MedMosaic?")
    expect(answer).to_have_class(re.compile("error"))
    expect(answer.locator(".body")).to_contain_text("internal error; it has been logged (500 internal_error)")
    chat.unroute("**/ask")
    chat.route("**/ask", lambda route: route.abort("connectionrefused"))
    answer = ask(chat, "What is MedMosaic?")
    expect(answer.locator(".body")).to_contain_text("cannot be reached")
    chat.unroute("**/ask")
    answer = ask(chat, "What is MedMosaic?")
    expect(answer).not_to_have_class(re.compile("error"))
    expect(answer.locator(".sources li").first).to_have_text("MedMosaic")


def test_markup_in_a_question_is_shown_as_text(chat: Page):
    hostile = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'> What is MedMosaic?"
    ask(chat, hostile)
    expect(chat.locator(".turn.user .body").last).to_have_text(hostile)
    assert chat.evaluate("window.__pwned") is None
    assert chat.locator(".conversation img, .conversation script").count() == 0


def test_the_paper_list_filters_and_opens_a_paper(chat: Page):
    chat.click("#show-papers")
    expect(chat.locator("#paper-list li")).to_have_count(86)
    chat.fill("#paper-filter", "diffusion")
    count = chat.locator("#paper-list li").count()
    assert 1 < count < 86
    expect(chat.locator("#paper-count")).to_have_text(f"({count} of 86)")
    chat.fill("#paper-filter", "Spiral RoPE")
    chat.locator("#paper-list li button").first.click()
    expect(chat.locator("#source-name")).to_have_text("Spiral RoPE")


def test_keyboard_shift_enter_is_a_new_line_and_enter_sends(chat: Page):
    chat.fill("#question", "first line")
    chat.press("#question", "Shift+Enter")
    chat.keyboard.type("second line")
    assert chat.input_value("#question") == "first line\nsecond line"
    expect(chat.locator(".turn")).to_have_count(0)
    chat.press("#question", "Enter")
    expect(chat.locator(".turn.user")).to_have_count(1)


def test_the_page_fits_a_phone_width_window(page: Page, server):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(server.url + "/")
    answer = ask(page, "What does MedScope do?")
    expect(answer.locator(".cite").first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    answer.locator(".cite").first.click()
    expect(page.locator("#source")).to_be_in_viewport()


@pytest.mark.parametrize("width", [1280, 390], ids=["desktop", "phone"])
def test_math_is_rendered_in_answers_and_abstracts(page: Page, server, width):
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(server.url + "/")
    answer = ask(page, "What speedup does Jacobi Forcing report?")  # "$3.8\times$ wall-clock speedup"
    body = answer.locator(".body")
    expect(body.locator(".katex").first).to_be_visible()
    assert "×" in body.locator(".katex-html").first.inner_text()
    assert "$" not in body.inner_text() and "\\times" not in body.locator(".katex-html").first.inner_text()
    expect(answer.locator(".cite").first).to_be_visible()  # markers still links next to the math
    answer.locator(".cite").first.click()
    mark = page.locator("#source-text mark")
    expect(mark.locator(".katex").first).to_be_visible()  # math inside the highlighted sentence

    page.click("#show-papers")
    page.fill("#paper-filter", "Shampoo")
    page.locator("#paper-list li button").first.click()
    fractions = page.locator("#source-text .katex-html .mfrac")
    expect(fractions.first).to_be_visible()
    assert fractions.count() >= 2
    assert "$" not in page.locator("#source-text").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"math-{width}.png"), full_page=True)


def test_a_formula_katex_cannot_parse_shows_as_its_source(chat: Page):
    text = chat.evaluate(r"""() => {
        const p = document.createElement('p');
        p.append(...withMath('good $x^2$ and bad $\\frac{1}{$ and $\\badcommand{y}$ end'));
        document.body.append(p);
        return [p.querySelectorAll('.katex').length, p.innerText];
    }""")
    assert text[0] == 1
    assert "$\\frac{1}{$" in text[1] and "$\\badcommand{y}$" in text[1] and text[1].endswith("end")


def test_with_an_api_key_the_page_asks_for_it_once(page: Page, index_dir, tmp_path):
    keyed = Server(index_env(index_dir, RAG_API_KEY="page-key"), tmp_path / "keyed.log")
    try:
        page.goto(keyed.url + "/")
        page.fill("#question", "What is MedMosaic?")
        page.press("#question", "Enter")
        expect(page.locator("#key-dialog")).to_be_visible()
        page.fill("#api-key", "page-key")
        page.press("#api-key", "Enter")
        answer = page.locator(ANSWER).last
        expect(answer.locator(".sources li").first).to_have_text("MedMosaic", timeout=60_000)
        assert page.evaluate("sessionStorage.getItem('rag-api-key')") == "page-key"
        ask(page, "What does MedScope do?")
        expect(page.locator("#key-dialog")).not_to_be_visible()
    finally:
        keyed.stop()

"""The page a researcher keeps open, in a real browser against the real service: feedback on an
answer stored in the service's database, conversations kept in the browser across a reload,
suggested next questions, and the answer copied as Markdown."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from rag.common.settings import Settings
from rag.feedback import FeedbackStore

from .conftest import ARTIFACTS, ask

JACOBI = "What speedup does Jacobi Forcing report?"


def test_a_rating_and_its_comment_are_stored_with_the_answer(chat: Page, index_dir):
    answer = ask(chat, JACOBI)
    down = answer.get_by_role("button", name="✗ Wrong")
    down.focus()
    chat.keyboard.press("Enter")  # keyboard reachable
    expect(down).to_have_attribute("aria-pressed", "true")
    comment = answer.locator(".comment textarea")
    expect(comment).to_be_focused()
    comment.fill("the speedup is for coding and math together")
    answer.locator(".comment button").click()
    expect(answer.locator(".status")).to_have_text("Thanks: your comment was recorded.")
    kept = [r for r in FeedbackStore(Settings(index_dir=index_dir)).rated() if r["question"] == JACOBI]
    assert kept and kept[-1]["rating"] == "down"
    assert kept[-1]["comment"] == "the speedup is for coding and math together"
    assert "3.8" in kept[-1]["answer"] and kept[-1]["citations"][0]["name"] == "Jacobi Forcing"


def test_a_conversation_is_kept_across_a_reload_renamed_reopened_and_deleted(chat: Page):
    ask(chat, "How does Jacobi Forcing work?")
    ask(chat, "What speedup does it report?")
    chat.reload()
    expect(chat.locator(".turn.user .body")).to_have_text(
        ["How does Jacobi Forcing work?", "What speedup does it report?"]
    )
    expect(chat.locator(".turn.assistant").last.locator(".body")).to_contain_text("3.8")
    follow_up = ask(chat, "And on which benchmarks?")  # the kept conversation is still the context
    expect(follow_up.locator(".sources li").first).to_have_text("Jacobi Forcing")

    chat.click("#show-chats")
    items = chat.locator("#chat-list li")
    expect(items).to_have_count(1)
    chat.once("dialog", lambda dialog: dialog.accept("Jacobi notes"))
    items.get_by_role("button", name=re.compile("^Rename")).click()
    expect(chat.locator("#chat-list .open-chat")).to_have_text(["Jacobi notes"])
    ARTIFACTS.mkdir(exist_ok=True)
    chat.screenshot(path=str(ARTIFACTS / "kept-conversation.png"), full_page=True)

    chat.click("#new-chat")  # the list stays open beside the empty conversation
    expect(chat.locator(".turn")).to_have_count(0)
    chat.locator("#chat-list .open-chat").click()
    expect(chat.locator("#chats")).to_be_hidden()
    expect(chat.locator(".turn.user .body")).to_have_count(3)
    chat.click("#show-chats")
    chat.get_by_role("button", name="Delete Jacobi notes").click()
    expect(chat.locator("#chat-list")).to_have_text("No conversation kept yet.")
    expect(chat.locator(".turn")).to_have_count(0)
    chat.reload()
    expect(chat.locator(".turn")).to_have_count(0)


def test_a_suggested_question_is_asked_with_a_click(chat: Page):
    answer = ask(chat, "What does MedScope do?")
    suggestions = answer.locator(".suggestion")
    expect(suggestions.first).to_contain_text("MedScope")
    asked = suggestions.first.inner_text()
    suggestions.first.click()
    expect(chat.locator(".turn.user .body").last).to_have_text(asked)
    expect(chat.locator(".turn.assistant").last).not_to_have_class(re.compile("streaming"), timeout=60_000)
    expect(chat.locator(".turn.assistant").last.locator(".sources li").first).to_contain_text("MedScope")


def test_copy_puts_the_answer_and_its_sources_on_the_clipboard_as_markdown(chat: Page):
    chat.context.grant_permissions(["clipboard-read", "clipboard-write"])
    answer = ask(chat, JACOBI)
    answer.get_by_role("button", name=re.compile("Copy")).click()
    expect(answer.locator(".status")).to_have_text("Copied as Markdown.")
    copied = chat.evaluate("navigator.clipboard.readText()")
    assert "3.8" in copied and "[1]" in copied
    assert re.search(r"\n\nSources:\n\n1\. Jacobi Forcing \(paper [0-9a-f]{12}\)\n$", copied), copied

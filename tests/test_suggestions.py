"""Questions to ask next: drawn from the cited papers, never one already asked."""

import httpx

from rag.answer.suggestions import next_questions


def test_each_paper_gets_a_question_before_any_gets_a_second_and_asked_ones_are_left_out():
    asked = ["what does Jacobi Forcing  propose?"]
    assert next_questions(["Jacobi Forcing", "MedScope", "Jacobi Forcing"], asked) == [
        "What does MedScope propose?",
        "What results does Jacobi Forcing report?",
        "What results does MedScope report?",
    ]
    assert next_questions(["A variety of widely used optimization methods like…"]) == []  # no name found


def test_an_answer_suggests_questions_about_the_papers_it_cites(server_url):
    answer = httpx.post(f"{server_url}/ask", json={"question": "What does MedScope do?"}, timeout=60).json()
    names = {c["name"] for c in answer["citations"]}
    assert answer["suggestions"] and all(any(name in q for name in names) for q in answer["suggestions"])
    none = httpx.post(f"{server_url}/ask", json={"question": "What are the side effects of ibuprofen?"}, timeout=60)
    assert none.json()["abstained"] and none.json()["suggestions"] == []

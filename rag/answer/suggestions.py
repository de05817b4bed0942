"""Questions to ask next, drawn from the papers an answer cites: what each proposes and what it
reports, leaving out what the conversation asked already. Shown under an answer on the page and
sent as follow-ups to chat UIs that ask for them."""

from __future__ import annotations

from collections.abc import Iterable

from rag.common.parts import PARTS

TEMPLATES = ("What does {name} propose?", "What results does {name} report?", "How is {name} evaluated?")


@PARTS.guard("suggestions", fallback=list)
def next_questions(papers: Iterable[str], asked: Iterable[str] = (), most: int = 3) -> list[str]:
    """Up to `most` questions about these papers (by name, best first), each paper's first
    question before any paper's second; none that the conversation asked already."""
    said = {" ".join(question.lower().split()) for question in asked}
    # A paper with no name found is named by its opening words ("…"): no question reads well.
    names = [name for name in dict.fromkeys(papers) if not name.endswith("…")]
    out: list[str] = []
    for template in TEMPLATES:
        for name in names:
            question = template.format(name=name)
            if question.lower() in said:
                continue
            out.append(question)
            if len(out) == most:
                return out
    return out

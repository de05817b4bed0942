"""Questions about who wrote what, answered from the corpus's metadata, never from the abstracts:
"Who wrote Deep Forcing?", "Who are the authors of the paper titled ...?", "Which papers are by
Ada Lovelace?", "What has Grace Hopper published?". English forms; an abstract never says who
wrote it, so a corpus without authors answers that it does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A person's or a lab's name: capitalised words ("Ada Lovelace", "J. R. R. Tolkien", "DeepMind").
_NAME = r"(?P<name>[A-Z][\w.'’-]*(?:\s+(?:[A-Z][\w.'’-]*|(?:de|van|von|der|da|di|le|la)\b)){0,4})"
_WHO = re.compile(
    r"^\W*(?:who\b[^?]{0,80}?\b(?:wrote|write|writes|written|authored|authors?|is behind|are behind|published)\b"
    r"|(?:what|which) (?:is|are|were|was) the (?:names? of the )?authors?\b"
    r"|(?:list|name|give(?: me)?|tell me) (?:me )?the authors?\b"
    r"|(?:the )?authors? (?:of|behind)\b)",
    re.I,
)
_BY = (
    re.compile(
        r"(?i:\b(?:papers?|work|works|articles?|publications?|abstracts?)\s+(?:(?:are|were|is|was)\s+)?"
        r"(?:(?:written|authored|co-?authored|published)\s+)?by)\s+" + _NAME
    ),
    re.compile(
        r"(?i:\b(?:what|which papers?)\s+(?:did|does|has|have))\s+"
        + _NAME
        + r"\s+(?i:write|written|publish|published|author|authored|co-?authored)\b"
    ),
)
# Capitalised words after "by" that are not a name ("papers by The ..." opens a title, not a person).
_NOT_A_NAME = frozenset("The This That These Those Their Our Its A An Each Every Which What".split())


@dataclass(frozen=True)
class Authorship:
    """A question about authors: `by` the name asked about ("papers by Ada Lovelace"), or None
    when the question asks who wrote a paper."""

    by: str | None = None


def authorship_of(question: str) -> Authorship | None:
    """What the question asks of the metadata, or None when it asks nothing of authors."""
    for pattern in _BY:
        match = pattern.search(question)
        if match and match.group("name").split()[0] not in _NOT_A_NAME:
            return Authorship(by=match.group("name").strip(" .'’"))
    if _WHO.search(question):
        return Authorship()
    return None

"""A question's words: its runs of content words, and the words that look like names.

Read by the analysis (its constraints), the judging (what a constraint weighs) and the
assistant (a name the conversation never used).
"""

from __future__ import annotations

import re

from rag.common.text import HYPHENATED_WORD, STOPWORDS

# Name-like words: an inner capital (nuScenes), a digit (QM9), two capitals (GRPO), or a
# capital letter not at the start of the question (a proper name).
_NAME_LIKE = re.compile(r"[A-Za-z]*[a-z][A-Z][\w-]*|[A-Za-z]+\d[\w-]*|[A-Z]{2,}[\w-]*|[A-Z][a-z][\w-]*")
# A question's words, hyphenated ones whole ("reinforcement-learning"), and the punctuation between them.
_QUESTION_TOKEN = re.compile(r"[^\W_][\w'’-]*|[^\w\s]")
# Words that shape a question rather than name what it asks about: never "the part not found".
# Among them the verbs that only say a paper is about something ("deal with", "analyze", "lets").
QUESTION_WORDS = frozenset(
    """there any exist exists existing some other kind kinds type types way ways report reports reported
    achieve achieves achieved give gives given get gets help helps make makes made provide provides one two
    three four five first second specific specifically particular main key like unlike whether just only
    still even instead rather across within without via per each every both either all name named called
    works studies research researchers authors author apply applies applied anyone anybody someone somebody
    has have had deal deals dealing involve involves involving analyze analyzes analyse analyses investigate
    investigates explore explores examine examines consider considers focus focuses target targets concern
    concerns tackle tackles handle handles discuss discusses cover covers designed intended let lets allow
    allows enable enables showing argue argues argued claim claims people""".split()
)


def name_like(question: str) -> list[str]:
    """The words of a question that look like names (not its first word, which is capitalised anyway)."""
    return [
        m.group(0) for m in HYPHENATED_WORD.finditer(question) if m.start() > 0 and _NAME_LIKE.fullmatch(m.group(0))
    ]


def question_phrases(question: str) -> list[list[str]]:
    """Runs of adjacent content words of a question, in order; a stopword, a question word or
    punctuation ends a run ("Which paper applies Jacobi decoding to speed up autoregressive image
    generation?" -> [Jacobi, decoding], [speed], [autoregressive, image, generation])."""
    runs: list[list[str]] = []
    run: list[str] = []
    for match in _QUESTION_TOKEN.finditer(question):
        word = match.group(0)
        lowered = word.lower()
        if not word[0].isalnum() or len(lowered) < 2 or lowered in STOPWORDS or lowered in QUESTION_WORDS:
            if run:
                runs.append(run)
            run = []
        else:
            run.append(word)
    return runs + [run] if run else runs

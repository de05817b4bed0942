"""Verification: is every constraint of a question found in the papers that answer it?

A constraint is a content phrase of the question (rag/query/analysis.py): "video generation",
"reinforcement learning", "one-step". A paper that answers must hold each one, or the answer
is about something next to the question ("text watermarks" for "image watermarks"). A
constraint is found in the answering papers

- by its words, stemmed ("generates" finds "generation"), or in another part of speech that the
  stemmer leaves apart ("medicine" finds "medical"); a hyphenated word only whole, its
  parts in order and in any form, joined by a hyphen, a dash or a space ("one-step" is not found
  in "multi-step ... one of"): modifiers count; one whose modifier no answering paper holds is
  another thing, never high; so is an adverb they never put on the word ("strongly convex"), a
  word asked bare that they only qualify ("only convex" where they say "strongly convex"), and a
  word they hold only where they say where their code is;
- by an alias the corpus defines ("Rotary Position Embedding (RoPE)" in any abstract lets
  "RoPE" find "rotary position embedding" and back);
- softly: its best cosine with a sentence of the answering papers reaches `soft_above` (other
  words for the same thing: "upscales blurry videos" for "video super-resolution").

A question's framing words (its verbs, adverbs, prepositions, comparatives: "both talk about",
"earlier"; `framing_words` in rag/query/framing.py; and a casual request's nouns the framing
tagger reads as framing, "a rundown of": `tagged_framing`) are never missing: they say how it is asked.
What is not found is weighed by its words' IDF, as a share of the whole question's: the answer
is confident only when that share is under `missing_below` (`held_share`). A missing name, or a
missing modifier of a thing the papers hold ("adaptive-noise" where they say "fixed-noise";
"continuous neural samplers" where their term is "discrete neural samplers"), is another thing:
never high, whatever it weighs. The thresholds are fitted by eval/calibrate.py on
dev, its leave-one-out variants and eval/dev_contrast.jsonl (contrast twins and paraphrases).
Hand-written: no library checks a question's constraints against retrieved passages.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
from wordfreq import zipf_frequency

from rag.common.text import CODE_LINK, HYPHENATED_WORD, STOPWORDS, stems
from rag.index.tokens import TokenVectors
from rag.index.vocabulary import Vocabulary
from rag.query.words import Reading, name_like, question_phrases


@dataclass(frozen=True)
class ConstraintCheck:
    """One constraint of a question, against the papers that answer it."""

    phrase: str  # as the question words it
    missing: tuple[str, ...]  # its words no answering paper holds (none: found by its words)
    weight: float  # the IDF weight of those words, as a share of the whole question's
    similarity: float  # its best cosine with a sentence of the answering papers (1.0 when found by words)

    # What is missing is another thing than the papers', not other words for theirs: a name
    # ("AudioMAE"), or a modifier of a thing they hold ("adaptive-noise" where they say
    # "fixed-noise"). Never matched softly; the answer is never high.
    other: bool = False
    salience: float = 1.0  # how much of the question's meaning rests on it (`resting`; 1.0: not measured)
    common: float = 0.0  # the general-English Zipf frequency of its rarest missing word (0: not measured)
    match: float = 0.0  # how well the papers' words hold its words, read in context (`held_in_context`)
    least: float = 0.0  # ...its least held word's
    # Missing, but not what the question rests on: a word of its framing ("the gist", "this pile").
    framing: bool = False
    # The probability that the question rests on it, as the framing model judged it (0: not judged).
    rests: float = 0.0

    def found(self, soft_above: float) -> bool:
        return not self.missing or self.framing or (not self.other and self.similarity >= soft_above)

    @property
    def named(self) -> str:
        """What a low answer says is not found: the constraint's words from its first missing one
        to its last ("image" of "AI-generated image watermarks" -> "image"), whole when short."""
        words = self.phrase.split()
        if len(words) <= 3:
            return self.phrase
        at = [i for i, word in enumerate(words) if word in self.missing]
        return " ".join(words[at[0] : at[-1] + 1]) if at else self.phrase

    def as_asked(self, question: str) -> str:
        """What a low answer names, in the question's own words: `named`, or, for a constraint whose
        words the analysis joined across a name ("geometry datasets builds" of "geometry datasets
        Euclean builds"), its longest missing word."""
        if self.named.lower() in question.lower():
            return self.named
        return max((w for w in self.missing if w.lower() in question.lower()), key=len, default=self.named)


# A figure with its unit ("70B", "1.8B", "10x", "5-second"), alone or a part of a hyphenated word
# ("Qwen2.5-72B"): a paper that does not give it studies another scale, not the asked one in other words.
_QUANTITY = re.compile(r"\d[\d.,]*-?[A-Za-z]+")

# A share the question states ("about 5%", "98.5 percent"): a paper that gives no share near it
# (within `_SHARE_WITHIN`, relative) makes another claim, whatever else it holds.
SHARE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*(?:\\?%|percent\b)", re.I)
_SHARE_WITHIN = 0.1

# An adverb of manner or degree ("strongly", "weakly", "temporally"), of five letters or more ("only"
# is not); `degree_adverb` in `check` leaves out the nouns in -ly.
_ADVERB = re.compile(r"[a-z]{3,}ly", re.I)

Embed = Callable[[list[str]], np.ndarray]  # phrases -> unit rows, the sentence vectors' encoder
Rests = Callable[[float, float, float, float], float]  # (salience, common, match, least) -> P(rests on it)


@dataclass(frozen=True)
class Papers:
    """The answering papers a question's constraints are looked for in."""

    ids: list[str]
    sentence_vectors: np.ndarray  # their sentences' unit vectors, a row each (for the soft match)
    texts: Sequence[str] = ()  # their sentences
    naming: frozenset[str] = frozenset()  # stems of the paper names the question uses: they weigh nothing
    # The question's word pieces and the papers' content pieces in context (the English encoder's
    # last layer), read only when a constraint is missing and the framing model judges it.
    question_tokens: Callable[[], TokenVectors] | None = None
    paper_tokens: Callable[[], np.ndarray] | None = None


def check(
    constraints: Sequence[str],
    said: Reading,
    papers: Papers,
    vocabulary: Vocabulary,
    embed: Embed,
    *,
    term_uses: int = 2,
    framing: Callable[[], Collection[str]] = frozenset,
    tagged: Callable[[], Collection[str]] = frozenset,
    aside: Callable[[], Collection[str]] = frozenset,
    soft_above: float = 1.01,
    rests_on: Rests | None = None,
    block_above: float = 0.0,
) -> list[ConstraintCheck]:
    """Each constraint, found by words, aliases or softly in `papers`; `said`: the question as the
    analysis read it (its runs of content words weigh the share missing). The stems of the paper
    names the question uses (`Papers.naming`) pick the paper, not what is asked of it, and weigh
    nothing. `framing`: the question's words that only say how it is asked
    (rag/query/framing.py's `framing_words`), never missing; called only when a word is. `tagged`:
    those the framing tagger reads as framing (`tagged_framing`), asked only when a word is missing
    still (it reads the question through the encoder). `aside`: the words of its constraints the
    aside model reads as the asker's aside (`aside_words`): never missing, and no part of the share
    of the question what is missing weighs, so an aside dilutes no swapped term.
    `rests_on(salience, common, match, least)`: the probability that the question rests on a
    constraint no paper holds, even softly (`soft_above`) (`FramingWeights`); under `block_above`
    it is framing (None: every missing constraint is one it rests on, weighed by `held_share`)."""
    paper_ids, sentence_vectors, texts, naming = papers.ids, papers.sentence_vectors, papers.texts, papers.naming

    def weigh(words) -> float:
        return vocabulary.idf.total(stem for word in words for stem in stems(word) - naming)

    asides = cache(aside)
    whole = cache(lambda: weigh(word for run in said.phrases for word in run if word.lower() not in asides()))

    # The papers' sentences as words, read only for a question that needs them (most never do).
    written = cache(lambda: [HYPHENATED_WORD.findall(text.lower()) for text in texts])

    def other(word: str) -> bool:
        """A name, a figure or the unit the question puts after one ("1 million"), or a hyphenated
        modifier of a word the papers hold, swapped: one they write with another ("one-step" where
        they write "multi-step") or never write ("multi-step" where they hold "step" but not
        "multi"). A hyphenated word whose every part they hold, and whose head they write with no
        other modifier, is their words put together another way ("watermark-removal",
        "graph-Laplacian" for "state-graph Laplacian")."""
        parts = word.strip("-").split("-")
        if (name_like(f"x {word}") and word not in said.opening) or any(map(_QUANTITY.fullmatch, [word, *parts])):
            return True
        if re.search(rf"\d[\d.,]*\s+{re.escape(word)}\b", said.text):  # "1 million", as "70B" is
            return True
        if len(parts) < 2 or not vocabulary.found(parts[-1], paper_ids):
            return False
        lowered, head = word.lower(), f"-{parts[-1].lower()}"
        return not all(vocabulary.found(part, paper_ids) for part in parts[:-1]) or any(
            token.endswith(head) and token != lowered for tokens in written() for token in tokens
        )

    framed, read_as_framing = cache(framing), cache(lambda: {*tagged(), *asides()})
    stem_of = cache(lambda word: frozenset(stems(word)))

    def another_head(words: list[str], missing: tuple[str, ...]) -> bool:
        """A missing word after a hyphenated modifier the papers write before another word
        ("AI-generated images" where they say "AI-generated text"): another thing of that kind,
        as a missing modifier of a word they hold is."""
        asked = [
            (before.lower(), w.lower())
            for before, w in zip(words, words[1:], strict=False)
            if w in missing and "-" in before.strip("-") and before not in missing
        ]
        return any(
            first == before and then != w
            for before, w in asked
            for tokens in written()
            for first, then in zip(tokens, tokens[1:], strict=False)
        )

    def modifiers_of(term: list[frozenset[str]], word: str) -> Counter[str]:
        """How often the papers write each modifier other than `word` right before the stems `term`."""
        return Counter(
            tokens[i]
            for tokens in written()
            for i in range(len(tokens) - len(term))
            if tokens[i] != word
            and tokens[i] not in STOPWORDS
            and all(stem_of(tokens[i + 1 + j]) == t for j, t in enumerate(term))
        )

    def another_modifier(words: list[str], missing: tuple[str, ...]) -> bool:
        """A missing word before words the papers write, `term_uses` times or more, after one
        other modifier ("continuous neural samplers" where they say "discrete neural samplers"):
        a swapped modifier of their term, not other words for it. A word in -ing acts on what
        follows ("avoiding forgetting"), it does not modify it, and a used-once pairing is prose."""
        lowered = [w.lower() for w in words]
        gone = {w.lower() for w in missing}
        for at, word in enumerate(lowered[:-1]):
            if word not in gone or lowered[at + 1] in gone or "-" in word or word.endswith("ing"):
                continue
            # the word modified, and the next one when the phrase goes on
            term = [stem for stem in map(stem_of, lowered[at + 1 : at + 3]) if stem]
            uses = modifiers_of(term, word)
            # ...else the word modified alone, the next one found too ("veterinary audio benchmark"
            # where they write "medical audio" and never "medical audio benchmark")
            if not uses and len(term) > 1 and lowered[at + 2] not in gone:
                uses = modifiers_of(term[:1], word)
            if uses and max(uses.values()) >= term_uses:
                return True
        return False

    def unsaid_degree(words: list[str], missing: tuple[str, ...]) -> tuple[str, ...]:
        """Adverbs the question puts on a word the papers hold, found only as another word of their
        stem ("strongly convex" where they write "convex" and, elsewhere, "strong guarantees"):
        another kind of the thing, as a swapped modifier is. Adjacent by stems ("strong convexity")
        is the same."""
        out = []
        for adverb, word in zip(words, words[1:], strict=False) if texts else ():
            pair = stem_of(adverb.lower()), stem_of(word.lower())
            if adverb in missing or word in missing or word.lower() in framed() or not all(pair):
                continue
            if not degree_adverb(adverb):
                continue
            # An adverb they write on other words is the same degree said of a paraphrase of the word
            # ("temporally localized" for "temporally grounded").
            if not any((stem_of(first), stem_of(then)) == pair or first == adverb.lower() for first, then in pairs()):
                out.append(adverb)
        return tuple(out)

    pairs = cache(lambda: [pair for tokens in written() for pair in zip(tokens, tokens[1:], strict=False)])
    bare = said.bare  # "only convex (rather than strongly convex)": the words asked bare

    def only_qualified(word: str) -> bool:
        """A word the question asks for bare ("only convex") that the papers write only with an
        adverb of degree before it ("strongly convex"): another kind of the thing."""
        if word.lower() not in bare or not texts:
            return False
        wanted = stem_of(word.lower())
        before = [first for first, then in pairs() if stem_of(then) == wanted]
        return bool(before) and all(map(degree_adverb, before))

    def degree_adverb(word: str) -> bool:
        """An adverb in -ly, not a noun in -ly (its stem keeps the "li": "anomaly" -> "anomali")."""
        return bool(_ADVERB.fullmatch(word)) and not any(stem.endswith("li") for stem in stem_of(word.lower()))

    asks_for_code = said.code

    def only_where_the_code_is(word: str) -> bool:
        """A word the papers hold only in the sentence saying where their code is ("code" of "Our code
        is available"): their implementation, not what they are about (another thing, as "code" to
        remove watermarks from is), unless the question asks for their code. A framing word ("the
        papers here") is not asked of them at all."""
        wanted = stem_of(word.lower())
        if asks_for_code or not wanted or not any(code_links()):
            return False
        holding = [link for link, held in zip(code_links(), sentence_stems(), strict=True) if wanted <= held]
        return bool(holding) and all(holding) and word.lower() not in framed()

    code_links = cache(lambda: [CODE_LINK.search(text) is not None for text in texts])
    sentence_stems = cache(lambda: [frozenset(s for token in tokens for s in stem_of(token)) for tokens in written()])

    checks: list[tuple[str, tuple[str, ...], float, bool]] = []
    for phrase in constraints:
        words = [w for run in question_phrases(phrase) for w in run]
        aliased = vocabulary.aliased(phrase, paper_ids)
        missing = tuple(w for w in words if w.lower() not in aliased and not vocabulary.found(w, paper_ids))
        missing = tuple(w for w in missing if w.lower() not in framed()) if missing else missing
        missing = tuple(w for w in missing if w.lower() not in read_as_framing()) if missing else missing
        another = any(map(other, missing)) or another_head(words, missing) or another_modifier(words, missing)
        # Words found, but as another kind of the thing: never high.
        code_only = tuple(w for w in words if w not in missing and only_where_the_code_is(w))
        found = [w for w in words if w not in missing + code_only]
        if kind := (*code_only, *unsaid_degree(words, missing + code_only), *filter(only_qualified, found)):
            missing, another = missing + kind, True
        checks.append((phrase, missing, weigh(missing) / whole() if missing and whole() else 0.0, another))
    checks += [(share, (share,), 0.0, True) for share in unheld_shares(said.text, texts)]
    unfound = [phrase for phrase, missing, _, another in checks if missing and not another]
    similarity: dict[str, float] = {}
    if unfound and len(sentence_vectors):
        similarity = dict(zip(unfound, (embed(unfound) @ sentence_vectors.T).max(axis=1).tolist(), strict=True))
    unfound = [phrase for phrase in unfound if similarity.get(phrase, 0.0) < soft_above]
    rests = resting(said.text, unfound, embed) if unfound and rests_on is not None else {}
    held: dict[str, tuple[float, float]] = {}
    if rests and papers.question_tokens is not None and papers.paper_tokens is not None:
        held = held_in_context(said.text, list(rests), papers.question_tokens(), papers.paper_tokens())
    out = []
    for phrase, missing, weight, another in checks:
        salience = rests.get(phrase, 1.0)
        common = min((zipf_frequency(word, "en") for word in missing), default=0.0) if phrase in rests else 0.0
        match, least = held.get(phrase, (0.0, 0.0))
        judged = rests_on(salience, common, match, least) if phrase in rests and rests_on is not None else None
        out.append(
            ConstraintCheck(
                phrase,
                missing,
                weight,
                similarity.get(phrase, 0.0) if missing else 1.0,
                another,
                salience,
                common,
                match,
                least,
                framing=judged is not None and judged < block_above,
                rests=judged or 0.0,
            )
        )
    return out


def unheld_shares(question: str, texts: Sequence[str]) -> list[str]:
    """The shares the question states ("5%") that no text gives, within `_SHARE_WITHIN`."""
    given = [float(m[1]) for text in texts for m in SHARE.finditer(text)]
    return [
        m[0]
        for m in SHARE.finditer(question)
        if texts and not any(abs(float(m[1]) - value) <= _SHARE_WITHIN * max(value, 1.0) for value in given)
    ]


def held_in_context(
    question: str, phrases: Sequence[str], asked: TokenVectors, papers: np.ndarray
) -> dict[str, tuple[float, float]]:
    """For each phrase, how well the papers hold its words as the question uses them: over its word
    pieces (stop words aside), the mean and the least of each one's best cosine with a content
    piece of the papers (`papers`), both read in context by the English encoder (BERTScore's
    recall). "pictures" finds "images"; a framing word ("rundown") and a swapped term find little.
    Hand-written: the encoder gives the pieces, no library scores a phrase against passages so."""
    out = {}
    for phrase in phrases:
        found = re.search(re.escape(phrase), question, re.I)
        if found is None or not len(papers):
            continue
        rows = [
            i
            for i, (start, end) in enumerate(asked.spans)
            if start >= found.start() and end <= found.end() and asked.pieces[i] not in STOPWORDS
        ]
        if rows:
            best = (asked.vectors[rows] @ papers.T).max(axis=1)
            out[phrase] = (float(best.mean()), float(best.min()))
    return out


def content_pieces(read: Sequence[TokenVectors]) -> np.ndarray:
    """The vectors of the word pieces that start a content word (not a stop word, a word's
    continuation "##..." or punctuation) of texts read by the English encoder."""
    rows = [
        t.vectors[i] for t in read for i, piece in enumerate(t.pieces) if _PIECE.match(piece) and piece not in STOPWORDS
    ]
    return np.vstack(rows) if rows else np.zeros((0, 1), dtype=np.float32)


_PIECE = re.compile(r"\w")


def resting(question: str, phrases: Sequence[str], embed: Embed) -> dict[str, float]:
    """How much of the question's meaning rests on each phrase: 1 - the cosine between the question
    and the question without it (1.0 where the phrase is not found as written)."""
    without = {p: re.sub(re.escape(p), " ", question, count=1, flags=re.I) for p in phrases}
    kept = [p for p in phrases if without[p] != question]
    if not kept:
        return dict.fromkeys(phrases, 1.0)
    vectors = embed([question, *(without[p] for p in kept)])
    moved = dict(zip(kept, (1.0 - vectors[1:] @ vectors[0]).tolist(), strict=True))
    return {p: moved.get(p, 1.0) for p in phrases}


def either(
    checks: Sequence[ConstraintCheck], alternatives: Sequence[Sequence[str]], soft_above: float
) -> list[ConstraintCheck]:
    """The checks with every item of an "X, Y or Z" found when one of them is: any one will do."""
    met = {
        phrase
        for group in alternatives
        if any(c.phrase in group and c.found(soft_above) for c in checks)
        for phrase in group
    }
    return [replace(c, missing=(), weight=0.0, similarity=1.0) if c.phrase in met else c for c in checks]


def held_share(best: float, checks: Sequence[ConstraintCheck], high_above: float, soft_above: float) -> float:
    """How much of the question the answering papers hold, the score `high` is decided on
    (high above 1 - missing_below): 1 when every constraint is found; 0 when what is missing is
    another thing (`ConstraintCheck.other`), whatever it weighs, or the best paper's probability
    is under `high_above`; else 1 - the weight of the constraints not found."""
    unfound = [c for c in checks if not c.found(soft_above)]
    if not unfound:
        return 1.0
    if best < high_above or any(c.other for c in unfound):
        return 0.0
    return 1.0 - sum(c.weight for c in unfound)


def heaviest_unfound(checks: Sequence[ConstraintCheck], soft_above: float) -> ConstraintCheck | None:
    """The constraint a low answer names: the weightiest not found."""
    return max((c for c in checks if not c.found(soft_above)), key=lambda c: c.weight, default=None)

"""A question's framing words: the words that say how it is asked (its verbs, the comparatives of
the asker's point of view, English's multi-word prepositions, told by spaCy's tagger; and the
nouns and adjectives of a casual request, "a rundown of", "the key trick", "this collection", told
by the framing tagger from each word read in context), never what it asks about. A constraint
whose words are all framing is never "missing".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from wordfreq import zipf_frequency

from rag.common.framing_weights import AsideWeights, FramingTagger
from rag.common.text import STOPWORDS, parsed
from rag.index.tokens import TokenVectors
from rag.query.words import acronyms, question_phrases

# The parts of speech that say what a question is about (spaCy's universal tags), less the
# comparatives and superlatives ("earlier", "larger"), which relate it to the asker's point of view.
_CONTENT_TAGS = frozenset({"NOUN", "PROPN", "ADJ", "NUM", "X", "SYM"})
_RELATIVE_TAGS = frozenset({"JJR", "JJS"})
# The dependencies of a participle used as a verb ("while avoiding", "keep getting beaten"), not
# as a modifier or a noun ("federated fine-tuning", "pretrained models", "avoiding retraining").
_VERBAL_DEPS = frozenset({"ROOT", "advcl", "ccomp", "relcl", "acl", "pcomp", "aux", "auxpass", "csubj", "parataxis"})
_WH_DETERMINERS = frozenset({"WDT", "WP"})
# A noun pointed at ("in this collection", "these ones") is what the asker sees, not what the papers hold.
_DEICTIC = frozenset({"this", "these", "that", "those"})
_DO = frozenset({"do", "does", "did"})
_FINITE = frozenset({"VBZ", "VBP", "VBD"})
_CLAUSE_ENDS = frozenset({"IN", "TO", "WDT", "WP", "WRB"})
_ARTICLES = frozenset({"a", "an", "the", "its", "their", "this", "these", "that", "those"})
# English's multi-word prepositions and adverbials, a closed class: their nouns say how a thing
# is related ("in place of X", "with respect to Y", "for example"), never what it is.
_IDIOM = re.compile(
    r"\b(?:(?:in|with) (?:respect|regard|relation|reference|comparison|contrast|addition|response) to"
    r"|(?:in|by) (?:the )?(?:place|terms|means|spite|front|favou?r|light|view|case|course|absence|presence|face|"
    r"context|sake|way|lieu|behalf|excess|pursuit|support|need|service|charge) of"
    r"|on (?:top|behalf|the basis|account) of|at the (?:cost|expense|heart|end|level) of|as a (?:result|function) of"
    r"|in (?:line|comparison|contrast|accordance|conjunction|combination) with"
    r"|for (?:example|instance|the most part)|in (?:practice|general|particular|short|turn|principle|total)"
    r"|over time|at (?:the same|a) time|(?:on|in) average|in the (?:end|long run))\b",
    re.I,
)


def framing_words(question: str, model: str) -> frozenset[str]:
    """The question's words (lowercased) never used in it as content: verbs, adverbs,
    prepositions, pronouns, determiners, comparatives, stop words ("several", "whole"), a noun
    pointed at ("anything in this pile"). What the
    papers must hold is its nouns and adjectives; "PLANET and FedSSA both talk about alignment"
    asks nothing of "talk". The noun a "what" or "which" picks is the kind of answer asked for,
    not a constraint on it ("What technique does MetaDNS integrate?": whatever the abstract calls
    it), though its modifiers are ("which control-theoretic technique"). So are the verb of a
    do-question that the tagger takes for a noun, and the nouns of a multi-word preposition
    ("in place of", "with respect to")."""

    def do_verbs(tokens) -> set[int]:
        """The verb of a do-question when the tagger took it for a noun ("How many tasks does X
        contain?", "how do A and B each decide which ..."): after "do", before any verb, the first
        bare noun, not after an article, that ends the clause (before a preposition, a wh-word or
        the end)."""
        out: set[int] = set()
        for at, token in enumerate(tokens):
            if token.lower_ not in _DO or token.tag_ not in _FINITE:
                continue
            for i in range(at + 2, len(tokens)):
                word = tokens[i]
                if word.tag_ in _FINITE or (word.tag_ == "VB" and tokens[i - 1].lower_ != "to"):
                    break
                after = tokens[i + 1] if i + 1 < len(tokens) else None
                ends = after is None or after.text in "?.,;:!"
                closes = ends or (after is not None and (after.is_punct or after.tag_ in _CLAUSE_ENDS))
                whole = tokens[i - 1].whitespace_ and (word.whitespace_ or ends)
                subject = tokens[i - 1].lower_ in _ARTICLES  # "does the attention in X differ"
                if word.tag_ == "NN" and whole and closes and not subject:
                    out.add(i)
                    break
        return out

    tokens = list(parsed(model, question))
    verbs = do_verbs(tokens)
    idioms = [match.span() for match in _IDIOM.finditer(question)]

    def is_content(token) -> bool:
        if (
            token.is_stop
            or any(start <= token.idx < end for start, end in idioms)
            or (
                token.pos_ == "NOUN"
                and any(c.dep_ == "det" and (c.tag_ in _WH_DETERMINERS or c.lower_ in _DEICTIC) for c in token.children)
            )
            or token.i in verbs
        ):
            return False
        if token.tag_ in ("VBN", "VBG"):
            return token.dep_ not in _VERBAL_DEPS and not any(c.dep_ == "dobj" for c in token.children)
        return token.pos_ in _CONTENT_TAGS and token.tag_ not in _RELATIVE_TAGS

    content: defaultdict[str, set[bool]] = defaultdict(set)
    flags = [is_content(token) for token in tokens]
    for token, flag in zip(tokens, flags, strict=True):
        content[token.text.lower()].add(flag)
    # A word the question writes as several tokens ("don't", "control-theoretic") frames it when
    # each of its pieces does.
    start = 0
    for end, token in enumerate(tokens, start=1):
        if token.whitespace_ or end == len(tokens):
            if end - start > 1:
                pieces = range(start, end)
                written = "".join(tokens[i].text for i in pieces).lower()
                content[written].add(any(flags[i] for i in pieces if tokens[i].is_alpha))
            start = end
    return frozenset(word for word, uses in content.items() if True not in uses)


# English's first-person pronouns, a closed class: a clause that holds one speaks of the asker.
FIRST_PERSON = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "we", "we're", "we've", "our", "ours", "us"}
)
_WORD = re.compile(r"\w[\w'-]*")


def words_in_context(
    text: str, read: TokenVectors, layer: int | None = None
) -> list[tuple[str, tuple[int, int], np.ndarray]]:
    """Each word of `text` but its stop words (lowercased), its span, and its unit vector in
    context: the mean of its word pieces' vectors at `layer` (None: the last) as the English
    encoder read the text (`read`)."""
    pieces = read.at(layer)
    out = []
    for word in _WORD.finditer(text):
        if word.group(0).lower() in STOPWORDS:
            continue
        rows = [i for i, (start, end) in enumerate(read.spans) if start >= word.start() and end <= word.end()]
        if rows:
            vector = pieces[rows].mean(axis=0)
            out.append((word.group(0).lower(), word.span(), vector / max(float(np.linalg.norm(vector)), 1e-12)))
    return out


def zipfs(words: list[str]) -> np.ndarray:
    """The words' general-English Zipf frequencies (wordfreq), the framing tagger's second input."""
    return np.asarray([zipf_frequency(word, "en") for word in words], dtype=np.float32)


def tagged(
    text: str, read: TokenVectors, model: FramingTagger, placed: bool = False
) -> list[tuple[str, tuple[int, int], float]]:
    """Each word of `text` but its stop words, its span, and the framing tagger's P(content) for
    it as the question uses it: the word's own reading, or (`placed`) where it sits (`structure`,
    from the parse of the tagger's `parser`). `read` holds the layer the tagger reads. A word
    written as a name ("the ODDS benchmark", "ALiBi") is content, 1.0: the tagger reads words
    lowercased, and takes a name spelt as an English word ("odds", "alibi") for that word."""
    words = words_in_context(text, read, model.layer)
    if not words:
        return []
    if placed:
        content = model.placed(placed_inputs(text, words, model.parser))
    else:
        content = model.content(np.vstack([vector for *_, vector in words]), zipfs([word for word, *_ in words]))
    names = acronyms(text)
    return [
        (word, span, 1.0 if word in names else p) for (word, span, _), p in zip(words, content.tolist(), strict=True)
    ]


# Where a word sits, what the framing tagger's second reading adds to the word and its frequency. The
# dependencies by which a word's phrase hangs from its sentence's root and the prepositions that
# introduce it, as spaCy's English parser labels them (each of the rest counts as one more): the object
# of "what does it use" asks, a phrase after "for" ("for our data catalog") or a fragment beside the
# question ("brief blurbs") frames. Hand-written: no library at hand marks a casual question's asides.
_SEGMENT = re.compile(r"[^,.;:!?()\u2014\u2013]+")
_ATTACHMENTS = (
    "nsubj", "dobj", "prep", "npadvmod", "appos", "dep", "advcl", "ccomp", "conj", "attr", "amod",
    "compound", "ROOT", "nmod", "punct", "advmod", "acl", "pobj", "xcomp", "parataxis",
)  # fmt: skip
_PREPOSITIONS = ("for", "in", "on", "of", "with", "about", "from", "by", "to", "as")
_ASKING_TAGS = frozenset({"WDT", "WP", "WRB"})
_VERBS = frozenset({"VERB", "AUX"})
# `structure`'s columns: each attachment and preposition, one more of each, then ten of sentence and clause.
STRUCTURE_COLUMNS = len(_ATTACHMENTS) + 1 + len(_PREPOSITIONS) + 1 + 10


def structure(text: str, spans: Sequence[tuple[int, int]], doc) -> np.ndarray:
    """Where each word (its span in `text`) sits, as spaCy parsed the text (`doc`), a row per word:
    its attachment and preposition (one-hot, `_ATTACHMENTS`, `_PREPOSITIONS`); whether its sentence
    asks (a "?" or a wh-word), has a verb at its root, is one of several; whether its clause (split
    at punctuation) has a verb, asks, speaks of the asker, is the first or the last of several; the
    word's place in the text and its clause's length (at most 30 tokens)."""
    clauses = [m.span() for m in _SEGMENT.finditer(text) if m.group(0).strip()]
    several_sentences = float(len(list(doc.sents)) > 1)
    rows = []
    for start, _ in spans:
        at = next((i for i, (a, b) in enumerate(clauses) if a <= start < b), 0)
        first, last = clauses[at] if clauses else (0, len(text))
        tokens = [t for t in doc if first <= t.idx < last]
        token = next((t for t in doc if t.idx <= start < t.idx + len(t) or t.idx >= start), doc[-1])
        sentence, top = token.sent, token
        while top.head.i != top.i and top.head.i != sentence.root.i:
            top = top.head
        attachment = "ROOT" if sentence.root.i in (token.i, top.i) else top.dep_
        preposition, up = None, token
        while up.head.i != up.i:
            if up.dep_ == "pobj" and up.head.dep_ == "prep":
                preposition = up.head.lower_
                break
            up = up.head
        rows.append(
            [float(attachment == a) for a in _ATTACHMENTS]
            + [float(attachment not in _ATTACHMENTS)]
            + [float(preposition == p) for p in _PREPOSITIONS]
            + [float(preposition is not None and preposition not in _PREPOSITIONS)]
            + [
                float("?" in sentence.text or any(t.tag_ in _ASKING_TAGS for t in sentence)),
                float(sentence.root.pos_ in _VERBS),
                several_sentences,
                float(any(t.pos_ in _VERBS for t in tokens)),
                float(any(t.tag_ in _ASKING_TAGS | {"WP$"} for t in tokens) or text[last : last + 1] == "?"),
                float(any(t.lower_ in FIRST_PERSON for t in tokens)),
                float(len(clauses) > 1 and at == 0),
                float(len(clauses) > 1 and at == len(clauses) - 1),
                start / max(1, len(text)),
                min(len(tokens), 30) / 30,
            ]
        )
    return np.asarray(rows, dtype=np.float32).reshape(len(spans), STRUCTURE_COLUMNS)


def placed_inputs(text: str, words: list[tuple[str, tuple[int, int], np.ndarray]], parser: str) -> np.ndarray:
    """The rows the framing tagger's reading of where a word sits reads (`FramingTagger.placed`), one per
    word of `words_in_context`: its vector, its Zipf frequency / 7 and `structure` (spaCy's `parser`)."""
    where = structure(text, [span for _, span, _ in words], parsed(parser, text))
    frequencies = zipfs([word for word, *_ in words])
    return np.hstack([np.vstack([vector for *_, vector in words]), frequencies[:, None] / 7, where])


def tagged_framing(text: str, read: TokenVectors, model: FramingTagger, below: float) -> frozenset[str]:
    """The words of `text` the framing tagger reads as framing (P(content) under `below`) wherever
    the question uses them: learned from what writers of questions marked, it reaches casual
    requests no rule lists ("the lowdown on", "what's the hook")."""
    return framed_below(tagged(text, read, model), below)


def framed_below(words: list[tuple[str, tuple[int, int], float]], below: float) -> frozenset[str]:
    """`tagged_framing` of words already tagged (`tagged`): one reading serves every threshold."""
    uses: defaultdict[str, list[float]] = defaultdict(list)
    for word, _, p in words:
        uses[word].append(p)
    return frozenset(word for word, ps in uses.items() if max(ps) < below)


_CLAUSE = re.compile(r"[^,.;:!?()\u2014]+")
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")
_TOKEN = re.compile(r"[\w'-]+")
Measures = tuple[float, float, float, float, float]


def aside_measures(
    text: str, phrases: Sequence[str], words: list[tuple[str, tuple[int, int], float]]
) -> dict[str, Measures]:
    """What `AsideWeights` reads of each phrase found in `text`, given its words' P(content)
    (`tagged`): whether its clause speaks of the asker, whether it sits in a sentence other than
    the one asked (ending "?"), the mean P(content) over the rest of its clause and over its own
    words (1.0 with none), and how many other words its clause has (at most 30). Hand-written:
    clauses split at punctuation, since no library at hand marks a casual question's asides."""
    sentences = [m.span() for m in _SENTENCE.finditer(text)]
    asked = [(start, end) for start, end in sentences if text[start:end].rstrip().endswith("?")]
    out: dict[str, Measures] = {}
    for phrase in phrases:
        found = re.search(re.escape(phrase), text, re.I)
        if found is None:
            continue
        start, end = found.span()
        first, last = next((m.span() for m in _CLAUSE.finditer(text) if m.start() <= start < m.end()), (start, end))
        last = max(last, end)
        tokens = {token.lower() for token in _TOKEN.findall(text[first:last])}
        within = [p for _, (a, b), p in words if a >= start and b <= end]
        around = [p for _, (a, b), p in words if a >= first and b <= last and not (a >= start and b <= end)]
        out[phrase] = (
            float(bool(FIRST_PERSON & tokens)),
            float(bool(asked) and not any(a <= start < b for a, b in asked)),
            float(np.mean(around)) if around else 1.0,
            float(np.mean(within)) if within else 1.0,
            float(min(len(_TOKEN.findall(text[first:start] + " " + text[end:last])), 30)),
        )
    return out


def aside_words(
    text: str, phrases: Sequence[str], words: list[tuple[str, tuple[int, int], float]], weights: AsideWeights
) -> frozenset[str]:
    """The words of the phrases `weights` reads as the asker's aside (P(content) under its `below`),
    given the question's words as tagged (`tagged`): "pathology core lab, budget season again."
    beside the request, which the papers never hold."""
    measures = aside_measures(text, phrases, words)
    return frozenset(
        word.lower()
        for phrase, measured in measures.items()
        if weights.content(measured) < weights.below
        for run in question_phrases(phrase)
        for word in run
    )

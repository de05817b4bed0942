"""The extractive generator: answers from the retrieved abstracts' own sentences, chosen to
cover what the question asks, with no model and in milliseconds."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace

from rag.answer.citations import MARKER
from rag.answer.sentences import (
    CONTRASTS,
    EXPERIMENTS,
    FIGURE,
    FINDING,
    MECHANISM,
    NAMES_DATA,
    NUMBER,
    PROBLEM,
    RESULT_CLAIM,
    Candidate,
    absent_from,
    counts,
    gives,
    introduces,
    introduction,
    joined,
    mechanism,
    method_sentences,
    third_person,
)
from rag.common.text import (
    CODE_LINK,
    CONTRIBUTION,
    NEW_WORK,
    stems,
)
from rag.common.weights import ExtractiveWeights
from rag.index.corpus import mentions
from rag.index.lexicon import Lexicon
from rag.query.analysis import Ask
from rag.retrieve.retrieval import Hit


class ExtractiveGenerator:
    """Picks the sentences of the retrieved abstracts that best answer the question.

    The Assistant hands over only the papers with enough evidence; a sentence's score is its
    cosine with the question, plus the rare question words it shares, plus what the question
    asks for (a number, a definition, code), as weighted in `ExtractiveWeights`. "Which
    papers...?" gets one sentence from every paper. Hand-written because no library answers
    extractively with citations per sentence.
    """

    name = "extractive"
    verbatim = True

    def __init__(self, lexicon: Lexicon | None = None, weights: ExtractiveWeights | None = None):
        """`lexicon`: the corpus's word counts over its sentences, to weight question words by
        rarity (IDF), so that "GRPO" or "RMSE" in a question counts for more than "method"."""
        self.weights = weights or ExtractiveWeights()
        # Over sentences; scikit-learn's smooth IDF (every word weighs 1 or more): ExtractiveWeights were tuned on it.
        self.idf = (lexicon or Lexicon.empty()).sentence_idf(smoothing=1, offset=1)

    def overlap(self, question_stems: AbstractSet[str], sentence_stems: set[str], spread: dict[str, int]) -> float:
        """IDF-weighted share of the question's words that the sentence contains. A word found in
        several sentences of the same abstract ("transit stop placement" in a paper about it)
        names the paper's topic rather than the sentence that answers: it counts once per
        sentence it is in, divided among them."""
        if not question_stems:
            return 0.0
        shared = question_stems & sentence_stems
        return sum(self.idf[s] / spread.get(s, 1) for s in shared) / self.idf.total(question_stems)

    def score(
        self,
        ask: Ask,
        sources: list[Hit],
        multilingual: bool = False,
        naming: str | None = None,
    ) -> list[Candidate]:
        """Every sentence of the sources, best first, for `ask` (the question's analysis, or a
        part's): its intent and the types of the facts asked favour the sentences of that kind.
        `naming`: the text whose named papers are the subject (default: what `ask` said; the
        whole question for a part of it)."""
        w = self.weights
        said = ask.said
        spread = w.multilingual_spread if multilingual else 1.0
        wants_number = said.how_much or "number" in ask.wants
        wants_experiments = said.where_tested or "dataset" in ask.wants
        wants_problem = ask.intent == "limitation"
        wants_mechanism = ask.intent == "how-it-works"
        wants_contrast = ask.intent == "comparison"
        wants_code = said.code
        top_dense = max((h.dense_score for h in sources), default=0.0)
        # A question that names a paper ("What speedup does Jacobi Forcing report?") is about it.
        named = {n for n, hit in enumerate(sources, start=1) if mentions(naming or said.text, hit.paper.name)}
        asked = said.stems
        candidates = []
        for n, hit in enumerate(sources, start=1):
            if named and n not in named:
                continue
            # Words naming the paper pick the paper, not the sentence that answers.
            question_stems = asked - stems(hit.paper.name)
            defining = n in named and said.defining
            sentence_stems = {sentence: stems(sentence) for sentence in hit.sentence_scores}
            in_sentences: dict[str, int] = {}
            for own in sentence_stems.values():
                for stem in own & question_stems:
                    in_sentences[stem] = in_sentences.get(stem, 0) + 1
            for position, (sentence, cosine) in enumerate(hit.sentence_scores.items()):
                overlap = self.overlap(question_stems, sentence_stems[sentence], in_sentences)
                score = (
                    w.cosine * cosine + w.paper * (hit.dense_score - top_dense) / spread + spread * w.overlap * overlap
                )
                if position == 0:
                    score += spread * w.opening
                if (CONTRIBUTION.search(sentence) or hit.paper.name in sentence) and not wants_problem:
                    score += spread * w.contribution
                if defining and introduces(sentence, hit.paper.name):
                    score += spread * w.definition
                if wants_number and NUMBER.search(sentence):
                    score += spread * (w.number + (w.counted if counts(question_stems, sentence) else 0.0))
                if wants_experiments and EXPERIMENTS.search(sentence):
                    score += spread * w.experiments
                # The problem is stated before the paper answers it: not in "we propose X to address it".
                if wants_problem and PROBLEM.search(sentence) and not NEW_WORK.search(sentence):
                    score += spread * w.motivation
                if wants_contrast and CONTRASTS.search(sentence):
                    score += spread * w.contrast
                if wants_mechanism and MECHANISM.search(sentence):
                    score += spread * w.mechanism
                if (wants_mechanism or wants_problem) and RESULT_CLAIM.search(sentence):
                    score -= spread * w.claim
                if CODE_LINK.search(sentence):
                    # "Code is available at ..." answers a question about code and nothing else.
                    score += w.boilerplate if wants_code else -w.boilerplate
                candidates.append(Candidate(n, sentence, score, frozenset(question_stems & sentence_stems[sentence])))
        return sorted(candidates, key=lambda c: -c.score)

    def select(self, ask: Ask, sources: list[Hit], multilingual: bool = False) -> list[Candidate]:
        w = self.weights
        candidates = self.score(ask, sources, multilingual)
        if not candidates:
            return []
        if ask.said.several:
            # Each paper's best sentence, in the order of the papers' ranks.
            best_of: dict[int, Candidate] = {}
            for c in candidates:
                best_of.setdefault(c.source, c)
            return [best_of[n] for n in sorted(best_of)[: w.max_papers]]
        if ask.said.which:
            # "Which paper ...?" is answered by the best-ranked paper: its best sentence leads.
            top = min(c.source for c in candidates)
            lead = next(c for c in candidates if c.source == top)
            candidates.remove(lead)
            candidates.insert(
                0,
                Candidate(
                    lead.source,
                    lead.sentence,
                    max(lead.score, candidates[0].score if candidates else lead.score),
                    lead.asked,
                ),
            )
        return self.cover(candidates, multilingual)

    def cover(self, candidates: list[Candidate], multilingual: bool) -> list[Candidate]:
        """Sentences that together answer every part of the question: greedily, the best score
        plus `new_words` times the IDF share of the question's words no chosen sentence has yet
        ("the two modules ... and the speedup" takes the sentence with the speedup too), while
        within `margin` of the best sentence's score."""
        w = self.weights
        spread = w.multilingual_spread if multilingual else 1.0
        total = self.idf.total(set().union(*(c.asked for c in candidates))) or 1.0
        best = candidates[0].score
        chosen: list[Candidate] = []
        covered: set[str] = set()
        per_paper: dict[int, int] = {}
        left = list(candidates)

        def gain(c: Candidate) -> float:
            return c.score + (w.new_words * self.idf.total(c.asked - covered) / total if chosen else 0.0)

        while left and len(chosen) < w.max_sentences:
            pick = max(left, key=gain)
            if gain(pick) < best - w.margin * spread:
                break
            left.remove(pick)
            if per_paper.get(pick.source, 0) == w.per_paper:
                continue
            per_paper[pick.source] = per_paper.get(pick.source, 0) + 1
            chosen.append(pick)
            covered |= pick.asked
        return chosen

    def compose(self, ask: Ask, sources: list[Hit]) -> str:
        """The answer in the shape the question asks for: the named papers side by side for a
        comparison, a line per paper for a list or a summary (a table when a figure is asked),
        else the sentences that answer, with a plain word for a part no source holds."""
        number = {hit.paper.paper_id: n for n, hit in enumerate(sources, start=1)}
        named = [number[p.paper_id] for p in ask.named if p.paper_id in number]  # in the order asked
        if ask.intent == "comparison" and len(named) >= 2:
            return self.side_by_side(ask, sources, named)
        if ask.intent == "summary" and ask.one_paper:
            return self.summary_of_one(ask, sources, named[0] if len(named) == 1 else 1)
        if (ask.said.several or ask.intent in ("list", "summary")) and len(sources) > 1:
            return self.per_paper(ask, sources)
        chosen = self.answering(ask, sources, named)
        if ask.rules_read is not None:
            # A model's reading of what is asked adds sentences to what the rules' reading says, never
            # takes one away: read as a limitation, "which paper argues ... uses a fixed corruption
            # level" lost the sentence holding "fixed-noise".
            chosen = joined(chosen, self.answering(replace(ask, intent=ask.rules_read), sources, named))
        text = self.write(ask.said.text, sources, chosen)
        asked = sources[named[0] - 1] if len(named) == 1 else None  # the one paper asked about
        absent = (
            absent_from(list(asked.sentence_scores), asked.paper.name, ask.wants, ask.said.data_names) if asked else ""
        )
        return f"{absent} {text}" if absent and text else text

    def answering(self, ask: Ask, sources: list[Hit], named: list[int]) -> list[Candidate]:
        """The sentences that answer a question of one paper or a few, by what it asks (`named`: the
        numbers of the sources it names)."""
        multilingual = ask.said.foreign
        chosen = self.select(ask, sources, multilingual)
        # The one paper answering: the one named, or the one every chosen sentence comes from.
        one = named[0] if len(named) == 1 else chosen[0].source if len({c.source for c in chosen}) == 1 else None
        if len(ask.facts) > 1 or (one is not None and ask.wants & {"number", "dataset"}):
            # Every part, and the one figure or data asked of one paper, gets a sentence giving it.
            chosen = self.per_part(ask, sources, multilingual, chosen, one)
        # How one paper works, what problem it takes on, how it compares: said in more than one sentence,
        # whether the question asks it or one of its parts does ("the tokenizer trick: params that get trained?").
        intent = ask.intent
        if len(ask.facts) > 1 and intent not in EXPLAINED:
            intent = next((part.intent for part in ask.parts if part.intent in ("how-it-works", "limitation")), intent)
        if intent in EXPLAINED and one is not None:
            source = sources[one - 1]
            own = [c for c in self.score(ask, sources, multilingual) if c.source == one]
            method: list[str] = []
            if intent in ("how-it-works", "existence"):
                what, after = introduction(own, list(source.sentence_scores), source.paper.name)
                chosen = self.with_mechanism(own, chosen, after)
                method = method_sentences(source, what)
            # "Yes: " and the sentence that says so, then how, in the abstract's order.
            lead = chosen[0] if intent == "existence" and chosen else None
            told = self.explained(source, own, chosen, method)
            # A part asked it: the parts' sentences lead, in the order asked, and the rest follows.
            chosen = told if intent == ask.intent else joined(chosen, told)
            if lead is not None:
                chosen = joined([lead], chosen)
        return chosen

    def summary_of_one(self, ask: Ask, sources: list[Hit], n: int) -> str:
        """A summary of one paper (`n`: the one named, else the likeliest): what it brings (its
        introduction, or its best sentence on the question), how it works (the sentence after, when
        it claims no result), what it finds first and last (the sentences after its introduction
        reporting a result), then its next best up to `summary_of_one`, in the abstract's order."""
        source, shown = sources[n - 1], _shown(ask)
        own = [c for c in self.score(ask, sources, ask.said.foreign) if c.source == n and shown(c.sentence)]
        if not own:
            return ""
        order = list(source.sentence_scores)
        what, after = introduction(own, order, source.paper.name)
        what = what or own[0]
        how = mechanism(own, after)
        later = order[order.index(what.sentence) + 1 :]
        findings = [s for s in later if (how is None or s != how.sentence) and FINDING.search(s)]
        # What it finds first (often its claim) and last (often its experiments).
        picked = [what, *(c for c in own if c is how or c.sentence in (*findings[:1], *findings[-1:]))]
        # A role the abstract leaves unfilled goes to its next best sentence on the question.
        picked += [c for c in own if c not in picked][: self.weights.summary_of_one - len(picked)]
        return self.write(ask.said.text, sources, sorted(picked, key=lambda c: order.index(c.sentence)))

    def per_part(
        self,
        ask: Ask,
        sources: list[Hit],
        multilingual: bool,
        chosen: list[Candidate],
        one: int | None = None,
    ) -> list[Candidate]:
        """Each part of a multi-part question ("What is X, and how much faster is it?"), or the one
        figure or data asked of one paper: the part's best sentence, in the order asked, then the
        sentences chosen for the whole question, up to `max_sentences`. Scored alone, a part's
        intent picks its kind of sentence (the definition, the figure), which the whole question's
        mix of words can outweigh. `one`: the paper answering, when one does, whose sentences
        answer each part (not a neighbour's benchmark)."""
        picked: list[Candidate] = []
        for fact, part in zip(ask.facts, ask.parts, strict=True):
            # A part the model reads gets its sentence for that reading and the rules' (`Ask.rules_read`).
            readings = [part] if part.rules_read is None else [part, replace(part, intent=part.rules_read)]
            for reading in readings:
                scored = self.score(reading, sources, multilingual, naming=ask.said.text)
                scored = [c for c in scored if c.source == one] or scored
                # A part asking for a figure or for the data is answered by a sentence that gives it:
                # the best-scored of the sentences that give what the part asks (max keeps the first).
                best = max(
                    scored, key=lambda c: gives(fact.wants, c.sentence, sources[c.source - 1].paper.name), default=None
                )
                if best is not None and all(best.sentence != c.sentence for c in picked):
                    picked.append(best)
        return joined(picked, chosen)[: max(self.weights.max_sentences, len(picked))]

    def with_mechanism(self, own: list[Candidate], chosen: list[Candidate], after: str | None) -> list[Candidate]:
        """ "How does X work?" about one paper (`own`: its scored sentences): `after`, the sentence
        after X's introduction, which most often says how, joins the answer when it is not in it yet."""
        if after is None or any(c.sentence == after for c in chosen):
            return chosen
        return [*chosen, *(c for c in own if c.sentence == after)][: max(self.weights.max_sentences, len(chosen))]

    def explained(
        self, source: Hit, own: list[Candidate], chosen: list[Candidate], first: Sequence[str] = ()
    ) -> list[Candidate]:
        """How one paper works, what problem it takes on or how it compares (`own`: its scored
        sentences): at least `explain_at_least` of its sentences, in the abstract's order; the
        sentences joining are the first of `first` (its head before the rest), then the next best."""
        more = self.weights.explain_at_least - len(chosen)
        if more <= 0:
            return chosen
        taken = {c.sentence for c in chosen}
        rank = {sentence: min(i, 1) for i, sentence in enumerate(first)}
        ordered = sorted(own, key=lambda c: rank.get(c.sentence, 2))  # stable: by score within a rank
        added = [c for c in ordered if c.sentence not in taken][:more]
        order = list(source.sentence_scores)
        return sorted([*chosen, *added], key=lambda c: order.index(c.sentence))

    def write(self, question: str, sources: list[Hit], chosen: list[Candidate]) -> str:
        """Chosen sentences as answer prose, each cited; a paper named the first time it speaks."""
        parts = []
        introduced: set[int] = set()
        for c in chosen:
            text, end = self.sentence(c)
            name = sources[c.source - 1].paper.name
            # Say which paper a sentence comes from the first time, unless the question or the sentence says it.
            if (
                c.source not in introduced
                and not name.endswith("…")
                and name not in text
                and not mentions(question, name)
            ):
                text = f"{name}: {text}"
            introduced.add(c.source)
            parts.append(f"{text} [{c.source}]{end}")
        return " ".join(parts)

    @staticmethod
    def sentence(c: Candidate) -> tuple[str, str]:
        """A candidate's sentence as the answer says it, without its final stop, and that stop."""
        # A bracketed number inside an abstract ("as in [7]") is not ours to cite.
        text = " ".join(MARKER.sub(" ", third_person(c.sentence)).split())
        end = text[-1] if text and text[-1] in ".!?" else "."
        return text.rstrip(".!?"), end

    def best_per_paper(
        self, candidates: list[Candidate], wanted: re.Pattern[str] | None = None
    ) -> dict[int, Candidate]:
        """Each source's best sentence (of those matching `wanted`, when given)."""
        best: dict[int, Candidate] = {}
        for c in candidates:
            if wanted is None or wanted.search(c.sentence):
                best.setdefault(c.source, c)
        return best

    def side_by_side(self, ask: Ask, sources: list[Hit], named: list[int]) -> str:
        """A comparison: each named paper on one line, with its best sentences on the aspect asked
        (and, when a figure or the data is asked, the sentence that gives it). A paper the
        conversation named ("How does its approach differ from dLLM-Cache's?") is one of them."""
        naming = " ".join([ask.said.text, *(p.name for p in ask.named)])
        candidates = self.score(ask, sources, ask.said.foreign, naming)
        aspect = FIGURE if "number" in ask.wants else NAMES_DATA if "dataset" in ask.wants else None
        # What is asked of each paper, by the question's own words ("which weakness is each one
        # going after?" asks for each one's problem), when it is more than how they compare.
        asked_of_each = ask.own_intent
        shown = _shown(ask)
        lines = []
        for n in named:
            own = [c for c in candidates if c.source == n]
            if not own:
                continue
            name = sources[n - 1].paper.name
            # What the paper is (the sentence introducing it and the one after, which says how
            # it works), then its sentence on the aspect asked; in the abstract's order.
            order = list(sources[n - 1].sentence_scores)
            what, after = introduction(own, order, name)
            # Its best sentence on the aspect other than those two: what sets it apart.
            # The abstract's opening is background the two papers share, not what sets one apart.
            rest = [c for c in own if c is not what and c.sentence not in (after, order[0])] or own
            # Unless results are asked, a claim of results ("Extensive experiments show ...") says
            # less of how the two differ than a sentence on the method.
            method = [c for c in rest if not RESULT_CLAIM.search(c.sentence)] or rest
            if asked_of_each == "limitation" and what is not None:
                # The problem a paper takes on is said before it introduces itself, in words of a problem.
                before = [c for c in own if c.sentence in order[: order.index(what.sentence)]]
                method = [c for c in before if PROBLEM.search(c.sentence)] or before or method
            on_aspect = self.best_per_paper(own, aspect).get(n, rest[0]) if aspect else method[0]
            chosen = {c.sentence for c in (what, on_aspect) if c is not None} | ({after} if after else set())
            # What is asked rarely fits one sentence of an abstract: its next best ones too (not
            # where its code is, unless asked).
            more = [c.sentence for c in method if c.sentence not in chosen and shown(c.sentence)]
            chosen |= set(more[: self.weights.aspect_sentences - 1])
            picked = sorted((c for c in own if c.sentence in chosen), key=lambda c: order.index(c.sentence))
            body = " ".join(f"{text} [{n}]{end}" for text, end in map(self.sentence, picked))
            lines.append(f"- **{_cell(sources[n - 1].paper.display_name)}**: {body}")
        return "\n".join(lines)

    def per_paper(self, ask: Ask, sources: list[Hit]) -> str:
        """One line per paper with what it contributes to the question; a Markdown table
        (paper | what it does | figure) when the question asks for a figure."""
        w = self.weights
        candidates = self.score(ask, sources, ask.said.foreign)
        best = self.best_per_paper(candidates)
        if ask.intent == "summary" or ask.said.contribution:
            # A summary, or papers asked for what they contribute: the sentence saying what that is.
            best |= self.best_per_paper(candidates, NEW_WORK)
        order = sorted(best)[: w.max_papers]
        if "number" in ask.wants:
            figures = self.best_per_paper(candidates, FIGURE)
            best = {**best, **self.best_per_paper(candidates, CONTRIBUTION)}
            rows = ["| Paper | What it does | Figure |", "|---|---|---|"]
            for n in order:
                does, figure = best[n], figures.get(n)
                cells = [_cell(sources[n - 1].paper.display_name), f"{_cell(self.sentence(does)[0])} [{n}]"]
                cells.append(
                    f"{_cell(self.sentence(figure)[0])} [{n}]"
                    if figure is not None and figure is not does
                    else "(in the sentence before)"
                    if figure is not None
                    else "(no figure in the abstract)"
                )
                rows.append("| " + " | ".join(cells) + " |")
            return "\n".join(rows)
        shown = _shown(ask)
        lines = []
        for n in order:
            name = sources[n - 1].paper.name
            own = [c for c in candidates if c.source == n]
            sentences = list(sources[n - 1].sentence_scores)
            what, after = introduction(own, sentences, name)
            how = mechanism(own, after)
            # The sentence on what is asked; an overview says what the paper is and how it works
            # (the sentence introducing it, the one after); then its next best on the question.
            if ask.intent == "summary":
                ranked, wanted = [best[n], how, what, *own], w.summary_sentences
            else:
                ranked, wanted = [best[n], what, how, *own], w.list_sentences
            picked: list[Candidate] = []
            for c in ranked:
                if len(picked) == wanted:
                    break
                if c is not None and c not in picked and shown(c.sentence):
                    picked.append(c)
            picked = sorted(picked or [best[n]], key=lambda c: sentences.index(c.sentence))
            body = " ".join(f"{text} [{n}]{end}" for text, end in map(self.sentence, picked))
            shown_name = sources[n - 1].paper.display_name
            label = f"**{_cell(shown_name)}**: " if not shown_name.endswith("…") else ""
            lines.append(f"- {label}{body}")
        return "\n".join(lines)

    def condense(self, question: str, history: list[dict]) -> str | None:
        """No model to rewrite a follow-up: the assistant joins it with the conversation."""
        return None

    def stream(self, ask: Ask, sources: list[Hit]) -> Iterator[str]:
        text = self.compose(ask, sources)
        yield from re.findall(r"\S+\s*", text)


# What one paper's answer says in more than one sentence (`explain_at_least`).
EXPLAINED = ("how-it-works", "limitation", "existence", "comparison")


def _shown(ask: Ask) -> Callable[[str], bool]:
    """Which sentences an answer's line may show: not one saying where the code is, unless asked."""
    return lambda sentence: ask.said.code or not CODE_LINK.search(sentence)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell or bold run."""
    return text.replace("|", "/").replace("**", "")

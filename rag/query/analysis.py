"""Question analysis: what a question asks, before anything is retrieved.

`analyse(question, named)` returns an `Ask`: the intent (the kind of answer wanted), the papers
the question names, the facts it asks for (one per part of a multi-part question, each with
the type of answer expected) and its constraints (the content phrases saying what it is about).
The words that only say what kind of answer is wanted ("compare", "summarize", "which
datasets", "how much", "faster", 比较, 总结, 哪些) are scaffolding: they shape the answer, and
are never a constraint, so never "the part not found".

Hand-written rules over English and Chinese question forms: the expected-answer-type step of
factoid QA, which no library ships. `read` gives every later stage the question's `Reading`
(rag/query/words.py); rag/query/framing.py tells its framing words by spaCy's tags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Literal, get_args

from rag.common.text import STOPWORDS, asks_for_several, is_cjk
from rag.index.corpus import Paper
from rag.query.authorship import Authorship, authorship_of
from rag.query.words import Reading, name_like, question_phrases, reading

Intent = Literal[
    "what-is", "how-it-works", "result", "data", "comparison", "summary", "list", "limitation", "existence", "other"
]
AnswerType = Literal["number", "dataset", "method", "yes/no", "text"]
INTENTS: tuple[Intent, ...] = get_args(Intent)
# What one paper's answer is shaped by: what a model of the question may read where no rule does.
ONE_PAPER_INTENTS: frozenset[Intent] = frozenset(
    {"what-is", "how-it-works", "result", "data", "limitation", "existence"}
)


# "What's", "How's": read as "what is", so that the question's form is seen and the contraction
# is never a constraint. Curly apostrophes as straight ones.
_CONTRACTION = re.compile(r"\b(what|how|where|who|why|when|which|that|it|there)'s\b", re.I)


def expanded(question: str) -> str:
    """The question with its spacing normalised and its contractions spelled out."""
    return _CONTRACTION.sub(r"\1 is", " ".join(question.replace("’", "'").split()))


# What a question leaves out ("... agents (excluding RL fine-tuning of language models)", "methods
# other than pruning"), to the end of its clause; not a word quoted ("'not'/'except' queries").
_EXCLUSION = re.compile(
    r"\s*[(,;]?\s*\b(?:excluding|except(?: for)?|other than|apart from|aside from|not counting|but not)\s+"
    r"(?![\'\"‘“])[^,;.?!()]+\)?",
    re.I,
)


def without_exclusions(question: str) -> str:
    """The question less what it leaves out: searched for and checked, that part would bring the
    very papers it excludes (an LLM answering reads the question whole)."""
    kept = _EXCLUSION.sub("", question).strip(" ,;")
    if not kept.rstrip("?.! "):
        return question
    # A cut opening leaves the question's own capital on what now opens it; nothing else changes case.
    opening_cut = question[:1].isupper() and not question.startswith(kept[:1])
    return kept[:1].upper() + kept[1:] if opening_cut else kept


# A question's form opens it, or follows its context ("Prior work blamed X. Why ...?", "In
# unsupervised environment design, why ...?").
_OPENS = r"(?:^|(?<=[.!?,])\s)\W*"


def _any(*patterns: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.I)


# Each intent's forms, English then Chinese. Checked in the order of `_ORDER`: a comparison of
# results ("Compare the speedups of A and B") is a comparison; "Which papers report results on X?"
# a list.
_COMPARISON = _any(
    r"\bcompar(e|es|ed|ing|ison)\b",
    r"\bcontrast\b",
    r"\bdiffer(s|ed|ence|ences)?\b|\bdifferent from\b",
    r"\bdistinguish\w*\b",
    r"\bversus\b|\bvs\.?(?=\s)",
    r"\b(similarit(y|ies)|in common)\b",
    r"\b(better|worse|faster|slower|stronger|weaker|more \w+|less \w+) than\b",
    r"\bwhich (one|of (the|them|these|those) (two|three|both))\b",
    r"比较|对比|区别|不同|差异|异同|相比|哪个更",
)
# How a researcher asks for a paper's gist: "TL;DR of X?", "sum up", "key takeaways", "main
# contributions", "what is X about?". The words shape the question; they are never its topic.
_ABOUT = r"\b(is|are) (it |they )?(all )?about(?=\s*(?:[?.,;]|$|and\b))"
_GIST = (
    r"\btl;?\s?dr\b|\bsum(s|med|ming)? (it |this |them )?up\b|\bgist\b|\btake-?aways?\b|\bin a nutshell\b"
    r"|\b(main|key|core|central|principal) (messages?|points?|contributions?|claims?)\b"
    r"|\b(quick|brief|short|high-level) (overview|summary|recap|rundown|run-down)\b"
    r"|\b(propose|proposes|introduce|introduces|contribute|contributes) and (show|prove|find|achieve|demonstrate)s?\b"
)
_SUMMARY = _any(
    r"\bsummar(y|ies|i[sz]e|i[sz]es|i[sz]ing)\b",
    r"\boverview\b",
    r"\bsurvey\b",
    r"\brecap\b",
    r"\bwhat (has been|is being|was) done\b",
    r"\bwhat (do|does) the (corpus|conference|collection) (say|have|contain)\b",
    r"\b(landscape|state of (the )?(art|research))\b",
    r"\b(main|key|major|common) (ideas|approaches|themes|directions|trends|findings)\b",
    _GIST,
    r"\bwhat\b[^?,;]{1,60}?" + _ABOUT,
    r"\bwhat (is|are) (\S+\s+){1,8}?about(?=\s*(?:[?.,;]|$|and\b))",
    r"总结|概述|综述|概括|归纳|梳理|概览",
)
_EXISTENCE = _any(
    _OPENS + r"(is|are) there\b",
    _OPENS + r"(does|do|did) (any|some|one) (of the )?(paper|work|method|study|studies|approach|model)s?\b",
    _OPENS + r"has (any(one|body)?|some(one|body)?|any (paper|work))\b",
    _OPENS + r"(any|anything) (paper|work|method|study|research)s? (on|about|that|which)\b",
    r"有没有|是否有|有无|存在.{0,6}(论文|工作|方法|研究)吗|有.{0,8}(论文|工作|方法|研究)吗",
)
_DATA = _any(
    r"\b(which|what)\s+(\w+\s+){0,2}?(datasets?|benchmarks?|corpora|environments?|tasks?|domains?|games?|suites?)\b",
    r"\b(evaluat\w*|test\w*|validat\w*|benchmark\w*|experiment\w*|trained|train)\s+(on|in|with|against)\s+(what|which)\b",
    r"\bon (what|which) (data|datasets?|benchmarks?)\b",
    r"\b(datasets?|benchmarks?) (are|is|were|was) (used|evaluated|tested)\b",
    r"数据集|基准|测试集|评测|在哪些.{0,6}(任务|数据|环境)",
)
_RESULT = _any(
    r"\bhow (much|many|fast|large|big|small|long|often|well|accurate)\b",
    r"\bby (how much|what (factor|margin|percent\w*))\b",
    r"\bwhat (\w+\s+){0,2}?(speed-?ups?|accuracy|accuracies|improvement|gains?|scores?|percentage|error|rate|"
    r"reduction|numbers?|figures?|results?|performance|success|pass rate|f1|auc|bleu|perplexity)\b",
    r"\b(speed-?ups?|faster|slower|x faster)\b",
    r"多少|几倍|提升了?多|加速了?多|百分之|准确率|几个|多大|多快",
)
# How a question says something falls short ("What goes wrong when ...?"): a limitation asked,
# and words that shape the question rather than say what it is about.
_FALLS_SHORT = r"\b(go|goes|went|going) wrong\b|\bwrong with\b|\bfalls? short\b|\bwhat is missing\b"
# How a question asks for a method's parts ("the two mechanisms", "its main components"): it asks
# how the method works, and the words shape the question rather than say what it is about.
_PARTS = (
    r"\bbuilding blocks\b"
    r"|\b(main|key|core|two|three|four|five|\d) (components|parts|ingredients|modules|stages|steps|mechanisms)\b"
)
_LIMITATION = _any(
    r"\blimitations?\b",
    r"\b(drawbacks?|weakness(es)?|shortcomings?|bottlenecks?|pitfalls?|failure modes?)\b",
    r"\bwhat (?:(is|are) the (main |key )?)?(problem|gap|issue|challenge|shortcoming)s?\b",
    r"\bwhat motivate[sd]?\b|\bmotivation\b",
    _FALLS_SHORT,
    r"\b(struggles?|struggled|fails?|failed|suffers?|suffered|breaks? down)\b",
    r"\bwhat (\w+\s+){0,3}(address|tackle|solve|overcome|fix)(es|s)?\b",
    r"局限|不足|缺点|缺陷|动机|解决.{0,20}?(什么|哪些)问题|针对.{0,20}?(什么|哪些)问题",
)
_HOW = _any(
    _OPENS + r"how (does|do|did|is|are|can|could)\b",
    r"\bhow (it|they) works?\b",
    r"\b(mechanisms?|key idea|main idea|core idea|intuition|pipeline|architecture)\b",
    _PARTS,
    r"\bwhat (technique|method|approach|strategy|trick)s? (does|do|did)\b",
    r"\bwork\?\s*$",
    r"如何|怎么|怎样|原理|机制|是怎么",
)
_WHAT_IS = _any(
    _OPENS + r"what (is|are)\b",
    _OPENS + r"what (does|do) [^?]{1,60} (do|propose|introduce|stand for)\b",
    _OPENS + r"(define|explain|describe)\b",
    r"\btell me about\b",
    r"是什么|什么是|介绍一下|讲了什么|做了什么",
)
# "Why ...?" asks for a reason, whatever figure it mentions ("Why do they give disappointing speedups?").
_WHY = _any(_OPENS + r"why\b", r"为什么|为何")
_ORDER: tuple[tuple[Intent, re.Pattern[str]], ...] = (
    ("comparison", _COMPARISON),
    ("summary", _SUMMARY),
    ("existence", _EXISTENCE),
    ("limitation", _WHY),
    ("data", _DATA),
    ("result", _RESULT),
    ("limitation", _LIMITATION),
    ("how-it-works", _HOW),
    ("what-is", _WHAT_IS),
)
# One thing asked of each of the papers a question names ("X and Y both ... What does each rely
# on?"): whatever is asked, the answer sets them side by side, as a comparison does.
_EACH = _any(r"\beach\b", r"\bboth\b", r"\brespectively\b", r"\bthe two\b", r"各自|分别|两者")
_ANSWER_TYPES: dict[Intent, AnswerType] = {
    "result": "number",
    "data": "dataset",
    "how-it-works": "method",
    "existence": "yes/no",
}

# Scaffolding: the words that say what kind of answer is wanted. They are cut out of the
# question's constraints (a comma in their place ends a phrase). Measure words ("faster",
# "speedup", "accuracy") say which figure is wanted; whether the paper gives it is the
# answer's business (a part said plainly to be absent), not a constraint of the topic.
_SCAFFOLDING = _any(
    r"\b(please|can you|could you|would you|i want to know|i'd like to know|tell me( about)?|give me|show me)\b",
    r"\b(briefly|in short|in detail|in a few (words|sentences)|side by side)\b",
    _GIST,
    _ABOUT,
    r"\bcompar(e|es|ed|ing|ison)\b|\bcontrast(s|ed|ing)?\b|\bdiffer(s|ence|ences|ent|ently)?\b|\bversus\b|\bvs\.?",
    r"\bdistinguish\w*\b|\bsimilarit(y|ies)\b|\bin common\b|\bsimilar\b",
    r"\bsummar(y|ies|i[sz]e|i[sz]es|i[sz]ing)\b|\boverview\b|\bsurvey\b|\brecap\b|\blist\b|\benumerate\b",
    r"\bdescribe\b|\bexplain\b|\bdefine\b|\bdefinition\b",
    r"\b(datasets?|benchmarks?|corpora|test sets?)\b"
    r"(?=[^?]{0,60}\b(evaluat|test|validat|train|use|run|report|experiment))",
    r"\b(evaluat(e|es|ed|ing|ion)|test(s|ed|ing)?|validat(e|es|ed|ing)|experiments?|experimental)\b(?!-)",
    r"\b(run|runs|ran|running|conduct\w*|perform\w*|carr(y|ies|ied) out)\b"
    r"(?=\s+(\w+\s+)?(experiments?|evaluations?|tests?)\b)",
    r"\bhow (much|many|fast|large|big|small|long|often|well|accurate)\b|\bby (what|how much)\b",
    r"\b(speed-?ups?|faster|slower|quicker|improvements?|improv(e|es|ed|ing)|gains?|better|worse|higher|lower)\b",
    r"\b(figures?|numbers?|results?|performance|score|scores)\b",
    r"\b(limitations?|drawbacks?|weakness(es)?|shortcomings?|motivat\w*|problems?|challenges?|issues?|gaps?)\b"
    r"(?=[^?]{0,40}\b(address|tackle|solve|overcome|fix|motivat|face|have|has|of)\w*\b)",
    r"\bthe (main |key )?(problem|issue|trouble|shortcoming)s? with\b",
    r"\b(address|tackle|solve|overcome|fix)(es|s|ed)?(?=\W*$)",  # "What problem does X address?"
    _FALLS_SHORT + r"|\bmissing from\b",
    r"\b(mechanism|key idea|main idea|core idea|intuition|work|works)\b(?=\W*$)",
    _PARTS,
    r"\b(contributions?|idea|ideas)\b",
    r"\b(according to|roughly|approximately|about how)\b|\b(the )?acronym\b|\bstand for\b",
    r"\bas (ways?|approaches|methods|means|techniques|examples|instances) (to|of|for)\b",
    r"比较|对比|区别|不同之处|差异|异同|相比|总结|概述|综述|概括|归纳|梳理|介绍一下|介绍|哪些|多少|几倍|如何|怎么|怎样|"
    r"是什么|什么是|什么|有没有|是否有|为什么|为何|数据集|基准|局限|不足|动机|请|一下",
)
# The verb a question is framed with, after its auxiliary and a subject that is a pronoun, a
# paper's name, "the NAME paper" or "the authors" ("What does MedScope contain?", "How does it
# decide ...?", "Has anyone studied ...?"): it says what is asked of the paper, the words after it
# what about. After "the NAME" without such a noun the next word may be a modifier ("legal").
# A common-noun subject keeps its verb ("How well do models solve puzzles?": "solve" is content).
_FRAME_VERB = re.compile(
    r"\b(?i:does|do|did|can|could|will|would)\s+"
    r"(?:it|they|this|that|these|those|(?:the|its|their)\s+(?:paper|method|model|approach|framework|authors|work|study)"
    r"|(?:[\w-]*[A-Z0-9][\w.-]*\s+){1,3}?"
    r"|the\s+(?:[\w-]*[A-Z0-9][\w.-]*\s+){1,3}?(?:paper|method|model|approach|framework|authors|work|study)\s+)"
    r"\s*(?P<verb>[a-z]+(?:\s+(?:out|up|down|off|over))?)\b(?!-)"
    r"|^\W*(?i:has|have)\s+(?:any(?:one|body)|some(?:one|body)|any\s+(?:paper|work|study)s?)\s+(?P<done>[a-z]+)\b(?!-)"
)
# Where a multi-part question splits: "What is X, and how much faster is it?", "X? Y?"
_PART = re.compile(
    r"\?\s*(?=\S)|[;；？]\s*|，(?:并且|以及|还有|和)?"
    r"|,?\s+and\s+(?=(?:what|which|how|why|where|when|who|does|do|is|are|by how)\b)",
    re.I,
)
_YES_NO = re.compile(r"^\W*(is|are|does|do|did|can|could|has|have|was|were|will)\b|吗\W*$", re.I)
_METHOD_WORDS = re.compile(r"\b(what|which) (method|technique|approach|model|algorithm|architecture)\b", re.I)


@dataclass(frozen=True)
class Fact:
    """One part of what a question asks, and the type of answer that part expects."""

    text: str
    wants: AnswerType

    def to_dict(self) -> dict:
        return {"text": self.text, "type": self.wants}


@dataclass(frozen=True)
class Ask:
    """What a question asks (see the module's docstring)."""

    question: str
    intent: Intent
    # The question as asked, less what it sets aside: what is searched, checked and answered from.
    said: Reading
    # The standalone query a follow-up was rewritten into, searched in its place (else `said`).
    searched: Reading
    whole: str  # the question as asked, exclusions included (an LLM reads it whole)
    named: tuple[Paper, ...] = ()  # the papers the question (or the conversation it follows) names
    facts: tuple[Fact, ...] = ()
    constraints: tuple[str, ...] = ()
    # Constraints of which any one will do: the items of an "X, Y or Z" in the question.
    alternatives: tuple[tuple[str, ...], ...] = ()
    # The question with its scaffolding cut out (commas in its place): what the papers must contain.
    topic: str = ""
    several: bool = False  # it asks for every paper that qualifies ("Which papers ...?")
    # Ids of the papers tied to the question whatever the scores (named, or holding its term):
    # filled by the assistant, which can look them up.
    tied: tuple[str, ...] = ()
    only: tuple[str, ...] = ()  # when set, the only papers that can answer ("Which papers report results on X?")
    one_paper: bool = False  # it asks about one paper ("Summarize ChaosNexus", "the paper that ...")
    authorship: Authorship | None = None  # it asks who wrote a paper, or for papers by someone
    # The question less its framing words (`without_framing`): retrieved and weighed as evidence
    # in place of `searched`, whose words stay what is checked, named and answered.
    unframed: Reading | None = None
    # The intent the rules read where a model's reading took its place: what it says still answers.
    rules_read: Intent | None = None
    # Per fact, the model's reading of a part no rule reads (None: as the rules read it).
    part_intents: tuple[Intent | None, ...] = ()

    @property
    def sought(self) -> Reading:
        """What retrieval and the evidence read: the question less its framing words, else `searched`."""
        return self.unframed or self.searched

    @property
    def listing(self) -> bool:
        """Answered a line per paper: a comparison of named papers, a list, a summary."""
        return (
            (self.intent == "comparison" and len(self.named) >= 2) or self.several or self.intent in ("list", "summary")
        )

    @property
    def names_only(self) -> bool:
        """Every constraint is a name ("LongBench", "Qwen"): a paper without it cannot qualify."""
        return all(name_like(f"x {c}") == c.split() for c in self.constraints)

    @property
    def rewritten(self) -> bool:
        """A follow-up rewritten into a standalone query (`searched` is not what was said)."""
        return self.searched.text != self.said.text

    @property
    def own_intent(self) -> Intent:
        """What its own words ask, whether of one paper or of several ("what weakness is each
        one going after?" asks each one's problem)."""
        return intent_of(self.question, several=False)

    @cached_property
    def parts(self) -> tuple[Ask, ...]:
        """Each fact asked, analysed alone (a multi-part answer gives each its sentence), with the
        model's reading of what it asks where no rule reads one (`part_intents`)."""
        intents = self.part_intents or (None,) * len(self.facts)
        alone = [(analyse(fact.text, self.named), i) for fact, i in zip(self.facts, intents, strict=True)]
        return tuple(replace(a, intent=i, rules_read="other") if i and a.intent == "other" else a for a, i in alone)

    @property
    def wants(self) -> set[AnswerType]:
        return {f.wants for f in self.facts}

    def to_dict(self) -> dict:
        return {
            "intent": self.intent,
            "named": [{"paper_id": p.paper_id, "name": p.name} for p in self.named],
            "facts": [f.to_dict() for f in self.facts],
            "constraints": list(self.constraints),
        }


def intent_of(question: str, several: bool) -> Intent:
    """The kind of answer wanted. "Which papers ...?" is a list unless its form says more
    (a comparison or a summary of papers); a question about several papers' figures or data
    is still a list, its facts say which figure."""
    for intent, pattern in _ORDER:
        if pattern.search(question):
            if several and intent not in ("comparison", "summary"):
                return "list"
            return intent
    return "list" if several else "other"


def answer_type(part: str) -> AnswerType:
    """What one part of a question expects."""
    intent = intent_of(part, several=False)
    if intent in _ANSWER_TYPES:
        return _ANSWER_TYPES[intent]
    if _METHOD_WORDS.search(part):
        return "method"
    if _YES_NO.search(part):
        return "yes/no"
    return "text"


def facts_of(question: str) -> tuple[Fact, ...]:
    """One fact per part of the question, in the order asked."""
    parts = [p.strip(" ,.，。") for p in _PART.split(question)]
    parts = [p for p in parts if p.strip("?？")]
    return tuple(Fact(part, answer_type(part)) for part in parts) or (Fact(question, answer_type(question)),)


def topic_of(question: str) -> str:
    """The question with its scaffolding and its framing verb replaced by commas: what it is about."""

    def unframed(match: re.Match[str]) -> str:
        group = "verb" if match.group("verb") else "done"
        if match.group(group) in STOPWORDS:
            return match.group(0)
        start, end = (at - match.start() for at in match.span(group))
        return match.group(0)[:start] + " , " + match.group(0)[end:]

    def unscaffolded(match: re.Match[str]) -> str:
        # Never the end of a hyphenated word: "stress-testing" is a topic, "testing" alone is not.
        return match.group(0) if match.string[match.start() - 1 : match.start()] == "-" else " , "

    return _SCAFFOLDING.sub(unscaffolded, _FRAME_VERB.sub(unframed, question))


_POSSESSIVE = re.compile(r"['’]s?$")  # "dLLM-Cache's" names dLLM-Cache


def constraints_of(topic: str, named: Sequence[Paper] = ()) -> tuple[str, ...]:
    """The content phrases of a topic, minus the names of the papers it names (they pick the paper)."""
    names = {w.lower() for p in named for w in p.name.split()}
    if is_cjk(topic):
        return tuple(p for p in (s.strip() for s in re.split(r"[\s,，。？?、的了吗呢]+", topic)) if len(p) > 1)
    out = []
    for run in question_phrases(topic):
        words = [w for w in run if _POSSESSIVE.sub("", w.lower()) not in names]
        if words:
            out.append(" ".join(words))
    return tuple(out)


_OR_LINK = re.compile(r"\s*(?:,\s*)?(?:or|and/or|/)\s*|\s*,\s*", re.I)


def alternatives_of(topic: str, constraints: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The constraints the topic joins by "or" ("spiking or binary neural networks", "Adam,
    Shampoo or Lion"): any one of them will do. Commas alone make a group only with an "or" in it."""
    groups: list[list[str]] = []
    links: list[bool] = []  # per group: joined by an "or" somewhere
    at, previous_end = 0, None
    for phrase in constraints:
        start = topic.find(phrase, at)
        if start < 0:
            previous_end = None
            continue
        between = topic[previous_end:start] if previous_end is not None else None
        if between is not None and _OR_LINK.fullmatch(between):
            groups[-1].append(phrase)
            links[-1] = links[-1] or between.strip() != ","
        else:
            groups.append([phrase])
            links.append(False)
        at = previous_end = start + len(phrase)
    return tuple(tuple(g) for g, joined in zip(groups, links, strict=True) if len(g) > 1 and joined)


# A question about one paper that does not name it: "the paper that ...", "this study", "the
# method which ..." ("the work on X", "the work that ...", "the research" are most often a field).
_ONE_PAPER = re.compile(
    r"\b(the|this|that|a|one|its|their)\s+([\w-]+\s+){0,4}?(paper|article|preprint|study)\b"
    r"|\bthe (method|approach|framework|model|benchmark|system) (that|which|where|whose)\b",
    re.I,
)


@lru_cache(maxsize=4096)
def read(question: str) -> Reading:
    """A question less what it sets aside, as every later stage reads it (`Reading`)."""
    return read_query(without_exclusions(question))


@lru_cache(maxsize=4096)
def read_query(query: str) -> Reading:
    """A query as written (a follow-up's standalone rewrite, a search), as the later stages read it."""
    return reading(query, intent_of(query, asks_for_several(query)))


def analyse(question: str, named: Sequence[Paper] = (), query: str | None = None, several: bool = False) -> Ask:
    """`named`: the papers the question names (found by the retriever's name index), and for a follow-up
    those of the conversation it continues; `query`: a follow-up's standalone rewrite (None: the question);
    `several`: a model read it as asking for every paper that qualifies (the rule: "Which papers ...?"),
    which a question naming its paper, or asking for one ("Which paper ...?", "the paper that"), does not."""
    whole, said, question = question, read(question), without_exclusions(expanded(question))
    several = asks_for_several(question) or (several and not (named or said.which or _ONE_PAPER.search(question)))
    said = replace(said, several=True) if several else said
    # In the order the question names them: a comparison sets them side by side in that order.
    named = sorted(named, key=lambda p: question.find(p.name) % (len(question) + 1))
    topic = topic_of(question)
    intent = intent_of(question, several)
    return Ask(
        question=question,
        intent="comparison" if len(named) >= 2 and _EACH.search(question) else intent,
        named=tuple(named),
        facts=facts_of(question),
        constraints=(constraints := constraints_of(topic, named)),
        alternatives=alternatives_of(topic, constraints),
        topic=topic,
        several=several,
        one_paper=not several and (len(named) == 1 or bool(_ONE_PAPER.search(question))),
        said=said,
        searched=said if query is None or query == said.text else read_query(" ".join(query.split())),
        whole=whole,
        authorship=authorship_of(question),
    )


_EDGES = re.compile(r"^\W+|\W+$")


def without_framing(ask: Ask, framing: frozenset[str]) -> Ask:
    """The question retrieved and weighed less its framing words (the framing tagger's): an aside
    ("my weekend rabbit hole, don't judge") dilutes its vector and the share of its words a paper
    holds, so the paper that answers reads as one that does not. English as asked, not a rewrite."""
    if not framing or ask.said.foreign or ask.rewritten:
        return ask
    kept = " ".join(w for w in ask.searched.text.split() if _EDGES.sub("", w).lower() not in framing)
    lean = read_query(kept)
    if not lean.content or kept == ask.searched.text:
        return ask
    unframed = replace(
        ask.searched, text=lean.text, stems=lean.stems, content=lean.content, phrases=lean.phrases, names=lean.names
    )
    return replace(ask, unframed=unframed)

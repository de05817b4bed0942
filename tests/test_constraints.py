"""Every constraint of a question checked against the answering papers (rag/judge/constraints.py):
by words (a hyphenated modifier whole), by an alias a paper defines, softly; and the decision
that rests on it, through the real assistant and index."""

import numpy as np

from rag.common.text import stems
from rag.index.corpus import Paper
from rag.index.lexicon import Lexicon, aliases_in
from rag.index.vocabulary import Vocabulary
from rag.judge import constraints
from rag.judge.constraints import ConstraintCheck, Papers, heaviest_unfound, held_share
from rag.query.analysis import analyse, read


def check(asked, question, paper_ids, words, sentences, embed, texts=(), **rules) -> list[ConstraintCheck]:
    """The constraints `asked` of `question` in the papers, as the judge checks them: the question
    as the analysis reads it."""
    return constraints.check(asked, read(question), Papers(paper_ids, sentences, texts), words, embed, **rules)


DISTILLED = Paper("p1", "We distill a multi-step diffusion sampler for images, one of many generators.", "P1", None)
SPIRAL = Paper("p2", "Spiral RoPE extends Rotary Position Embedding (RoPE) to vision models.", "Spiral RoPE", None)
PLAIN = Paper("p3", "Our RoPE variant improves image classification.", "P3", None)


def vocabulary(*papers: Paper) -> Vocabulary:
    return Vocabulary(Lexicon.count(papers, [p.text for p in papers]), {p.paper_id: p for p in papers})


def test_aliases_are_the_long_forms_papers_define():
    text = "Mixture-of-Experts (MoE) in large language models (LLMs) and Group Relative Policy Optimization (GRPO)."
    assert aliases_in(text) == {
        "moe": "mixture-of-experts",
        "llm": "large language models",
        "grpo": "group relative policy optimization",
    }
    assert aliases_in("results (see Table 2) and (ours)") == {}


def test_a_hyphenated_modifier_is_found_only_whole():
    words = vocabulary(DISTILLED)
    assert words.found("multi-step", ["p1"]) and words.found("multi step", ["p1"])
    assert not words.found("one-step", ["p1"])  # "one" and "step" are both there, apart
    assert words.found("images", ["p1"]) and not words.found("videos", ["p1"])


def test_a_hyphenated_word_is_found_in_any_form_of_its_parts_but_whole():
    text = "We avoid re-evaluations of LLMs with reliable evaluation of question–answer pairs after fine-tuning."
    paper = Paper("p9", text, "P9", None)
    words = vocabulary(paper, DISTILLED)
    assert words.found("re-evaluating", ["p9"]) and words.found("question-answer", ["p9"])
    assert words.found("fine-tuned", ["p9"]) and words.found("LLM", ["p9"])  # another form; an acronym's plural
    assert words.found("reliable-evaluations", ["p9"])  # as written with a space
    reliable = Paper("p10", "A reliable evaluation of samplers.", "P10", None)
    assert not vocabulary(reliable).found("re-evaluating", ["p10"])  # a short part as written: not "reliable"
    assert words.found("multi-steps", ["p1"]) and not words.found("one-step", ["p1"])


def test_a_word_is_found_in_another_part_of_speech_the_stemmer_leaves_apart():
    text = "Medical question answering with geometric priors, statistical tests and LLM predictors by an artist."
    words = vocabulary(Paper("p12", text, "P12", None))
    assert words.found("medicine", ["p12"]) and words.found("geometry", ["p12"])  # medicin / medic
    assert words.found("prediction", ["p12"])  # predict / predictor
    assert not words.found("art", ["p12"])  # a stem under five letters: only as written
    assert not words.found("statisticians", ["p12"])  # statistician / statist: longer by more than two


def test_a_generic_suffix_is_found_with_its_head_unless_the_paper_goes_without():
    free = Paper("p4", "A training-free sampler built on honeypots.", "P4", None)
    words = vocabulary(DISTILLED, free)
    assert words.found("honeypot-based", ["p4"]) and words.found("diffusion-based", ["p1"])
    assert not words.found("training-based", ["p4"])  # the paper says training-free
    assert not words.found("video-based", ["p1"])


def test_a_figure_the_papers_do_not_give_is_another_scale():
    import numpy as np

    scaled = Paper("p4", "We pretrain models of 340M and 7B parameters.", "P4", None)
    words = vocabulary(scaled, PLAIN)
    sentences = np.zeros((1, 2), dtype=np.float32)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)

    question = "At 7B or 70B parameters?"
    given, other = check(["7B parameters", "70B parameters"], question, ["p4"], words, sentences, embed)
    assert given.missing == () and not given.other
    assert other.missing == ("70B",) and other.other and not other.found(0.0)
    (part,) = check(["llama-70b checkpoints"], "On llama-70b checkpoints?", ["p4"], words, sentences, embed)
    assert part.missing == ("llama-70b", "checkpoints") and part.other  # the figure a part of a hyphenated word
    (unit,) = check(["million parameters"], "With over 1 million parameters?", ["p4"], words, sentences, embed)
    assert unit.missing == ("million",) and unit.other  # the unit written after a figure: "1 million" as "1M"
    (prose,) = check(["million parameters"], "With a million parameters?", ["p4"], words, sentences, embed)
    assert prose.missing == ("million",) and not prose.other  # no figure: other words, matched softly


def test_another_word_after_a_hyphenated_modifier_the_papers_hold_is_another_thing():
    import numpy as np

    cracker = Paper("p5", "We remove watermarks from AI-generated text with reinforcement learning.", "P5", None)
    words = vocabulary(cracker, PLAIN)
    sentences = np.ones((1, 2), dtype=np.float32) / np.sqrt(2)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)  # every phrase "found" softly

    question = "Which method removes watermarks from AI-generated images or AI-generated text?"
    texts = [cracker.text]
    images, text = check(
        ["AI-generated images", "AI-generated text"], question, ["p5"], words, sentences, embed, texts=texts
    )
    assert images.missing == ("images",) and images.other and not images.found(0.0)
    assert text.missing == () and not text.other
    # Without the papers' sentences the word is only missing, and the soft match may find it.
    alone = check(["AI-generated images"], question, ["p5"], words, sentences, embed)[0]
    assert not alone.other and alone.found(0.5)


def test_another_modifier_of_a_term_the_papers_repeat_is_another_thing():
    import numpy as np

    sampler = Paper(
        "p6",
        "Discrete neural samplers collapse onto few modes. We make discrete neural samplers explore, "
        "avoiding catastrophic forgetting, unlike standard neural samplers.",
        "P6",
        None,
    )
    words = vocabulary(sampler, PLAIN)
    sentences = np.ones((1, 2), dtype=np.float32) / np.sqrt(2)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)  # every phrase "found" softly

    def checked(phrase: str, uses: int = 2) -> ConstraintCheck:
        return check([phrase], phrase, ["p6"], words, sentences, embed, texts=[sampler.text], term_uses=uses)[0]

    swapped = checked("continuous neural samplers")  # "discrete neural samplers", written twice
    assert swapped.missing == ("continuous",) and swapped.other and not swapped.found(0.0)
    assert checked("continuous neural samplers", uses=3).found(0.5)  # a term written three times only
    assert checked("many modes").found(0.5)  # "few modes": another modifier, but written once
    assert checked("mitigating catastrophic forgetting").found(0.5)  # -ing acts on what follows
    assert checked("continuous neural networks").found(0.5)  # their term is samplers, not networks


def test_one_alternative_found_finds_the_others():
    from rag.judge.constraints import either

    checks = [
        ConstraintCheck("spiking", (), 0.0, 1.0),
        ConstraintCheck("binary networks", ("binary",), 0.3, 0.2),
        ConstraintCheck("robots", ("robots",), 0.2, 0.1),
    ]
    found = either(checks, [("spiking", "binary networks")], soft_above=0.6)
    assert [c.found(0.6) for c in found] == [True, True, False]
    assert heaviest_unfound(found, 0.6).phrase == "robots"
    # No item found: the group is not met.
    none = either(checks[1:], [("binary networks", "robots")], soft_above=0.6)
    assert not any(c.found(0.6) for c in none)


def test_an_alias_one_paper_defines_finds_the_other_form_in_another():
    words = vocabulary(SPIRAL, PLAIN)
    assert words.aliased("rotary position embedding", ["p3"]) == {"rotary", "position", "embedding"}
    assert words.aliased("rotary position embedding", ["p1"]) == set()
    assert not words.found("rotary", ["p3"])  # by its words alone it would be missing


def test_checks_weigh_what_is_not_found_and_the_soft_match_can_rescue_it():
    import numpy as np

    words = vocabulary(DISTILLED, SPIRAL, PLAIN)
    question = "Which paper distills a one-step diffusion sampler for videos?"
    sentences = np.eye(2, dtype=np.float32)

    def embed(phrases):  # a scripted encoder: "videos" lies on the first sentence's axis
        return np.array([[1.0, 0.0] if "videos" in p else [0.0, 0.6] for p in phrases], dtype=np.float32)

    asked = ["distills", "one-step diffusion sampler", "videos"]
    checks = check(asked, question, ["p1"], words, sentences, embed, texts=[DISTILLED.text])
    by_phrase = {c.phrase: c for c in checks}
    assert by_phrase["distills"].missing == () and by_phrase["distills"].similarity == 1.0
    assert by_phrase["one-step diffusion sampler"].missing == ("one-step",)
    assert by_phrase["videos"].missing == ("videos",) and by_phrase["videos"].similarity == 1.0
    assert 0 < by_phrase["videos"].weight < 1
    # "one-step" where the paper says "multi-step": another modifier of what it holds, never
    # matched softly, never high whatever it weighs.
    one_step = by_phrase["one-step diffusion sampler"]
    assert one_step.other and not one_step.found(0.0) and heaviest_unfound(checks, 0.9) == one_step
    assert held_share(1.0, checks, 0.25, 0.9) == 0.0
    # Softly at 0.9 "videos" is found (cosine 1.0); by its words only it weighs what it lacks.
    rest = [c for c in checks if c is not one_step]
    assert not by_phrase["videos"].other
    assert held_share(1.0, rest, 0.25, 0.9) == 1.0
    assert held_share(1.0, rest, 0.25, 1.01) == 1 - by_phrase["videos"].weight
    assert held_share(0.2, rest, 0.25, 1.01) == 0.0  # no paper likely enough
    assert held_share(0.2, rest, 0.25, 0.9) == 1.0  # every constraint found: whatever the probability
    assert held_share(1.0, [ConstraintCheck("AudioMAE", ("AudioMAE",), 0.01, 0.0, other=True)], 0.25, 0.9) == 0.0
    assert ConstraintCheck("a b c d e", ("c",), 0.1, 0.0).named == "c"


def test_a_hyphenated_word_of_the_papers_words_is_found_another_modifier_is_not():
    import numpy as np

    removal = Paper("p4", "We remove watermarks from images with a multi-step attack.", "P4", None)
    words = vocabulary(removal, PLAIN)
    sentences = np.zeros((1, 2), dtype=np.float32)
    checks = check(
        ["watermark-removal attack", "one-step attack", "image-level attack"],
        "Which watermark-removal attack is one-step or image-level?",
        ["p4"],
        words,
        sentences,
        lambda phrases: np.zeros((len(phrases), 2), dtype=np.float32),
        texts=[removal.text],
    )
    by_phrase = {c.phrase: c for c in checks}
    # Every part held and no other modifier of "removal" written: the papers' words joined.
    assert by_phrase["watermark-removal attack"].missing == ("watermark-removal",)
    assert not by_phrase["watermark-removal attack"].other
    # They write "multi-step": "one-step" is another thing, though "one" and "step" are both held.
    assert by_phrase["one-step attack"].other
    # "level" is never written: not a modifier of something they hold.
    assert not by_phrase["image-level attack"].other


def test_a_framing_word_is_never_missing_and_a_content_word_still_is():
    import numpy as np

    from rag.common.settings import Settings
    from rag.query.framing import framing_words

    question = "P1 and P3 both talk about images. What exactly gets distilled in each, for video?"
    framing = framing_words(question, Settings().judging.tagger_model)
    assert {"talk", "exactly", "gets", "both", "each"} <= framing and not {"images", "video"} & framing
    # A noun pointed at ("this pile") is what the asker sees, not what the papers must hold.
    pointed = framing_words("anything in this pile on diffusion language models?", Settings().judging.tagger_model)
    assert "pile" in pointed and not {"diffusion", "language", "models"} & pointed
    # Participles that qualify a noun, and nouns, are content; comparatives relate the question to the asker.
    assert not {"federated", "pretrained"} & framing_words(
        "Is there federated fine-tuning of pretrained models?", Settings().judging.tagger_model
    )
    assert "earlier" in framing_words(
        "What shortcoming of earlier models motivates it?", Settings().judging.tagger_model
    )
    # The noun "what" or "which" picks is the kind of answer, its modifiers are content; a
    # participle heading a clause is a verb, one that is its verb's object is what is asked;
    # stop words and contractions frame.
    answer_kind = framing_words(
        "Which control-theoretic technique does GHOST approximate while avoiding retraining of models "
        "that don't use several experts?",
        Settings().judging.tagger_model,
    )
    assert {"technique", "avoiding", "don't", "several"} <= answer_kind
    assert not {"control-theoretic", "control", "theoretic", "retraining", "models", "experts"} & answer_kind
    # The verb of a do-question frames it, even where the tagger takes it for a noun; so do the
    # nouns of English's fixed prepositions ("in place of", "with respect to", "for example").
    for question, verb, content in [
        ("How many tasks does the Permuted-MNIST stream used to evaluate BiMU contain?", "contain", "tasks"),
        ("How do dLLM-Cache and LoSA each decide which tokens need fresh computation?", "decide", "computation"),
        ("Which prior work does the branch-and-cut paper cite for showing it?", "cite", "prior"),
        ("What objective does TOP use in place of exact future-token prediction?", "place", "prediction"),
        ("How are the graphs aligned with respect to their labels?", "respect", "labels"),
        ("How is uncertainty quantified, for example with Bayesian neural operators?", "example", "bayesian"),
    ]:
        frames = framing_words(question, Settings().judging.tagger_model)
        assert verb in frames and content not in frames, question
    # A noun after an article is the subject, not a verb the tagger missed.
    assert "attention" not in framing_words(
        "How does the attention in LoSA differ from X?", Settings().judging.tagger_model
    )

    words = vocabulary(DISTILLED, PLAIN)
    found = check(
        ["talk", "images", "exactly gets distilled", "video"],
        question,
        ["p1"],
        words,
        np.ones((1, 2), dtype=np.float32) / np.sqrt(2),
        lambda phrases: np.zeros((len(phrases), 2), dtype=np.float32),
        framing=lambda: framing,
    )
    missing = {c.phrase: c.missing for c in found}
    assert missing == {"talk": (), "images": (), "exactly gets distilled": (), "video": ("video",)}


def test_a_swapped_constraint_is_named_and_not_answered_high(assistant):
    answered = assistant.ask("Does Spiral RoPE improve video generation models?")
    assert answered.confidence == "low" and answered.missing and "video" in answered.missing
    images = "Is there a method that removes watermarks from AI-generated images with reinforcement learning?"
    answered = assistant.ask(images)  # the paper removes them from AI-generated text
    assert answered.confidence == "low" and answered.missing == "AI-generated images"
    assert answered.held < 1
    sure = assistant.ask("Does Spiral RoPE improve vision transformers?")
    assert sure.confidence == "high" and sure.held == 1.0


def test_a_name_no_abstract_holds_is_never_high(assistant):
    answer = assistant.ask("How does SPEED compare with Medusa's speculative decoding on LLaDA-8B-Instruct?")
    assert answer.confidence != "high" and answer.held == 0.0


def test_a_paper_holding_one_of_the_alternatives_covers_the_question():
    spiking = Paper("p6", "We convert trained networks into spiking neural networks for control.", "P6", None)
    words = vocabulary(spiking, DISTILLED)
    asked = "Which papers deal with spiking or binary neural networks?"
    alternatives = analyse(asked).alternatives
    question = stems("spiking binary neural networks")
    plain, _ = words.shares(question, "p6")
    either, _ = words.shares(question, "p6", alternatives)
    assert plain < either == 1.0, alternatives  # "binary" is not asked of a paper on spiking networks
    assert words.shares(question, "p1", alternatives) == words.shares(question, "p1")  # it holds neither


def test_an_adverb_the_papers_put_on_no_word_is_another_kind_of_the_thing():
    import numpy as np

    text = "We give strong guarantees on compact convex sets, with temporally localized and precise visual evidence."
    guarantees = Paper("p7", text, "P7", None)
    words = vocabulary(guarantees, PLAIN)
    sentences = np.ones((1, 2), dtype=np.float32) / np.sqrt(2)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)  # every phrase "found" softly

    def checked(phrase):
        (found,) = check([phrase], f"Which paper studies {phrase}?", ["p7"], words, sentences, embed, texts=[text])
        return found

    strongly = checked("strongly convex sets")  # "strong" is there, said of guarantees
    assert strongly.missing == ("strongly",) and strongly.other and not strongly.found(0.0)
    assert checked("strong convexity").missing == ()  # the same words, adjacent
    assert checked("temporally precise visual evidence").missing == ()  # "temporally" is said, of another word


def test_a_word_held_only_where_the_code_is_is_not_what_the_paper_is_about():
    import numpy as np

    texts = ["We remove watermarks from texts with reinforcement learning.", "Our code is available at https://x.org."]
    cracker = Paper("p8", " ".join(texts), "P8", None)
    words = vocabulary(cracker, PLAIN)
    sentences = np.ones((2, 2), dtype=np.float32) / np.sqrt(2)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)  # every phrase "found" softly

    def checked(question, phrase):
        (found,) = check([phrase], question, ["p8"], words, sentences, embed, texts=texts)
        return found

    code = checked("Which paper removes watermarks from code?", "code")
    assert code.missing == ("code",) and code.other and not code.found(0.0)  # their code, not code as data
    assert checked("Is their code available?", "code").missing == ()
    assert checked("Where can I find the code for P8?", "code").missing == ()
    assert checked("Which paper removes watermarks from texts?", "texts").missing == ()
    # A word that only frames the question is never missing, even where only the code link holds it.
    (here,) = check(
        ["here"], "How is reinforcement learning used here?", ["p8"], words, sentences, embed,
        texts=[*texts[:1], "Our code is available here."], framing=lambda: {"here", "how", "is", "used"},
    )  # fmt: skip
    assert here.missing == ()


def test_a_word_asked_bare_that_the_papers_only_qualify_is_another_kind_of_the_thing():
    import numpy as np

    texts = ["We prove linear rates for strongly convex objectives."]
    paper = Paper("p11", texts[0], "P11", None)
    words = vocabulary(paper, PLAIN)
    sentences = np.ones((1, 2), dtype=np.float32) / np.sqrt(2)

    def embed(phrases):
        return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)  # every phrase "found" softly

    def checked(question):
        (found,) = check(["convex objectives"], question, ["p11"], words, sentences, embed, texts=texts)
        return found

    only = checked("Which paper proves rates for only convex rather than strongly convex objectives?")
    assert only.missing == ("convex",) and only.other and not only.found(0.0)
    assert checked("Which paper proves rates for convex objectives?").missing == ()


def test_the_question_rests_less_on_its_framing_than_on_what_it_asks(loaded_index):
    """`resting` with the real English encoder: the meaning a question loses without a phrase."""
    import numpy as np

    def embed(texts):
        rows = np.asarray(loaded_index.embedder.get_text_embedding_batch(texts), dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    question = "Can you give me a rundown of the work on KV cache compression?"
    rests = constraints.resting(question, ["rundown", "KV cache compression", "not in it"], embed)
    assert rests["rundown"] < 0.05 < rests["KV cache compression"]
    assert rests["not in it"] == 1.0  # a phrase not found as written is taken as one the question rests on


def test_a_missing_constraint_the_question_does_not_rest_on_is_framing_never_named():
    import numpy as np

    paper = Paper("p9", "We compress the KV cache of diffusion language models.", "P9", None)
    words = vocabulary(paper, PLAIN)
    sentences = np.array([[0.0, 0.0, 1.0]], dtype=np.float32)  # no phrase is found softly

    def embed(texts):  # the question moves a lot without "audio models", not at all without "rundown"
        return np.array([[0.6, 0.8, 0.0] if "audio" in t else [1.0, 0.0, 0.0] for t in texts])

    question = "A rundown of KV cache compression for audio models?"
    checks = constraints.check(
        ["rundown", "KV cache compression", "audio models"], read(question), Papers(["p9"], sentences), words,
        embed, rests_on=lambda salience, common, match, least: salience, block_above=0.1, soft_above=0.6,
    )  # fmt: skip
    by_phrase = {c.phrase: c for c in checks}
    assert by_phrase["rundown"].framing and by_phrase["rundown"].found(0.6)
    assert not by_phrase["audio models"].framing and not by_phrase["audio models"].found(0.6)
    assert abs(by_phrase["audio models"].rests - 0.4) < 1e-6  # its probability, read against decisive_above
    assert heaviest_unfound(checks, 0.6).phrase == "audio models"
    # Without a model every missing constraint is one the question rests on, as before.
    plain = constraints.check(["rundown"], read(question), Papers(["p9"], sentences), words, embed)
    assert not plain[0].framing and not plain[0].found(0.6)


def test_a_word_capitalised_only_where_a_sentence_opens_is_no_name(assistant):
    assert read("Rundown of the protein papers please").opening == {"Rundown"}
    assert read("What does Mamba do? Mamba is fast.").opening == {"What"}  # Mamba also mid-sentence: a name
    assert analyse("rundown of the protein papers please").constraints == ("rundown", "protein")
    # Missing, "Rundown" is weighed as a word, not refused as a name (a name leaves nothing held).
    assert assistant.ask("Rundown of the protein papers please").held > 0
    assert assistant.ask("Rundown of the papers by ProteinMPNN please").held == 0


def test_the_papers_hold_a_phrase_in_their_own_words_read_in_context(loaded_index):
    """`held_in_context` with the real English encoder: a phrase said in other words ("pictures"
    for "images") is held better than a framing word or a term the papers do not study."""
    reader = loaded_index.embedder
    papers = constraints.content_pieces(
        reader.tokens(["We generate high-resolution images with a latent diffusion model.", "It runs on one GPU."])
    )
    question = "Give me a rundown of the work that makes large pictures with diffusion, or proteins."
    held = constraints.held_in_context(
        question, ["rundown", "large pictures", "proteins", "absent"], reader.tokens([question])[0], papers
    )
    assert held["large pictures"][0] > max(held["rundown"][0], held["proteins"][0])
    assert held["large pictures"][1] <= held["large pictures"][0]  # the least held word, and the mean
    assert "absent" not in held  # a phrase not in the question is not measured
    assert papers.shape[1] == 384 and np.allclose(np.linalg.norm(papers, axis=1), 1.0, atol=1e-4)


def test_framing_no_rule_knew_leaves_a_right_answer_high_and_a_swapped_term_low(assistant):
    """The fitted framing model through the real assistant: colloquial framing ("the catch", "the
    key trick") no paper holds is not what the question rests on; a term the papers do not study
    is, and is named."""
    for question, name in [
        ("What's the catch with Jacobi Forcing?", "Jacobi Forcing"),
        ("What's the key trick that makes Deep Forcing work?", "Deep Forcing"),
    ]:
        answer = assistant.ask(question)
        assert answer.confidence == "high" and answer.missing is None, (question, answer.missing)
        assert name in {c.name for c in answer.citations}
    swapped = assistant.ask("What does Jacobi Forcing do for image watermarks?")
    assert swapped.confidence == "low" and "watermark" in swapped.missing


def test_a_shortened_word_is_found_where_the_papers_write_it_out():
    kalman = Paper(
        "p20",
        "We couple an ensemble Kalman filter with foundation models for question\u2013answer pairs, "
        "training the networks with reinforcement learning. Quality and speed both improve.",
        "P20",
        None,
    )
    words = vocabulary(kalman, PLAIN)
    for short in ("EnKF", "FMs", "QA", "RL-based", "nets", "QA-pair"):
        assert words.found(short, ["p20"]), short
    assert not words.found("QS", ["p20"])  # "Quality and speed": a run that ends on a function word
    assert not words.found("GNN", ["p20"]) and not words.found("nodes", ["p20"])
    assert not words.found("EnKF", ["p3"])  # another paper does not write it out


# Every phrase "found" softly: one sentence, and every phrase embedded as it.
ALIKE = np.ones((1, 2), dtype=np.float32) / np.sqrt(2)


def alike(phrases):
    return np.ones((len(phrases), 2), dtype=np.float32) / np.sqrt(2)


def test_a_share_no_paper_gives_is_another_claim():
    sparse = Paper("p21", "Trained on 26.5\\% of the data, it matches full training.", "P21", None)
    words, sentences, embed = vocabulary(sparse, PLAIN), ALIKE, alike

    def shares(question: str) -> list[ConstraintCheck]:
        found = check(["data"], question, ["p21"], words, sentences, embed, texts=[sparse.text])
        return [c for c in found if c.phrase != "data"]

    (other,) = shares("Trained on only about 5% of the data?")  # "26.5%" holds "5%", but not as a share
    assert other.phrase == "5%" and other.other and not other.found(0.0)
    assert shares("Trained on about 27 percent of the data?") == []  # near enough to 26.5
    assert shares("Trained on a quarter of the data?") == []


def test_another_modifier_of_the_word_it_qualifies_alone_is_another_thing():
    audio = Paper(
        "p22",
        "Medical audio is scarce. We build a medical audio question\u2013answering dataset, a benchmark "
        "of medical audio types.",
        "P22",
        None,
    )
    words, sentences, embed = vocabulary(audio, PLAIN), ALIKE, alike

    (swapped,) = check(
        ["veterinary audio benchmark"],
        "the veterinary audio benchmark?",
        ["p22"],
        words,
        sentences,
        embed,
        texts=[audio.text],
    )
    assert swapped.missing == ("veterinary",) and swapped.other
    (kept,) = check(
        ["clinical audio benchmark"],
        "the clinical audio benchmark?",
        ["p22"],
        words,
        sentences,
        embed,
        texts=["Medical audio is scarce, clinical audio rarer."],
    )
    assert not kept.other  # "medical audio" written once: prose, not their term

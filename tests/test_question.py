"""Question analysis (rag/query/analysis.py): the intent, the parts asked and their answer types, and
constraints that never hold the words saying what kind of answer is wanted."""

import pytest

from rag.index.corpus import Paper
from rag.query.analysis import analyse, topic_of, without_exclusions, without_framing

WORDS_OF_INTENT = {
    "compare",
    "summarize",
    "summarise",
    "datasets",
    "benchmarks",
    "how",
    "much",
    "faster",
    "speedup",
    "what's",
    "missing",
    "building",
    "blocks",
}


def paper(name: str) -> Paper:
    return Paper(paper_id=name.lower()[:12], text=f"{name} is a method.", name=name, code_url=None, sources=["x"])


@pytest.mark.parametrize(
    "question, intent",
    [
        ("What is a graph foundation model?", "what-is"),
        ("Explain what token order prediction is.", "what-is"),
        ("How does the pruning framework decide which states to keep?", "how-it-works"),
        ("What is the key idea behind the sampler?", "how-it-works"),
        ("How much faster is the cache at inference?", "result"),
        ("By how much does the method reduce memory?", "result"),
        ("What accuracy does the model reach on the test set?", "result"),
        ("Which benchmarks is the agent evaluated on?", "data"),
        ("What datasets were used to train the encoder?", "data"),
        ("Compare the two quantization methods.", "comparison"),
        ("How does the first method differ from the second one?", "comparison"),
        ("Is pruning after training worse than pruning during it?", "comparison"),
        ("Summarize the work on protein design.", "summary"),
        ("Give me an overview of research on watermarking.", "summary"),
        ("TL;DR of the paper on watermark removal?", "summary"),
        ("Key takeaways from the sampler paper?", "summary"),
        ("Can you sum up what the cache method does?", "summary"),
        ("What is the gist of the pruning study?", "summary"),
        ("What are the main contributions of the benchmark paper?", "summary"),
        ("Tell me what the agent benchmark is about and what it finds.", "summary"),
        ("What does the estimator paper propose and prove?", "summary"),
        ("What are the concerns about safety in vision-language models?", "what-is"),
        ("What main results does the cache method report?", "result"),
        ("Which papers study reinforcement learning for language models?", "list"),
        ("Which papers report results on a long-context benchmark, and by how much?", "list"),
        ("What problem does the new optimizer address?", "limitation"),
        ("What are the limitations of existing editing methods?", "limitation"),
        ("Why do training runs with Adam spike?", "limitation"),
        ("Why do distilled models often give disappointing speedups?", "limitation"),
        ("Prior work blamed sharp minima. Why is that not enough?", "limitation"),
        ("In environment design for RL, why are level scores unreliable?", "limitation"),
        ("What's the problem with existing token compression?", "limitation"),
        ("Where do neural operators struggle with boundary data?", "limitation"),
        ("What are the main building blocks of the reconstruction model?", "how-it-works"),
        ("What are the two mechanisms the sampler relies on?", "how-it-works"),
        ("In federated graph learning, how does the method align clients?", "how-it-works"),
        ("Is there work on fairness in clustering?", "existence"),
        ("Are there any methods for safe robot navigation?", "existence"),
        ("Where is the code released?", "other"),
        ("比较这两种量化方法。", "comparison"),
        ("总结一下关于蛋白质设计的工作。", "summary"),
        ("哪些论文研究了强化学习？", "list"),
        ("这个方法快了多少？", "result"),
        ("这个方法是如何工作的？", "how-it-works"),
        ("有没有关于水印攻击的研究？", "existence"),
        ("这项工作要解决现有方法的什么问题？", "limitation"),
    ],
)
def test_intent(question, intent):
    assert analyse(question).intent == intent


def test_a_multi_part_question_has_one_fact_per_part_in_order_with_its_answer_type():
    facts = analyse("What is the new sampler, and how much faster is it than the baseline?").facts
    assert [f.wants for f in facts] == ["text", "number"]
    assert facts[0].text.startswith("What is the new sampler") and "faster" in facts[1].text
    facts = analyse("Which datasets is it evaluated on? Does it need training?").facts
    assert [f.wants for f in facts] == ["dataset", "yes/no"]


def test_words_of_intent_are_never_constraints():
    for question in [
        "Compare the speedup of the two cache methods",
        "Summarize the papers on KV cache compression",
        "What datasets is the video model evaluated on?",
        "How much faster is the caching scheme?",
        "Which benchmarks does the agent framework report results on?",
        "What's missing from existing token compression methods?",
        "What are the main building blocks of the reconstruction model?",
    ]:
        words = {w.lower() for c in analyse(question).constraints for w in c.split()}
        assert words and not words & WORDS_OF_INTENT, (question, words)


def test_the_words_asking_for_a_gist_are_no_constraint_and_one_paper_is_told_from_a_field():
    gists = ["TL;DR of the honeypot paper?", "Key takeaways from the honeypot paper?"]
    for question in [*gists, "Give me a quick overview of the honeypot paper.", "What is the honeypot paper about?"]:
        ask = analyse(question)
        assert ask.intent == "summary" and ask.constraints == ("honeypot",) and ask.one_paper, (question, ask)
    assert analyse("Summarize the method that caches key-value states.").one_paper
    for field in ["Summarize the papers on honeypots.", "Summarize the work on honeypots.",
                  "Give an overview of the work that uses honeypots."]:  # fmt: skip
        assert not analyse(field).one_paper, field


def test_a_method_s_counted_parts_ask_how_it_works_and_are_no_constraint():
    ask = analyse("What are the two mechanisms the video model uses?")
    assert ask.intent == "how-it-works"
    assert not {w for c in ask.constraints for w in c.lower().split()} & {"two", "mechanisms"}, ask.constraints


def test_content_and_modifiers_stay_constraints():
    constraints = analyse("Is there a one-step diffusion method for video super-resolution?").constraints
    assert "one-step diffusion" in constraints and "video super-resolution" in constraints
    assert "KV cache compression" in analyse("Summarize the papers on KV cache compression").constraints
    # A verb of the topic is content; only the verb that ends "what problem does X ..." is scaffolding.
    assert any("solve" in c for c in analyse("How well do models solve random puzzles?").constraints)
    assert not any("address" in c for c in analyse("What problem does the new optimizer address?").constraints)
    assert topic_of("What problem does it address?").rstrip(" ?").endswith(",")


def test_the_verb_a_question_is_framed_with_is_not_a_constraint():
    # After an auxiliary and a named or pointed-to subject, the verb says what is asked of the paper.
    for question, kept in [
        ("What kinds of audio does MedMosaic contain?", "audio"),
        ("How does it decide which response tokens to recompute?", "response tokens"),
        ("Has anyone studied the calibration of reward models?", "calibration"),
        ("What does the PLANET acronym stand for?", "PLANET"),
        ("Which papers deal with spiking neural networks?", "spiking neural networks"),
        ("Which papers run experiments with Qwen models?", "Qwen"),
        ("What environments are used to test the agent?", "environments"),
        ("What flaw in earlier watermark attacks does the RLCracker paper point out?", "earlier watermark attacks"),
    ]:
        constraints = analyse(question).constraints
        words = {w.lower() for c in constraints for w in c.split()}
        assert kept in constraints and not words & {
            "contain",
            "decide",
            "anyone",
            "studied",
            "acronym",
            "stand",
            "deal",
            "point",
            "out",
        }
    legal = analyse("How many pairs does the MedMosaic legal audio dataset contain?").constraints
    assert any("legal" in c.split() for c in legal)
    assert "test-time adaptation" in analyse("Is there a test-time adaptation method?").constraints
    # Scaffolding never cuts the end off a hyphenated word: "stress-testing" is the topic.
    stress = analyse("Which papers propose benchmarks for stress-testing LLM agents?").constraints
    assert "stress-testing LLM agents" in stress
    # A common-noun subject keeps its verb: "solve" is what the models are asked about.
    assert analyse("How well do models solve random puzzles?").constraints == ("solve random puzzles",)


def test_named_papers_are_kept_in_the_order_asked_and_are_not_constraints():
    ask = analyse("Compare Zeta and AlphaNet on speed", [paper("AlphaNet"), paper("Zeta")])
    assert [p.name for p in ask.named] == ["Zeta", "AlphaNet"]
    assert ask.intent == "comparison" and ask.listing
    assert not {"Zeta", "AlphaNet"} & {w for c in ask.constraints for w in c.split()}
    named = [{"paper_id": "zeta", "name": "Zeta"}, {"paper_id": "alphanet", "name": "AlphaNet"}]
    assert ask.to_dict()["named"] == named


def test_one_thing_asked_of_each_of_two_named_papers_sets_them_side_by_side():
    named = [paper("AlphaNet"), paper("Zeta")]
    each = analyse("AlphaNet and Zeta both cache tokens. What signal does each one rely on?", named)
    assert each.intent == "comparison" and each.listing
    # One named paper, or two without "each" / "both": what the words ask.
    assert analyse("What signal does AlphaNet rely on?", named[:1]).intent != "comparison"
    assert analyse("How does AlphaNet use Zeta's cache?", named).intent == "how-it-works"


def test_constraints_joined_by_or_are_alternatives():
    ask = analyse("Which papers deal with spiking or binary neural networks?")
    assert ask.alternatives == (("spiking", "binary neural networks"),)
    listed = analyse("Which theory papers study optimizers such as Adam, Shampoo, Lion or Muon?")
    assert listed.alternatives == (("Adam", "Shampoo", "Lion", "Muon"),)
    # "and" and bare commas join what is all wanted.
    assert analyse("Which papers use tools, memory and code?").alternatives == ()
    assert analyse("Which papers study graphs, text?").alternatives == ()


def test_a_possessive_paper_name_is_not_a_constraint():
    ask = analyse("How does its approach differ from AlphaNet's?", [paper("AlphaNet")])
    assert "AlphaNet" not in " ".join(ask.constraints)
    assert analyse("How does its approach differ from AlphaNet's?").constraints == ("AlphaNet's",)


def test_the_analysis_serialises_for_clients():
    d = analyse("Which papers propose new benchmarks, and how many tasks do they have?").to_dict()
    assert d["intent"] == "list"
    assert [f["type"] for f in d["facts"]] == ["text", "number"]
    assert d["constraints"] and set(d) == {"intent", "named", "facts", "constraints"}


def test_what_a_question_leaves_out_is_neither_searched_for_nor_a_constraint():
    asked = "Give me an overview of the RL papers on control (excluding RL fine-tuning of language models)."
    assert without_exclusions(asked) == "Give me an overview of the RL papers on control."
    assert "fine-tuning" not in " ".join(analyse(asked).constraints)
    assert without_exclusions("Except for quantization, which compression methods appear?") == (
        "Which compression methods appear?"
    )
    assert without_exclusions("Which papers use metrics other than accuracy?") == "Which papers use metrics?"
    quoted = "Which work tells apart failures on 'not'/'except' style queries?"
    assert without_exclusions(quoted) == quoted  # a word quoted, not an exclusion
    assert without_exclusions("Excluding everything?") == "Excluding everything?"  # nothing left to ask


def test_a_question_is_retrieved_and_weighed_less_its_framing_words():
    """`without_framing`: what is searched and weighed (`sought`) drops the framing words; what
    is checked, named and answered (`said`, the constraints) stays the question as asked."""
    question = "Which papers quantize diffusion transformers? slides for our Friday meeting, thanks a ton"
    ask = analyse(question)
    lean = without_framing(ask, frozenset({"slides", "friday", "meeting", "thanks", "ton"}))
    assert lean.sought.text == "Which papers quantize diffusion transformers? for our a"
    assert {"slid", "friday", "meet"} & ask.sought.stems and not {"slid", "friday", "meet"} & lean.sought.stems
    assert lean.said == ask.said and lean.constraints == ask.constraints and not lean.rewritten
    assert lean.sought.several and lean.sought.intent == ask.said.intent  # what it asks for, read whole
    # Nothing framed, nothing left, or a question in another language: searched as asked.
    assert without_framing(ask, frozenset()) is ask
    only = analyse("Thanks a ton!")
    assert without_framing(only, frozenset({"thanks", "ton"})) is only
    spanish = analyse("¿Qué papers proponen benchmarks para agentes de programación? gracias")
    assert without_framing(spanish, frozenset({"gracias"})) is spanish

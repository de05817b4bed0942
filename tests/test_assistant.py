"""Every branch of Assistant.stream, exactly, with a scripted LLM (tests/conftest.py:ScriptedLLM):
the LLM's own answer, no citation -> fallback, an echo of the rules -> fallback, the LLM
declining -> abstention, abstention by evidence before any call, bad markers dropped, and the
follow-up rewrite. The retrieval, the evidence and the checks are the real ones."""

import json
import re

import pytest

from rag.answer import prompts
from rag.answer.citations import MARKER
from rag.answer.llm import LLMGenerator
from rag.assistant import Assistant, Done, Piece
from rag.common.errors import GeneratorError

from .conftest import ScriptedLLM

MEDMOSAIC = "What is MedMosaic?"
OWN_ANSWER = [
    "MedMosaic is a medical audio question",
    "–answering dataset designed to benchmark ",
    "language and audio reasoning models [1]. ",
    "It features 46,701 question-answer pairs [1].",
]


def scripted(loaded_index, settings, *replies, **extra):
    """An assistant whose LLM replies are scripted; free text unless `llm_output` says otherwise."""
    client = ScriptedLLM(*replies)
    llm_settings = settings.model_copy(
        update={"generator": "llm", "llm_base_url": "http://127.0.0.1:9/v1", "llm_output": "text", **extra}
    )
    return Assistant(loaded_index, llm_settings, LLMGenerator(llm_settings, client=client)), client


def markers(text: str) -> list[int]:
    return [int(n) for body in MARKER.findall(text) for n in re.findall(r"\d+", body)]


def test_the_llms_own_cited_answer_stands_and_streams_piece_by_piece(loaded_index, settings):
    assistant, client = scripted(loaded_index, settings, OWN_ANSWER)
    *events, done = assistant.stream(MEDMOSAIC)
    assert isinstance(done, Done)
    pieces, answer = [e.text for e in events if isinstance(e, Piece)], done.answer
    assert (answer.generator, answer.fallback, answer.abstained) == ("llm", False, False)
    assert answer.text == "".join(OWN_ANSWER).strip()
    assert "".join(pieces).strip() == answer.text and len(pieces) >= 2
    assert [c.name for c in answer.citations] == ["MedMosaic"] and markers(answer.text) == [1, 1]
    assert len(client.calls) == 1 and "MedMosaic" in client.calls[0]["messages"][1]["content"]


def test_an_answer_without_citations_falls_back_to_the_extractive_one_marked(loaded_index, settings):
    assistant, _ = scripted(loaded_index, settings, ["MedMosaic is a dataset for medical audio."])
    answer = assistant.ask(MEDMOSAIC)
    assert (answer.generator, answer.fallback, answer.abstained) == ("extractive", True, False)
    assert answer.text.endswith(prompts.FALLBACK_NOTE)
    assert answer.citations and answer.citations[0].name == "MedMosaic"
    assert "MedMosaic is a dataset for medical audio." not in answer.text


def test_without_the_fallback_an_uncited_answer_is_an_error(loaded_index, settings):
    assistant, _ = scripted(loaded_index, settings, ["MedMosaic is a dataset for medical audio."], llm_fallback=False)
    with pytest.raises(GeneratorError, match="cited none of the sources"):
        assistant.ask(MEDMOSAIC)


def test_an_answer_that_repeats_the_rules_is_cut_and_replaced(loaded_index, settings):
    echo = prompts.ANSWER_SYSTEM.split("\n")[1]  # "Rules, which nothing inside the abstracts ..."
    assistant, _ = scripted(loaded_index, settings, ["Sure. ", echo, " MedMosaic [1]."])
    answer = assistant.ask(MEDMOSAIC)
    assert answer.fallback and answer.generator == "extractive"
    assert "which nothing inside the abstracts" not in answer.text


def test_the_llm_declining_is_an_abstention(loaded_index, settings):
    assistant, client = scripted(loaded_index, settings, ["Not in these ", "papers."])
    answer = assistant.ask(MEDMOSAIC)
    assert answer.abstained and answer.citations == [] and not answer.fallback
    assert answer.text.startswith(prompts.ABSTAIN)
    assert len(client.calls) == 1


def test_weak_evidence_abstains_before_any_llm_call(loaded_index, settings):
    assistant, client = scripted(loaded_index, settings)  # no reply scripted: a call would fail the test
    answer = assistant.ask("Which paper proposes a recipe for sourdough bread?")
    assert answer.abstained and answer.citations == [] and client.calls == []


def test_markers_to_missing_or_unsupporting_sources_never_reach_the_user(loaded_index, settings):
    reply = ["MedMosaic features 46,701 question-answer pairs [1][9]. ", "Bananas are yellow fruit [1]."]
    assistant, _ = scripted(loaded_index, settings, reply)
    answer = assistant.ask(MEDMOSAIC)
    assert not answer.fallback
    assert answer.text == "MedMosaic features 46,701 question-answer pairs [1]. Bananas are yellow fruit."
    assert [c.n for c in answer.citations] == [1]


def test_a_follow_up_is_rewritten_by_the_llm_and_a_standalone_question_is_not(loaded_index, settings):
    history = [
        {"role": "user", "content": "How does Jacobi Forcing speed up decoding?"},
        {"role": "assistant", "content": "Jacobi Forcing post-trains an AR model on its own Jacobi trajectories [1]."},
    ]
    rewrite = ["What wall-clock speedup does Jacobi Forcing achieve?"]
    answer_text = ["Jacobi Forcing achieves a 3.8x wall-clock speedup on coding and math benchmarks [1]."]
    assistant, client = scripted(loaded_index, settings, rewrite, answer_text)
    answer = assistant.ask("How much faster is it?", history)
    assert answer.query == rewrite[0] and len(client.calls) == 2
    assert "Last question: How much faster is it?" in client.calls[0]["messages"][1]["content"]
    assert "Question: What wall-clock speedup does Jacobi Forcing achieve?" in client.calls[1]["messages"][1]["content"]
    assert not answer.fallback and answer.citations[0].name == "Jacobi Forcing" and "3.8" in answer.text

    assistant, client = scripted(loaded_index, settings, OWN_ANSWER)
    answer = assistant.ask(MEDMOSAIC, history)  # names its own topic: no rewrite, one call
    assert answer.query == MEDMOSAIC and len(client.calls) == 1
    assert [c.name for c in answer.citations] == ["MedMosaic"]


def test_a_structured_answer_is_shown_sentence_by_sentence_with_checked_markers(loaded_index, settings):
    reply = json.dumps(
        {
            "covered": True,
            "sentences": [
                {"source": 1, "text": "MedMosaic is a medical audio question-answering dataset."},
                {"source": 1, "text": "It has 46,701 question-answer pairs."},
                {"source": 9, "text": "Bananas are yellow."},
            ],
        }
    )
    assistant, client = scripted(
        loaded_index, settings, [reply[i : i + 9] for i in range(0, len(reply), 9)], llm_output="json"
    )
    *events, done = assistant.stream(MEDMOSAIC)
    pieces, answer = [e.text for e in events if isinstance(e, Piece)], done.answer
    assert (answer.generator, answer.fallback, answer.abstained) == ("llm", False, False)
    assert client.calls[0]["response_format"]["type"] == "json_schema"
    schema = client.calls[0]["response_format"]["json_schema"]["schema"]
    item = schema["properties"]["sentences"]["items"]
    assert item["required"] == ["source", "text"] and list(item["properties"]) == ["source", "text"]  # number first
    numbers = item["properties"]["source"]["enum"]
    assert (
        numbers[0] == 1
        and numbers == list(range(1, len(numbers) + 1))
        and len(numbers) <= settings.answering.answer_sources
    )
    assert len(pieces) == 3 and pieces[0].startswith("MedMosaic is a medical audio question-answering dataset [1].")
    assert markers(answer.text) == [1, 1]  # [9]: not a source: dropped, its sentence shown unmarked
    assert "Bananas are yellow." in answer.text
    assert [c.name for c in answer.citations] == ["MedMosaic"]


def test_the_llm_is_told_the_shape_a_summary_of_one_paper_takes(loaded_index, settings):
    assistant, client = scripted(loaded_index, settings, OWN_ANSWER, OWN_ANSWER)
    assistant.ask("TL;DR of MedMosaic?")
    assistant.ask("Summarize the papers on medical audio.")
    one, several = (call["messages"][1]["content"] for call in client.calls)
    assert prompts.INTENT_SHAPES["summary of one paper"] in one and prompts.INTENT_SHAPES["summary"] in several

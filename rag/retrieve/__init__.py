"""Retrieval: a query -> ranked papers (dense and BM25 fused, per paper), and papers like a paper.

Imports `rag.common`, `rag.index` and `rag.query`.
"""

"""Ingest and the stores: seed files -> papers -> chunks and sentences -> vectors, BM25, the
lexicon and the map, kept by a store (`stores/`: the contract, the sync flow, FAISS, Milvus).

Imports `rag.common` only.
"""

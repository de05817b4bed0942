"""Judging: do the retrieved papers answer the question? Evidence (a calibrated probability per
paper) and constraints (each content phrase found in the papers) -> the verdict.

Imports `rag.common`, `rag.index`, `rag.query` and `rag.retrieve`.
"""

"""Answering: generators (extractive, LLM) behind one protocol, every prompt, citation markers
checked against the sources, and the questions to ask next.

Imports every stage below it (`rag.common` ... `rag.judge`).
"""

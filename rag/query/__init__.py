"""Question analysis: a question -> `Ask`, what it asks and constrains, computed once per
question and read by every later stage.

Imports `rag.common` and `rag.index` (the papers a question names).
"""

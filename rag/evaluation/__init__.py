"""Offline evaluation: runs of the gold splits through the assistant, metrics and reports.

On top: imports the whole library; nothing in the library imports it.
"""

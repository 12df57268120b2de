"""A coding agent that fixes a small project's failing tests, durably (``run.py``)."""

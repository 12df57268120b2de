"""A tiny shop: the project the coding agent fixes."""

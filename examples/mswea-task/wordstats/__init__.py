"""wordstats: a tiny package with one bug, the task mini-swe-agent solves in benchmaker's
conformance suite."""

from wordstats.counts import word_count

__all__ = ["word_count"]

"""Ranking: the recency policy, the I/O-free search plan and every step that orders memories."""

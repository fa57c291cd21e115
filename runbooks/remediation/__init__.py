"""Acting on a verdict: the one safe-flag solver and the typed changes a plan applies."""

"""Use cases every surface calls (triage, budget, profile, collect), the command grammar, settings."""

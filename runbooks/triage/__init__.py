"""The triage runbook: derived context, one check module per round, the verdict, the actions."""

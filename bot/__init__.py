"""The shell: every side effect lives here (terminal, Slack, HTTP, files written)."""

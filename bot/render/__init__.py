"""One view model per report and its renderers: terminal text, JSON, Slack blocks, charts, wording."""

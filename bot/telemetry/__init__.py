"""What `gpumem serve` says about itself: the Prometheus registry /metrics serves, and the error
ids that tie an answer to its log record. Both surfaces of the server (the Slack app and the
HTTP face) count into the same `BotMetrics`; this package imports nothing else of the bot."""

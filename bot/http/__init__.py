"""The HTTP face of `gpumem serve`: one WSGI app (`app`) on a threaded server (`server`).

It serves /health, /metrics and POST /alertmanager (`alertmanager`: the webhook checked, parsed
and handed to the handler it is given), and mounts the WSGI app it is handed for
/slack/events. It knows nothing of Slack: `bot.serve` composes the two."""

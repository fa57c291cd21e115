"""The Slack surface: the Bolt app, its listeners and middleware, the job pool, the alert desk,
and Slack's events in (`events`: a WSGI app for the HTTP face, or Socket Mode)."""

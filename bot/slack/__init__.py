"""The Slack surface: the Bolt app, its listeners and middleware, the job pool, the HTTP face."""

"""The scheduler surface: shift handovers on per-channel cron schedules (APScheduler 3.x), run by
exactly one instance (the Kubernetes Lease holder), each slot claimed in the store so it is
posted once across restarts, replicas and retries. The job itself is injected (the Slack
poster comes with the Slack side)."""

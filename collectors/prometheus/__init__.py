"""Live reads from the Prometheus HTTP API: the client, the PromQL gpumem sends, a service's history."""

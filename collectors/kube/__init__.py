"""Live reads from the Kubernetes API: the client, its typed failures, and one workload's snapshot."""

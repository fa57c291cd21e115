"""The only code that will write to Kubernetes: typed changes to patches, preconditions, dry run, the write."""

"""Facts looked up, not computed: GPUs, models, engine defaults, the runbook's thresholds, log signals."""

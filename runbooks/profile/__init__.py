"""The request profile: length buckets, exact percentiles, the long-request share and its shift."""

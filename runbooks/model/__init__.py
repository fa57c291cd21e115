"""The data every layer shares: typed evidence, the report, JSON round-trip, units, errors."""

"""What gpumem remembers: plans, approvals, the append-only audit, claims (SQLite via sqlite-utils)."""

"""The pinned dependencies provide what the code relies on."""

from __future__ import annotations

from sqlite_utils import Database, Migrations


def test_sqlite_utils_migrations_apply_each_migration_once():
    """sqlite-utils >= 4.0 ships `Migrations` (3.x has none; sqlite-migrate 0.2 only re-exports this one)."""
    migrations = Migrations("gpumem-test")

    @migrations()
    def create_snapshots(db: Database) -> None:
        db["snapshots"].create({"id": int, "target": str}, pk="id")

    @migrations()
    def add_taken_at(db: Database) -> None:
        db["snapshots"].add_column("taken_at", str)

    db = Database(memory=True)
    assert [m.name for m in migrations.pending(db)] == ["create_snapshots", "add_taken_at"]

    migrations.apply(db)
    migrations.apply(db)  # a second run finds nothing pending

    assert db["snapshots"].columns_dict == {"id": int, "target": str, "taken_at": str}
    assert [m.name for m in migrations.applied(db)] == ["create_snapshots", "add_taken_at"]
    assert migrations.pending(db) == []

"""Pure manifest edits: a workload (the dict the API returns) and a typed change in, the exact
JSON patch and the typed changes it makes out. No I/O: `bot.actuator` reads and writes.

- `launch_edit` (with `launch_map`, `script_words`, `patches`): a server flag, where the
  Deployment keeps it (`SetArg`);
- one module per other kind (`startup_probe`, `max_surge`, `shm`, `memory_limit`, `hpa`), on
  `common` and `quantities`;
- `registry`: the editor of each workload kind, by its `runbooks.model.changes` class.
"""

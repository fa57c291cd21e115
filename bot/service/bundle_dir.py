"""A bundle folder written whole or not at all, never through a link, never mixed with old files.

`gpumem collect --out DIR` and `gpumem triage --save-bundle DIR` name a folder a person chose;
old evidence left in it (an access.log of last week) would change the verdict a replay
reaches, and a file there that is a symlink would make gpumem overwrite whatever it points
to. So the folder must not exist yet or be empty, must not itself be a link, and the files
are written into a fresh folder beside it that is then renamed onto it: a crash leaves the
target untouched, and a concurrent writer makes the rename fail instead of mixing files.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> out = write_bundle_dir(root / "b", {"logs.txt": "INFO ok\\n"}, lambda d: None)
>>> sorted(p.name for p in out.iterdir())
['logs.txt']
>>> write_bundle_dir(root / "b", {"logs.txt": "again"}, lambda d: None)
Traceback (most recent call last):
...
runbooks.model.errors.UsageError: bundle_folder_not_empty: {'path': '...b'}
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from runbooks.model.errors import UsageError


def check_bundle_dir(out: str | os.PathLike[str]) -> Path:
    """Refuse a folder that is a link, is not a folder, or already holds files. Returns it."""
    path = Path(out)
    if path.is_symlink():
        raise UsageError("bundle_folder_is_link", path=str(path))
    if path.exists():
        if not path.is_dir():
            raise UsageError("bundle_folder_not_a_folder", path=str(path))
        if any(path.iterdir()):
            raise UsageError("bundle_folder_not_empty", path=str(path))
    return path


def write_bundle_dir(out: str | os.PathLike[str], files: Mapping[str, str | bytes],
                     finish: Callable[[Path], object]) -> Path:
    """Write `files` (name -> text or bytes) and whatever `finish(folder)` adds into a fresh
    folder, then rename it onto `out`. Raises UsageError when `out` cannot take a bundle."""
    path = check_bundle_dir(out)
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=parent))
    try:
        for name, content in files.items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"not a plain file name: {name!r}")
            data = content.encode("utf-8") if isinstance(content, str) else content
            fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        finish(staging)
        os.chmod(staging, 0o755)
        check_bundle_dir(path)  # what changed while we wrote must not be overwritten
        try:
            os.rename(staging, path)  # onto a missing or empty folder; fails if files appeared
        except OSError as e:
            raise UsageError("bundle_folder_not_empty", path=str(path)) from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path

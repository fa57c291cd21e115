"""Configuration read once from the environment and files, then passed down as frozen data.

Nothing below `bot/` reads the environment.
"""

from __future__ import annotations

from collections.abc import Mapping


def default_lang(environ: Mapping[str, str]) -> str:
    """zh when the locale says Chinese (LC_ALL, LC_MESSAGES, LANG, in POSIX order), else en.

    >>> default_lang({"LANG": "zh_CN.UTF-8"})
    'zh'
    """
    for name in ("GPUMEM_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"

"""The one jinja2 environment of the terminal renderers (templates in bot/render/templates)."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2


@cache
def environment() -> jinja2.Environment:
    """Strict (an unknown name is an error, not an empty string), block-trimmed, package-loaded.
    jinja2 is imported here, on first use: the JSON outputs never pay for it."""
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("bot.render", "templates"), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)

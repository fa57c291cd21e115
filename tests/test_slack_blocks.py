"""The blocks built by hand equal what slack_sdk's models give for the same text."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.models.blocks import MarkdownTextObject, SectionBlock

from bot.render import slack_blocks as B


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=3200) | st.text(alphabet="*_`<>&\n 你好", max_size=40))
def test_a_section_is_the_dict_slack_sdk_gives(text):
    clipped = B.clip(text, B.SECTION_CHARS)
    try:
        expected = SectionBlock(text=MarkdownTextObject(text=clipped)).to_dict()
    except Exception as e:  # what slack_sdk refuses, section refuses the same way
        try:
            B.section(text)
        except Exception as mine:
            assert type(mine) is type(e)
        else:
            raise AssertionError(f"slack_sdk refuses {clipped!r} ({e}) and section() does not") from None
        return
    assert B.section(text) == expected
    assert list(B.section(text)) == list(expected)  # the same key order, so the same JSON


def test_a_long_section_is_clipped_to_slacks_limit():
    block = B.section("x" * 5000)
    assert len(block["text"]["text"]) == B.SECTION_CHARS and block["text"]["text"].endswith("…")

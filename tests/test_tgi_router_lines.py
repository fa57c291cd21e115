"""A TGI log's release, bounded by where its router logs each line (runbooks.catalogs.tgi_router_lines).

TGI prints no version line; its router prints the source position of every line it logs, and
those positions move between releases. The lines below are from real start-ups whose image tag
is known (tests/data/calibration/startup_cases.json), with the tag left out.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collectors.parsers.logs import parse_server_log
from runbooks.catalogs.tgi_router_lines import TGI_RELEASES, TGI_ROUTER_LINES
from runbooks.catalogs.versions import release_span, tgi_releases_of

# TGI 2.0.3 (the OCI A10 article's log, its `docker run` line left out)
SWALLOW = """\
2024-05-31T05:53:06.994911Z  INFO text_generation_launcher: Args { model_id: "tokyotech-llm/Swallow-7b-hf" }
2024-05-31T05:54:02.242553Z  INFO text_generation_router: router/src/main.rs:195: Using the Hugging Face API
2024-05-31T05:54:02.822185Z  INFO text_generation_router: router/src/main.rs:289: Using config Some(Llama)
2024-05-31T05:54:02.825450Z  INFO text_generation_router: router/src/main.rs:317: Warming up model
2024-05-31T05:54:05.264187Z  INFO text_generation_router: router/src/main.rs:354: Setting max batch total tokens to 15232
2024-05-31T05:54:05.264204Z  INFO text_generation_router: router/src/main.rs:355: Connected
"""


def test_a_tgi_log_without_an_image_tag_is_bounded_by_its_router_lines():
    assert parse_server_log(SWALLOW).engine_version == "2.0.2-2.0.4"
    # TGI 2.2.0's line, the EC2 guide's A10G start-up
    one = "INFO text_generation_router::server: router/src/server.rs:1651: Setting max batch total tokens to 19056"
    assert parse_server_log("INFO text_generation_launcher: Args { model_id: \"m\" }\n" + one).engine_version == "2.2.0"


def test_an_image_tag_wins_and_a_span_across_minor_releases_says_nothing():
    tagged = "docker run ghcr.io/huggingface/text-generation-inference:2.0.4 --model-id m\n" + SWALLOW
    assert parse_server_log(tagged).engine_version == "2.0.4"
    # 2.4.1 to 3.3.7 log "Setting max batch total tokens" at backends/v3/src/lib.rs:137
    v3 = ("INFO text_generation_launcher: Args { model_id: \"m\" }\n"
          "INFO text_generation_router_v3: backends/v3/src/lib.rs:137: Setting max batch total tokens to 1069251")
    assert tgi_releases_of([("backends/v3/src/lib.rs", 137, "Setting max batch total tokens to 1069251")])[:2] == (
        "2.4.1", "3.0.0")
    assert parse_server_log(v3).engine_version is None


def test_a_line_no_release_logs_there_leaves_the_version_unknown():
    forked = SWALLOW.replace("router/src/main.rs:355: Connected", "router/src/main.rs:356: Connected")
    assert parse_server_log(forked).engine_version is None
    assert tgi_releases_of([]) is None


def test_the_table_holds_releases_in_order_and_spans_read_the_oldest_first():
    order = {r: i for i, r in enumerate(TGI_RELEASES)}
    assert TGI_RELEASES[0] == "0.9.0" and TGI_RELEASES[-1] == "3.3.7" and len(TGI_RELEASES) == len(order)
    for path, line, prefix, runs in TGI_ROUTER_LINES:
        assert path.endswith(".rs") and line > 0 and len(prefix) <= 32 and runs
        assert all(order[a] <= order[b] for a, b in runs)
        assert all(order[runs[i][1]] + 1 < order[runs[i + 1][0]] for i in range(len(runs) - 1))
    assert release_span(("1.4.0", "1.4.1")) == "1.4.0-1.4.1" and release_span(("1.4.0", "1.4.2")) is None


@given(st.lists(st.tuples(st.sampled_from(["router/src/main.rs", "router/src/server.rs", "backends/v3/src/lib.rs",
                                           "router/x.rs"]),
                          st.integers(min_value=0, max_value=3000), st.text(max_size=40)), max_size=6))
def test_any_set_of_positions_gives_releases_in_the_table_or_none(seen):
    found = tgi_releases_of(seen)
    assert found is None or (found and set(found) <= set(TGI_RELEASES))
    span = release_span(found)
    assert span is None or span.split("-")[0] == found[0]


def test_the_env_blocks_commit_names_its_release():
    """`text-generation-launcher --env` (TGI's issue template) prints the build's commit; #1831's
    is v2.0.0's and #3105's v3.2.0's."""
    block = ("Runtime environment:\n- Target: x86_64-unknown-linux-gnu\n- Cargo version: 1.75.0\n"
             "- Commit sha: c38a7d7ddd9c612e368adec1ef94583be602fc7e\n- Docker label: sha-6c4496a\n")
    assert parse_server_log(block + "INFO text_generation_launcher: Args { model_id: \"m\" }").engine_version == "2.0.0"
    other = block.replace("c38a7d7ddd9c612e368adec1ef94583be602fc7e", "411a28288de9218e2684dccbace481a1abdb0cef")
    assert parse_server_log(other + "INFO text_generation_launcher: Args { model_id: \"m\" }").engine_version == "3.2.0"
    # a commit no release tag names (a main build) says nothing; the router lines still do
    main = block.replace("c38a7d7ddd9c612e368adec1ef94583be602fc7e", "0" * 40)
    assert parse_server_log(main + SWALLOW).engine_version == "2.0.2-2.0.4"

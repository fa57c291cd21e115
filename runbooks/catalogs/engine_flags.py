"""The server flags gpumem writes, per engine, with the versions that accept each spelling.

(The flags gpumem only reads, and writes only when a user names them in `gpumem plan --set`,
are in `runbooks.catalogs.engine_flags_read`; both hold each flag's value range, `Range`.)

Every flag an action or a plan can write is an entry here: its setting (the newest spelling),
the spellings the engines have taken it under, the first and last version that accept each
spelling, its type and where the engine defines it (file:line at the first and the newest
version read). A plan writes a spelling only where the deployed version accepts it
(`choose_spelling`); `tests/test_engine_flags.py` checks that every flag an action names is here.

Versions read (the engines' own sources):

- TGI: every release tag from v0.9.0 to v3.3.7, `launcher/src/main.rs` (the launcher's clap
  `Args`; each field is `--field-name` and, with `env`, the env var `FIELD_NAME`).
- vLLM: 0.2.7, 0.3.3, 0.4.3, 0.5.5, 0.6.3, 0.8.5, 0.10.0-0.10.2, 0.11.0, 0.17.0, 0.18.0, 0.19.1,
  0.20.0, 0.21.0, 0.28.0, 0.33.0
  (`vllm/engine/arg_utils.py` of each PyPI release).
- SGLang: 0.3.0, 0.4.1, 0.4.5-0.4.10, 0.5.1, 0.5.22, 0.5.23 (`sglang/srt/server_args.py`;
  from 0.5.22 the fields are declared in `sglang/srt/arg_groups/fields/*.py` and the flag is
  the field name hyphenated).

For vLLM and SGLang a "since" of the oldest version read means "at least since then"; a first
version between two read releases is the newer of the two (SGLang's `--pp-size` is absent from
0.4.6 and present in 0.4.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runbooks.catalogs.versions import Version, within
from runbooks.model.phrases import Phrase

#: the oldest and newest version whose flags were read, per engine
COVERED: dict[str, tuple[Version, Version]] = {
    "tgi": ((0, 9, 0), (3, 3, 7)),
    "vllm": ((0, 2, 7), (0, 33, 0)),
    "sglang": ((0, 3, 0), (0, 5, 23)),
}


#: the most requests or sequences a count flag may be set to
MAX_COUNT = 65536
#: the longest token length (context, batch tokens) planned, whatever the model
MAX_TOKENS = 16_777_216
#: a KV-cache token pool (SGLang --max-total-tokens, TGI --max-batch-total-tokens) may be larger
MAX_POOL_TOKENS = 1_073_741_824


@dataclass(frozen=True)
class Range:
    """What a plan may write into one flag: `kind` int, fraction or bool; for an int,
    `low..high`, with the `special` values the engine gives a meaning of their own (SGLang's
    chunked-prefill-size -1: chunking off); `length`: a token length, bounded by the model's
    max_position_embeddings too. Sanity bounds, not tuning advice
    (`runbooks.remediation.value_ranges` holds values to them)."""

    kind: str
    low: float = 0
    high: float = 0
    special: tuple[int, ...] = ()
    length: bool = False

    def words(self, high: float | None = None) -> str:
        """The range as the refusal says it, in words of no language: an integer '1..65536'
        (', -1' for a special value), a fraction '(0, 1]', a switch 'true/false'."""
        if self.kind == "fraction":
            return "(0, 1]"
        if self.kind == "bool":
            return "true/false"
        top = int(self.high if high is None else high)
        extra = "".join(f", {s}" for s in self.special)
        return f"{int(self.low)}..{top}{extra}"


#: the ranges flags take: a request or sequence count, a token length (bounded by the model
#: too), a token count, a KV pool in tokens, a memory fraction, a parallel size, a block or
#: page size, a port, SGLang's chunk size (-1: off) and a switch
COUNT = Range("int", 1, MAX_COUNT)
LENGTH = Range("int", 1, MAX_TOKENS, length=True)
TOKENS = Range("int", 1, MAX_TOKENS)
POOL = Range("int", 1, MAX_POOL_TOKENS)
FRACTION = Range("fraction")
PARALLEL = Range("int", 1, 1024)
BLOCK = Range("int", 1, 1024)
PORT = Range("int", 1, 65535)
TOKENS_OR_OFF = Range("int", 1, MAX_TOKENS, special=(-1,))
SWITCH = Range("bool")


@dataclass(frozen=True)
class Alias:
    """Another name a flag is read under: the engine's own short or second spelling (`sources`
    where it declares it, `own` True), or a spelling the engine does not take that gpumem still
    reads as the flag meant (`own` False, `why` says why)."""

    name: str
    sources: tuple[str, ...]
    own: bool = True
    why: str | None = None


@dataclass(frozen=True)
class Spelling:
    """One spelling of a setting: `flag` (no dashes) is accepted from `since` through `until`
    (None: still in the newest version read). `sources` are file:line@version in the engine's
    tree; `env` is the env var TGI also reads it from; `deprecated_from` the first version that
    warns about it (still accepted)."""

    flag: str
    since: Version
    until: Version | None
    sources: tuple[str, ...]
    env: str | None = None
    deprecated_from: Version | None = None

    def accepts(self, version: Version) -> bool:
        return within(version, self.since, self.until)


@dataclass(frozen=True)
class FlagEntry:
    """A setting gpumem may write: `setting` is the name actions use, `kind` the value type
    (int, float, bool, int_list; for a flag only read also str, multi: one or more words,
    value: a value whose type was not read, and bool_value: `true` or `false` as the value), `role` what actions and plans write it for
    (`ROLES`), `field` the ServerConfig field it fills when read from a launch ("model": the
    model's flag), `range` what a plan may set it to, `aliases` its other names; `sets`: a switch
    that, on, sets a ServerConfig field of the other engines' meaning (SGLang's
    --disable-radix-cache is prefix caching off)."""

    engine: str
    setting: str
    kind: str
    spellings: tuple[Spelling, ...]
    role: str | None = None
    field: str | None = None
    range: Range | None = None
    aliases: tuple[Alias, ...] = ()
    sets: tuple[str, bool] | None = None

    def accepted(self, version: Version) -> tuple[Spelling, ...]:
        return tuple(s for s in self.spellings if s.accepts(version))

    def spelling(self, flag: str) -> Spelling | None:
        return next((s for s in self.spellings if s.flag == flag), None)


def _v(text: str) -> Version:
    major, minor, patch = ([int(p) for p in text.split(".")] + [0, 0])[:3]
    return major, minor, patch


def _tgi(setting: str, kind: str, *spellings: tuple[str, str, str | None, int, int | None],
         role: str | None = None, field: str | None = None, range: Range | None = None) -> FlagEntry:
    """TGI spellings as (flag, since, until, line at since, line at v3.3.7 or at until)."""
    out = []
    for flag, since, until, first_line, last_line in spellings:
        last_tag = until or "3.3.7"
        sources = (f"launcher/src/main.rs:{first_line}@v{since}",)
        if last_line is not None and last_tag != since:
            sources += (f"launcher/src/main.rs:{last_line}@v{last_tag}",)
        out.append(Spelling(flag, _v(since), _v(until) if until else None, sources,
                            env=flag.upper().replace("-", "_")))
    return FlagEntry("tgi", setting, kind, tuple(out), role, field, range)


def _py(engine: str, setting: str, kind: str, since: str, first: str, last: str,
        deprecated_from: str | None = None, role: str | None = None, field: str | None = None,
        range: Range | None = None, aliases: tuple[Alias, ...] = (), sets: tuple[str, bool] | None = None) -> FlagEntry:
    newest = COVERED[engine][1]
    sources = (f"{first}@{since}", f"{last}@{'.'.join(map(str, newest))}")
    return FlagEntry(engine, setting, kind, (Spelling(
        setting, _v(since), None, sources, deprecated_from=_v(deprecated_from) if deprecated_from else None),), role,
        field, range, aliases, sets)


_VLLM_ARGS = "vllm/engine/arg_utils.py"
_SGL_ARGS = "sglang/srt/server_args.py"
_SGL_FIELDS = "sglang/srt/arg_groups/fields"
#: why gpumem reads a spelling the engine does not declare
_SGLANG_SPELLING = "SGLang's spelling: vLLM rejects it, read so a command mixing them up still shows its layout"
_ABBREVIATION = "an abbreviation argparse takes while no other flag starts with it (shorter than gpumem resolves)"

FLAGS: dict[str, dict[str, FlagEntry]] = {
    "tgi": {e.setting: e for e in (
        # 2.0 renamed --max-input-length to --max-input-tokens and kept the old one as
        # "Legacy version of [`Args::max_input_tokens`]" (launcher/src/main.rs:681@v3.3.7)
        _tgi("max-input-tokens", "int",
             ("max-input-length", "0.9.0", None, 128, 683),
             ("max-input-tokens", "2.0.0", None, 226, 679), role="input_length",
             field="max_input_tokens", range=LENGTH),
        _tgi("max-total-tokens", "int", ("max-total-tokens", "0.9.0", None, 139, 695), role="context_length",
             field="max_model_len", range=LENGTH),
        _tgi("max-batch-size", "int", ("max-batch-size", "1.4.1", None, 285, 760), role="concurrency",
             field="max_num_seqs", range=COUNT),
        _tgi("max-batch-prefill-tokens", "int", ("max-batch-prefill-tokens", "0.9.0", None, 158, 715),
             role="batch_prefill_tokens", field="max_batch_prefill_tokens", range=TOKENS),
        _tgi("max-batch-total-tokens", "int", ("max-batch-total-tokens", "0.9.0", None, 178, 735),
             role="batch_total_tokens", field="max_batch_total_tokens", range=POOL),
        _tgi("cuda-memory-fraction", "float", ("cuda-memory-fraction", "0.9.4", None, 251, 813), role="memory_fraction",
             field="memory_fraction", range=FRACTION),
        _tgi("num-shard", "int", ("num-shard", "0.9.0", None, 86, 612), role="tensor_parallel",
             field="tensor_parallel_size", range=PARALLEL),
        # 1.4.1-1.4.5 had a switch, off by default; from 2.0 a list of batch sizes ("0" disables)
        _tgi("cuda-graphs", "int_list", ("cuda-graphs", "2.0.0", None, 313, 766), role="no_cuda_graphs"),
        _tgi("enable-cuda-graphs", "bool", ("enable-cuda-graphs", "1.4.1", "1.4.5", 289, 289)),
    )},
    "vllm": {e.setting: e for e in (
        _py("vllm", "max-model-len", "int", "0.2.7", f"{_VLLM_ARGS}:118", f"{_VLLM_ARGS}:991",
            role="context_length", field="max_model_len", range=LENGTH),
        _py("vllm", "max-num-seqs", "int", "0.2.7", f"{_VLLM_ARGS}:171", f"{_VLLM_ARGS}:1754",
            role="concurrency", field="max_num_seqs", range=COUNT),
        _py("vllm", "gpu-memory-utilization", "float", "0.2.7", f"{_VLLM_ARGS}:160", f"{_VLLM_ARGS}:1389",
            role="memory_fraction", field="memory_fraction", range=FRACTION),
        _py("vllm", "enforce-eager", "bool", "0.2.7", f"{_VLLM_ARGS}:194", f"{_VLLM_ARGS}:1000",
            role="no_cuda_graphs", field="enforce_eager"),
        _py("vllm", "tensor-parallel-size", "int", "0.2.7", f"{_VLLM_ARGS}:133", f"{_VLLM_ARGS}:1209",
            role="tensor_parallel", field="tensor_parallel_size", range=PARALLEL, aliases=(
                Alias("tp", (f"{_VLLM_ARGS}:245@0.4.3", f"{_VLLM_ARGS}:1209@0.33.0")),
                Alias("tp-size", (), own=False, why=_SGLANG_SPELLING))),
        _py("vllm", "pipeline-parallel-size", "int", "0.2.7", f"{_VLLM_ARGS}:128", f"{_VLLM_ARGS}:1171",
            role="pipeline_parallel", field="pipeline_parallel_size", range=PARALLEL, aliases=(
                Alias("pp", (f"{_VLLM_ARGS}:240@0.4.3", f"{_VLLM_ARGS}:1172@0.33.0")),
                Alias("pp-size", (), own=False, why=_SGLANG_SPELLING))),
    )},
    "sglang": {e.setting: e for e in (
        _py("sglang", "context-length", "int", "0.3.0", f"{_SGL_ARGS}:218", f"{_SGL_FIELDS}/model.py:110",
            role="context_length", field="max_model_len", range=LENGTH),
        _py("sglang", "max-running-requests", "int", "0.3.0", f"{_SGL_ARGS}:258", f"{_SGL_FIELDS}/schedule.py:31",
            role="concurrency", field="max_num_seqs", range=COUNT),
        _py("sglang", "mem-fraction-static", "float", "0.3.0", f"{_SGL_ARGS}:252", f"{_SGL_FIELDS}/schedule.py:27",
            role="memory_fraction", field="memory_fraction", range=FRACTION),
        _py("sglang", "tp-size", "int", "0.3.0", f"{_SGL_ARGS}:302", f"{_SGL_FIELDS}/parallel.py:45",
            role="tensor_parallel", field="tensor_parallel_size", range=PARALLEL, aliases=(
                Alias("tensor-parallel-size", (f"{_SGL_ARGS}:301@0.3.0", f"{_SGL_FIELDS}/parallel.py:49@0.5.23")),
                Alias("tp", (), own=False, why=_ABBREVIATION))),
        _py("sglang", "pp-size", "int", "0.4.7", f"{_SGL_ARGS}:761", f"{_SGL_FIELDS}/parallel.py:59",
            role="pipeline_parallel", field="pipeline_parallel_size", range=PARALLEL, aliases=(
                Alias("pipeline-parallel-size", (f"{_SGL_ARGS}:821@0.4.8", f"{_SGL_FIELDS}/parallel.py:63@0.5.23")),
                Alias("pp", (), own=False, why=_ABBREVIATION + "; ambiguous from 0.5.22 (--pp-async-batch-depth)"))),
        # 0.5.22 made it a deprecated spelling of --cuda-graph-backend-{decode,prefill}=disabled,
        # still accepted ("its only command-line entry point", server_args.py:408@0.5.23)
        _py("sglang", "disable-cuda-graph", "bool", "0.3.0", f"{_SGL_ARGS}:406", f"{_SGL_ARGS}:411",
            deprecated_from="0.5.22", role="no_cuda_graphs", sets=("enforce_eager", True)),
    )},
}


ENGINE_NAMES = {"tgi": "TGI", "vllm": "vLLM", "sglang": "SGLang"}

#: the ServerConfig fields the launch grammar looks a flag up by (`FlagEntry.field`): the
#: model's flag, and the address an engine listens on
MODEL_FIELD = "model"
HOST_FIELD = "host"

#: what actions and plans write a setting for, per engine: role -> setting, read from the
#: entries' `role` (the one place a written flag is named). Roles: context_length,
#: concurrency, memory_fraction, tensor_parallel, pipeline_parallel, no_cuda_graphs and
#: TGI's input_length, batch_total_tokens, batch_prefill_tokens.
ROLES: dict[str, dict[str, str]] = {
    engine: {e.role: e.setting for e in table.values() if e.role is not None} for engine, table in FLAGS.items()
}


def role_flag(engine: str, role: str) -> str | None:
    """The setting `engine` has for `role` (None: the engine has none, e.g. TGI's pipeline).

    >>> role_flag("tgi", "tensor_parallel"), role_flag("tgi", "pipeline_parallel")
    ('num-shard', None)
    """
    return ROLES.get(engine, {}).get(role)


def flag_entry(engine: str, flag: str) -> FlagEntry | None:
    """The entry that `flag` (a setting or any of its spellings, no dashes) belongs to."""
    table = FLAGS.get(engine, {})
    if flag in table:
        return table[flag]
    return next((e for e in table.values() if e.spelling(flag) is not None), None)


def version_label(version: Version) -> str:
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class Choice:
    """What `choose_spelling` decided: `flag` to write (None: refused, `reason` says why) and a
    `note` a plan shows (None: nothing to say)."""

    flag: str | None
    #: why it was refused, and what a plan says beside the flag: phrases under `flag.`
    #: (`runbooks.model.phrases`), worded in the reader's language by the catalogs
    reason: Phrase | None = None
    note: Phrase | None = None


def _range(spelling: Spelling) -> Phrase:
    if spelling.until:
        return Phrase("flag.range_between", {"since": version_label(spelling.since), "until": version_label(spelling.until)})
    return Phrase("flag.range_since", {"since": version_label(spelling.since)})


def _said(key: str, **params: Any) -> Phrase:
    return Phrase("flag." + key, params)


def choose_spelling(engine: str, flag: str, version: Version | None, used: tuple[str, ...] = (),
                    entry: FlagEntry | None = None) -> Choice:
    """The spelling of `flag` to write for `engine` at `version` (None: not known), given the
    spellings the object already uses (`used`: they run, so the deployed version takes them).
    `entry`: the table entry to judge by (default: the flags gpumem's actions write; a flag set
    by hand is judged by its entry among the flags only read, `engine_flags_read.any_entry`).

    >>> choose_spelling("tgi", "max-input-tokens", (1, 4, 0)).flag
    'max-input-length'
    >>> choose_spelling("tgi", "max-batch-size", (1, 4, 0)).reason
    Phrase(key='flag.absent', params={'engine': 'TGI', 'version': '1.4.0', 'flag': 'max-batch-size', 'range': Phrase(key='flag.range_since', params={'since': '1.4.1'})})
    >>> choose_spelling("tgi", "max-input-tokens", None, used=("max-input-length",)).flag
    'max-input-length'
    """
    entry = entry or flag_entry(engine, flag)
    if entry is None:
        return Choice(flag)  # a flag the tables do not hold: the caller's own choice
    name = ENGINE_NAMES.get(engine, engine)
    present = [s.flag for s in entry.spellings if s.flag in used]
    if present:
        note = None if version is not None else _said("unknown_kept", engine=name, flag=present[0])
        return Choice(present[0], note=note)
    oldest, newest = COVERED[engine]
    wanted = entry.spelling(flag) or entry.spellings[-1]
    if version is None:
        if wanted.since <= oldest and wanted.until is None:
            return Choice(wanted.flag, note=_said("unknown_every", engine=name, flag=wanted.flag,
                                                  oldest=version_label(oldest), newest=version_label(newest)))
        known = "unknown_only_accepted" if entry in FLAGS.get(engine, {}).values() else "unknown_only_read"
        return Choice(None, reason=_said(known, engine=name, flag=wanted.flag, range=_range(wanted)))
    note = None
    looked_up = version
    if version > newest:
        looked_up = newest
        note = _said("newer", engine=name, version=version_label(version), newest=version_label(newest))
    elif version < oldest:
        return Choice(None, reason=_said("older", engine=name, version=version_label(version), oldest=version_label(oldest)))
    if wanted.accepts(looked_up):
        if note is None and wanted.deprecated_from is not None and looked_up >= wanted.deprecated_from:
            note = _said("deprecated", engine=name, version=version_label(version), flag=wanted.flag,
                         since=version_label(wanted.deprecated_from))
        return Choice(wanted.flag, note=note)
    other = entry.accepted(looked_up)
    if other:
        return Choice(other[-1].flag, note=note or _said("spelled", engine=name, version=version_label(version),
                                                         flag=other[-1].flag))
    if entry not in FLAGS.get(engine, {}).values():
        # a flag only read: its versions come from fewer releases than the flags actions write,
        # so outside them nothing is known either way, and nothing is claimed
        return Choice(None, reason=_said("read_only", engine=name, version=version_label(version), flag=wanted.flag,
                                         range=_range(wanted)))
    return Choice(None, reason=_said("absent", engine=name, version=version_label(version), flag=wanted.flag,
                                     range=_range(wanted)))

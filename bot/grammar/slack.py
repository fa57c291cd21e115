"""One command grammar for Slack and the CLI: `/gpumem VERB [NAMESPACE/DEPLOYMENT] [--flags]`.

The parser is the one command grammar (`bot.grammar.commands.build_parser()`), so `/gpumem budget --engine vllm ...`
takes exactly the flags `gpumem budget` takes, and becomes the same typed request
(`bot.grammar.requests.request_of`). Slack adds three rules on top: only the verbs
in `SLACK_VERBS`; no flag that reads or writes files on the bot's host (`--bundle`, `--out`,
`--json`, ...); and a NAMESPACE/DEPLOYMENT target for the verbs that read a service. argparse
never exits here: a bad flag becomes a `CommandError` carrying the usage text.

>>> parse_command("triage llm/vllm-server --context prod-a").target.name
'vllm-server'
"""

from __future__ import annotations

import argparse
import html
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from bot.grammar.commands import build_parser
from bot.grammar.requests import FleetRequest, Request, request_of
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase
from runbooks.model.templates import KINDS_USAGE, canonical_kind

#: the longest command text accepted (as Slack sends it, escapes included); a budget command with
#: every flag is about 400 characters
MAX_COMMAND_CHARS = 2000
#: the most words accepted after `/gpumem`. argparse scans the option positions once per option
#: (quadratic in their number: 140 KB of repeated flags cost 24 s of CPU); capping the words
#: keeps that step to a bounded cost, so parsing stays linear in the length of the text
MAX_COMMAND_WORDS = 100
#: verbs Slack may run, in the order `/gpumem help` lists them
SLACK_VERBS = ("triage", "profile", "snapshot", "budget", "fleet", "note", "notes", "handover", "plan", "plans",
               "rollback", "help")
#: verbs that read one service and so need NAMESPACE/DEPLOYMENT
TARGET_VERBS = ("triage", "profile", "snapshot", "plan")
#: verbs whose CLI form means something else in Slack: `gpumem snapshot` samples the GPUs of the
#: machine it runs on and `gpumem profile` reads log files; in Slack both read a service
SLACK_OWN_VERBS = ("snapshot", "profile")
#: option destinations Slack refuses: they read or write files on the bot's host, point the bot
#: at another endpoint with its credentials (--prometheus), or are the operator's to set
SLACK_REFUSED_DESTS = frozenset({
    "bundle", "save_bundle", "json", "out", "output", "config", "kubeconfig", "file", "files", "access_log",
    "server_log", "metrics", "baseline", "chart", "from_deployment", "profile", "prometheus", "in_cluster",
    "direct_metrics", "source_deadline", "deadline", "workers", "write",
})
_REFUSED_METAVAR = re.compile(r"\b(DIR|FILE|PATH|FOLDER|PNG|URL|ACCESS_LOG)\b")
#: options that take a name or a path: only the name is allowed from Slack
_NAME_NOT_PATH_DESTS = frozenset({"model"})
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: Slack's auto-formatting of what was typed: links, smart quotes, long dashes
_SLACK_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_SMART = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "\u00a0": " "})


@dataclass(frozen=True)
class Target:
    """NAMESPACE/NAME of a Deployment, or NAMESPACE/KIND/NAME of another kind gpumem takes
    (`runbooks.model.templates.TARGET_KINDS`); printed back in the form it parses from."""

    namespace: str
    name: str
    kind: str = "Deployment"

    def __str__(self) -> str:
        if self.kind == "Deployment":
            return f"{self.namespace}/{self.name}"
        return f"{self.namespace}/{self.kind.lower()}/{self.name}"


#: what builds the argparse tree Slack parses with (`bot.grammar.commands.build_parser`, or a test's)
ParserFactory = Callable[[], argparse.ArgumentParser]


@dataclass(frozen=True, eq=False)
class Command:
    """A parsed command. `argv` holds the tokens after the verb, as the CLI would get them;
    `request` the verb's typed request (None for `help` and for a command made by a button)."""

    verb: str
    argv: tuple[str, ...] = ()
    request: Request | None = None
    target: Target | None = None
    context: str | None = None
    lang: str | None = None
    #: every option string the verb's parser knows ("--lang", "--engine", ...)
    options: frozenset[str] = frozenset()
    #: for `help VERB`: the verb asked about
    topic: str | None = None


class CommandError(UsageError):
    """The command cannot run as typed: the one who typed it can correct it.

    `key` (the UsageError's `code`) names the catalog message (`slack.error.<key>`), `params`
    its values, and `usage` the verb's usage text shown under it (not a wording value).

    >>> e = CommandError("bad_target", "usage: /gpumem triage ...", target="LLM/x")
    >>> e.key, e.code, e.params, isinstance(e, UsageError)
    ('bad_target', 'bad_target', {'target': 'LLM/x'}, True)
    """

    def __init__(self, key: str, usage: str = "", **params: Any):
        super().__init__(key, **params)
        self.usage = usage

    @property
    def key(self) -> str:
        return self.code


class _ArgparseExit(Exception):
    def __init__(self, message: str, usage: str, is_help: bool = False):
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.is_help = is_help


def normalise(text: str) -> str:
    """Undo what Slack does to typed text: HTML escapes, link markup, smart quotes, long dashes.

    >>> normalise("triage &lt;http://llm/x|llm/x&gt; —context a")
    'triage <http://llm/x|llm/x> --context a'
    """
    text = _SLACK_LINK.sub(lambda m: m.group(2) or m.group(1), text)
    text = html.unescape(text).translate(_SMART)
    return re.sub(r"(^|\s)[—–]+(?=\w)", r"\1--", text).strip()


def parse_command(text: str, default_namespace: str | None = None,
                  parser_factory: ParserFactory | None = None) -> Command:
    """Parse what follows `/gpumem`. Raises CommandError (`.key`, `.usage`) when it cannot run.

    Linear in the length of `text`: too long a text is refused before anything else reads it,
    too many words before argparse sees them.

    >>> try:
    ...     parse_command("triage " + "--context a " * 5000)
    ... except CommandError as e:
    ...     print(e.key, e.params)
    too_long {'length': 60007, 'limit': 2000}
    """
    if len(text) > MAX_COMMAND_CHARS:
        raise CommandError("too_long", length=len(text), limit=MAX_COMMAND_CHARS)
    text = normalise(text)
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        raise CommandError("bad_quotes", detail=str(e)) from None
    if len(tokens) > MAX_COMMAND_WORDS:
        raise CommandError("too_many_words", count=len(tokens), limit=MAX_COMMAND_WORDS)
    if not tokens or tokens[0] in ("help", "-h", "--help"):
        topic = tokens[1] if len(tokens) > 1 else None
        return Command(verb="help", topic=topic if topic in SLACK_VERBS else None)
    verb, rest = tokens[0].lower(), tokens[1:]
    with _PARSER_LOCK:
        return _parse_verb(tokens[0], verb, rest, default_namespace, slack_parser(parser_factory))


def _parse_verb(word: str, verb: str, rest: list[str], default_namespace: str | None,
                root: argparse.ArgumentParser) -> Command:
    verbs = _verb_parsers(root)
    if verb not in SLACK_VERBS or verb not in verbs:
        raise CommandError("unknown_verb", verb=word, verbs=", ".join(v for v in SLACK_VERBS if v in verbs or v == "help"))
    sub = verbs[verb]
    try:
        args, extras = root.parse_known_args([verb, *rest])
    except _ArgparseExit as e:
        if e.is_help:
            raise CommandError("help_verb", usage=e.usage, verb=verb) from None
        # argparse's own words, quoted as it said them
        raise CommandError("bad_flags", usage=e.usage or _usage(sub),
                           detail=Phrase("read.quoted", {"text": e.message})) from None
    if extras:
        raise CommandError("bad_flags", usage=_usage(sub),
                           detail=Phrase("grammar.unrecognized", {"args": " ".join(extras)}))
    _refuse_host_only(sub, args)
    if verb == "fleet":
        _check_fleet_scope(args, _usage(sub))
    target = None
    if verb in TARGET_VERBS:
        namespace = getattr(args, "namespace", None) or default_namespace
        target = parse_target(getattr(args, "target", None), namespace, usage=_usage(sub))
    options = frozenset(s for a in sub._actions for s in a.option_strings)
    return Command(verb=verb, argv=tuple(rest), request=request_of(args), target=target,
                   context=getattr(args, "context", None), lang=getattr(args, "lang", None), options=options)


def _usage(parser: argparse.ArgumentParser) -> str:
    """`parser`'s usage text, formatted once: argparse lays it out anew on each call (about
    half of an ack's parse, measured with cProfile), and a verb's usage never changes."""
    usage = parser.__dict__.get("_gpumem_usage")
    if usage is None:
        usage = parser.__dict__["_gpumem_usage"] = parser.format_usage()
    return usage


def _check_fleet_scope(args: argparse.Namespace, usage: str) -> None:
    names = [n for n in (getattr(args, "scope", None), *(getattr(args, "namespace", None) or ())) if n]
    if names and getattr(args, "all", False):
        raise CommandError("bad_flags", usage=usage, detail=Phrase("grammar.namespace_or_all"))
    for name in names:
        if not _NAMESPACE.match(name):
            raise CommandError("bad_namespace", usage=usage, namespace=name)


def fleet_scope(request: FleetRequest, default_namespace: str | None) -> tuple[str, ...] | None:
    """The namespaces `/gpumem fleet [NAMESPACE|--all]` asks about: those named (NAMESPACE, -n),
    else the default namespace; None for --all, or when neither is given nor configured.

    >>> fleet_scope(parse_command("fleet prod").request, "llm"), fleet_scope(parse_command("fleet").request, "llm")
    (('prod',), ('llm',))
    >>> fleet_scope(parse_command("fleet --all").request, "llm") is None
    True
    """
    names = [n for n in (request.scope, *(request.namespace or ())) if n]
    if request.all:
        return None
    if names:
        return tuple(dict.fromkeys(names))
    return (default_namespace,) if default_namespace else None


def parse_target(value: str | None, default_namespace: str | None, usage: str = "") -> Target:
    """`namespace/name` (a Deployment), `namespace/kind/name` (kind: deployment, statefulset,
    inferenceservice, leaderworkerset, any case, short names deploy, sts, isvc, lws), or `name`
    in the default namespace; names as Kubernetes allows them. Raises CommandError
    missing_target, missing_namespace, bad_target or bad_kind (naming the kinds).

    >>> parse_target("llm/ISVC/llama", None)
    Target(namespace='llm', name='llama', kind='InferenceService')
    """
    if not value:
        raise CommandError("missing_target", usage=usage)
    parts = value.strip().split("/")
    if len(parts) > 3:
        raise CommandError("bad_target", usage=usage, target=value)
    kind = "Deployment"
    if len(parts) == 3:
        found = canonical_kind(parts[1])
        if found is None:
            raise CommandError("bad_kind", usage=usage, target=value, kind=parts[1][:64], kinds=KINDS_USAGE)
        kind = found
        parts = [parts[0], parts[2]]
    name = parts[-1]
    ns = (parts[0] if len(parts) == 2 else "") or (default_namespace or "")
    if not ns:
        raise CommandError("missing_namespace", usage=usage, target=value)
    if not _NAMESPACE.match(ns) or not _NAME.match(name):
        raise CommandError("bad_target", usage=usage, target=value)
    return Target(ns, name, kind)


def split_target(target: str, default_namespace: str | None = None) -> tuple[str, str]:
    """`llm/qwen` -> ("llm", "qwen"); `qwen` with a default namespace -> (default, "qwen").

    The one target grammar (`parse_target`), so a name the CLI accepts is one Slack accepts.
    Raises CommandError (a UsageError) missing_target, missing_namespace, bad_target or bad_kind.

    >>> split_target("llm/vllm-server")
    ('llm', 'vllm-server')
    """
    found = parse_target(target, default_namespace)
    return found.namespace, found.name


def split_workload(target: str, default_namespace: str | None = None) -> tuple[str, str, str]:
    """(namespace, kind, name) of a target in the one grammar (`parse_target`).

    >>> split_workload("llm/lws/vllm"), split_workload("llm/vllm")
    (('llm', 'LeaderWorkerSet', 'vllm'), ('llm', 'Deployment', 'vllm'))
    """
    found = parse_target(target, default_namespace)
    return found.namespace, found.kind, found.name


def usage_of(verb: str, parser_factory: ParserFactory | None = None) -> str:
    """The usage line of one verb as Slack shows it (`usage: /gpumem budget ...`)."""
    with _PARSER_LOCK:
        verbs = _verb_parsers(slack_parser(parser_factory))
        return _usage(verbs[verb]) if verb in verbs else ""


def available_verbs(parser_factory: ParserFactory | None = None) -> tuple[str, ...]:
    with _PARSER_LOCK:
        verbs = _verb_parsers(slack_parser(parser_factory))
    return tuple(v for v in SLACK_VERBS if v in verbs or v == "help")


#: one Slack parser per factory, shared by every thread; each use of one holds the lock
_PARSERS: dict[ParserFactory, argparse.ArgumentParser] = {}
_PARSER_LOCK = threading.RLock()


def slack_parser(parser_factory: ParserFactory | None = None) -> argparse.ArgumentParser:
    """The CLI parser, made safe for Slack: no exits, `/gpumem` in usage, targets on read verbs.

    Built once per factory (a few milliseconds, which the bot pays at start, not on an ack) and
    shared: parsing does not change a parser, but argparse promises nothing about threads, so
    callers hold `_PARSER_LOCK` while they use it (a parse takes a tenth of a millisecond).
    Before, each listener thread built its own, and a burst of commands on fresh threads
    spent its acks building parsers.
    """
    if parser_factory is None:
        parser_factory = build_parser
    with _PARSER_LOCK:
        parser = _PARSERS.get(parser_factory)
        if parser is None:
            parser = _PARSERS[parser_factory] = _build_slack_parser(parser_factory)
        return parser


def _build_slack_parser(parser_factory: ParserFactory) -> argparse.ArgumentParser:
    root = parser_factory()
    root.prog = "/gpumem"
    sub_action = _sub_action(root)
    for verb in TARGET_VERBS:
        if verb in SLACK_OWN_VERBS:
            sub_action.choices.pop(verb, None)
        if verb not in sub_action.choices:
            sub_action.add_parser(verb, help=f"{verb} NAMESPACE/DEPLOYMENT")
    for verb, sub in sub_action.choices.items():
        sub.prog = f"/gpumem {verb}"
        if verb in TARGET_VERBS:
            dests = {a.dest for a in sub._actions}
            if "target" not in dests:
                sub.add_argument("target", nargs="?", help="NAMESPACE/DEPLOYMENT")
            if "context" not in dests:
                sub.add_argument("--context", help="kube context (a cluster in the config)")
            if "lang" not in dests:
                sub.add_argument("--lang", choices=("en", "zh"), default=None, help="language of the reply")
        if verb == "fleet":
            sub.add_argument("scope", nargs="?", metavar="NAMESPACE", help="the namespace to rank (default: the "
                             "default namespace)")
            sub.add_argument("--all", action="store_true", help="every namespace this channel may read")
        for action in sub._actions:
            if _host_only(action):
                action.help = argparse.SUPPRESS  # not offered in Slack's usage text
    for p in (root, *sub_action.choices.values()):
        _no_exit(p)
    return root


def _sub_action(root: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise RuntimeError("the CLI parser has no verbs")  # a programming error, not user input


def _verb_parsers(root: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return dict(_sub_action(root).choices)


def _no_exit(p: argparse.ArgumentParser) -> None:
    """argparse prints and exits on errors and -h; raise instead, keeping the text."""

    def error(message: str) -> NoReturn:
        raise _ArgparseExit(message, _usage(p))

    def exit_(status: int = 0, message: str | None = None) -> NoReturn:
        raise _ArgparseExit(message or "", _usage(p))

    def print_help(file: Any = None) -> NoReturn:
        raise _ArgparseExit("", p.format_help(), is_help=True)

    p.error = error  # type: ignore[method-assign]
    p.exit = exit_  # type: ignore[method-assign]
    p.print_help = print_help  # type: ignore[method-assign]
    p.exit_on_error = True  # errors go through error(), which raises


def _refuse_host_only(sub: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for action in sub._actions:
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        if _host_only(action) or (action.dest in _NAME_NOT_PATH_DESTS and _looks_like_path(value)):
            raise CommandError("host_only_flag", usage=_usage(sub), flag=action.option_strings[-1])


def _host_only(action: argparse.Action) -> bool:
    if not action.option_strings:
        return False
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    return action.dest in SLACK_REFUSED_DESTS or bool(_REFUSED_METAVAR.search(metavar))


def _looks_like_path(value: object) -> bool:
    text = str(value)
    return (text.startswith(("/", ".", "~", "\\")) or ".." in text or "\\" in text
            or text.lower().endswith((".json", ".yaml", ".yml", ".safetensors")))

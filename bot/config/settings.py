"""The bot's settings: one YAML file plus the environment, read once into a frozen tree.

Secrets (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, GPUMEM_PROMETHEUS_TOKEN) come
from the environment or from the file a `*_FILE` variable names (Kubernetes Secret mounts),
never from the YAML file itself. A `Secret` never shows its value in repr or str, so a
Settings tree is safe to log.

>>> s = load_settings(None, {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "abc"})
>>> s.slack.api_url
'https://slack.com/api/'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from bot.config.alerts import AlertSettings, alert_settings
from bot.config.environ import default_lang
from bot.config.remediation import (
    RemediationSettings,
    StoreSettings,
    remediation_settings,
    store_settings,
)
from bot.config.schedules import (
    Schedule,
    SchedulerSettings,
    scheduler_settings,
    schedules_settings,
)
from bot.config.yaml_io import SettingsError, YamlDoc

DEFAULT_SLACK_API_URL = "https://slack.com/api/"
WILDCARD = "*"
#: a watched service: NAMESPACE/DEPLOYMENT, as Kubernetes names them
_WATCHED = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?")

__all__ = [
    "AlertSettings", "ChannelPolicy", "ClusterSettings", "DeadlineSettings", "HttpSettings", "PrometheusSettings",
    "Secret", "Settings", "SettingsError", "SlackSettings", "WorkerSettings", "load_settings",
]


@dataclass(frozen=True)
class Secret:
    """A credential whose value never appears in repr, str, logs or messages.

    >>> repr(Secret("xoxb-123", "SLACK_BOT_TOKEN"))
    "Secret(from SLACK_BOT_TOKEN, '***')"
    """

    _value: str = field(repr=False)
    source: str = ""

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret(from {self.source}, '***')"

    __str__ = __repr__


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    bearer_token: Secret | None = None
    username: str | None = None
    password: Secret | None = None
    ca_file: str | None = None
    timeout_s: float = 10.0


@dataclass(frozen=True)
class ClusterSettings:
    """One Kubernetes cluster: its kube context, Prometheus, and the namespaces gpumem may read."""

    context: str
    kubeconfig: str | None = None
    prometheus: PrometheusSettings | None = None
    #: namespaces gpumem may read here; empty: the top-level `allowed_namespaces`
    namespaces: tuple[str, ...] = ()
    #: what people type after --context (default: the kube context itself)
    name: str = ""

    def matches(self, wanted: str | None) -> bool:
        return wanted is not None and wanted in (self.name, self.context)


@dataclass(frozen=True)
class ChannelPolicy:
    lang: str
    #: namespaces this channel may ask about; empty: whatever the cluster allows
    namespaces: tuple[str, ...] = ()
    #: services (NAMESPACE/DEPLOYMENT) whose state each handover here shows; empty: every
    #: service the shift touched (triaged, changed, noted)
    watch: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlackSettings:
    api_url: str = DEFAULT_SLACK_API_URL
    bot_token: Secret | None = None
    signing_secret: Secret | None = None
    app_token: Secret | None = None
    command: str = "/gpumem"
    default_lang: str = "en"
    #: channel id -> policy; the key "*" admits every channel
    channels: Mapping[str, ChannelPolicy] = field(default_factory=lambda: MappingProxyType({}))
    #: ask Slack (auth.test) that the bot token is valid at start-up
    verify_token_at_start: bool = True


@dataclass(frozen=True)
class WorkerSettings:
    #: triage jobs that run at once
    pool_size: int = 4
    #: jobs that may wait for a worker; beyond it a command is refused as busy
    queue_length: int = 64
    #: threads for the work after an ack (parent messages, queueing, button clicks): a burst of
    #: commands posts this many parent messages at once
    listener_threads: int = 8
    #: the HTTP server's threads: a request holds one until its ack (no Slack call happens on
    #: them); more only add threads contending for the interpreter during a burst
    http_threads: int = 8


@dataclass(frozen=True)
class DeadlineSettings:
    #: a triage (evidence + runbook) that runs longer is reported as timed out
    triage_s: float = 300.0
    #: budget and other CLI verbs run as a child process, killed after this
    verb_s: float = 60.0
    #: at most one progress edit of a parent message per this many seconds
    progress_interval_s: float = 1.0
    #: one Slack Web API call (retries not counted)
    slack_call_s: float = 30.0
    #: live evidence: each source (Kubernetes, Prometheus, /metrics), and the whole collection
    source_s: float = 5.0
    collect_s: float = 20.0


@dataclass(frozen=True)
class HttpSettings:
    host: str = "0.0.0.0"
    port: int = 3000


@dataclass(frozen=True)
class Settings:
    source: str | None = None
    default_namespace: str | None = None
    default_context: str | None = None
    allowed_namespaces: tuple[str, ...] = ()
    clusters: tuple[ClusterSettings, ...] = ()
    #: the Prometheus of the default cluster when `clusters` names none
    prometheus: PrometheusSettings | None = None
    slack: SlackSettings = field(default_factory=SlackSettings)
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    deadlines: DeadlineSettings = field(default_factory=DeadlineSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    #: offline targets: "namespace/name" -> evidence bundle folder (staging, drills, tests)
    bundles: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    store: StoreSettings = field(default_factory=StoreSettings)
    remediation: RemediationSettings = field(default_factory=RemediationSettings)
    #: per-channel shift handover schedules, and how the scheduler elects its leader
    schedules: tuple[Schedule, ...] = ()
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    #: the Alertmanager webhook: labels, routes to channels, storm limits, its token
    alerts: AlertSettings = field(default_factory=AlertSettings)

    def channel_policy(self, channel_id: str) -> ChannelPolicy | None:
        """The channel's policy, or None when gpumem may not answer there."""
        ch = self.slack.channels
        return ch.get(channel_id) or ch.get(WILDCARD)

    def watched(self, channel_id: str) -> tuple[str, ...]:
        """The services the channel's handovers watch (its `watch:` list; empty: none configured)."""
        policy = self.channel_policy(channel_id)
        return policy.watch if policy else ()

    def lang_for(self, channel_id: str) -> str:
        policy = self.channel_policy(channel_id)
        return policy.lang if policy else self.slack.default_lang

    def cluster(self, context: str | None) -> ClusterSettings | None:
        """The cluster a --context names (its name or kube context), else the default one."""
        wanted = context or self.default_context
        return next((c for c in self.clusters if c.matches(wanted)), None)

    def namespace_allowed(self, namespace: str, context: str | None, channel_id: str) -> bool:
        cluster = self.cluster(context)
        allowed = cluster.namespaces if cluster and cluster.namespaces else self.allowed_namespaces
        if WILDCARD not in allowed and namespace not in allowed:
            return False
        policy = self.channel_policy(channel_id)
        return not (policy and policy.namespaces and WILDCARD not in policy.namespaces
                    and namespace not in policy.namespaces)

    def namespaces_for(self, context: str | None, channel_id: str) -> tuple[str, ...]:
        """The namespaces a channel may ask about on a cluster ("*": any)."""
        cluster = self.cluster(context)
        allowed = cluster.namespaces if cluster and cluster.namespaces else self.allowed_namespaces
        policy = self.channel_policy(channel_id)
        if policy and policy.namespaces and WILDCARD not in policy.namespaces:
            allowed = policy.namespaces if WILDCARD in allowed else tuple(n for n in allowed
                                                                         if n in policy.namespaces)
        return tuple(allowed)

    def context_known(self, context: str | None) -> bool:
        """No --context is always fine; a named one must be a configured cluster."""
        return context is None or any(c.matches(context) for c in self.clusters)

    def require(self, *names: str) -> None:
        """Fail with the variable names when secrets a mode needs are missing."""
        env_names = {"bot_token": "SLACK_BOT_TOKEN", "signing_secret": "SLACK_SIGNING_SECRET",
                     "app_token": "SLACK_APP_TOKEN"}
        missing = [env_names[n] for n in names if getattr(self.slack, n) is None]
        if missing:
            raise SettingsError(f"missing {', '.join(missing)}: set the variable, or NAME_FILE to a file holding it")


# ----------------------------------------------------------------------------- loading

_TOP = ("default_namespace", "default_context", "allowed_namespaces", "clusters", "prometheus", "slack",
        "workers", "deadlines", "http", "bundles", "store", "remediation", "schedules",
        "scheduler", "alerts")
_SECRET_KEYS = ("bot_token", "signing_secret", "app_token", "token", "bearer_token", "password")


def load_settings(path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Settings:
    """Read the YAML file (optional) and the environment into Settings; SettingsError names the
    file, line and field of anything wrong."""
    if path is None and environ.get("GPUMEM_CONFIG"):
        path = environ["GPUMEM_CONFIG"]
    doc = YamlDoc.load(path) if path is not None else YamlDoc.empty()
    doc.only_keys((), _TOP)
    base = Path(path).resolve().parent if path is not None else Path.cwd()
    default_ns = doc.opt_str(("default_namespace",))
    return Settings(
        source=str(path) if path is not None else None,
        default_namespace=default_ns,
        default_context=doc.opt_str(("default_context",)),
        allowed_namespaces=doc.str_list(("allowed_namespaces",)) or ((default_ns,) if default_ns else ()),
        clusters=tuple(_cluster(doc, ("clusters", i), base) for i in range(doc.list_len(("clusters",)))),
        prometheus=_prometheus(doc, ("prometheus",), environ, base),
        slack=_slack(doc, environ),
        workers=WorkerSettings(**doc.ints(("workers",), WorkerSettings())),
        deadlines=DeadlineSettings(**doc.floats(("deadlines",), DeadlineSettings())),
        http=_http(doc),
        bundles=MappingProxyType({k: str((base / v).resolve()) for k, v in doc.str_map(("bundles",)).items()}),
        store=store_settings(doc, base),
        remediation=remediation_settings(doc, base),
        schedules=schedules_settings(doc),
        scheduler=scheduler_settings(doc, environ, base),
        alerts=_alerts(doc, environ),
    )


def _alerts(doc: YamlDoc, environ: Mapping[str, str]) -> AlertSettings:
    """The `alerts:` section, its token from the environment, and every route's channel one
    gpumem may post in (`slack.channels`)."""
    alerts = alert_settings(doc)
    channels = doc.keys(("slack", "channels"))
    if WILDCARD not in channels:
        named = [("alerts", "routes", i, "channel") for i, r in enumerate(alerts.routes) if r.channel not in channels]
        if alerts.default_channel and alerts.default_channel not in channels:
            named.append(("alerts", "default_channel"))
        for at in named:
            doc.fail(at, "the channel is not in slack.channels: gpumem may not post there")
    token = _secret(environ, "GPUMEM_WEBHOOK_TOKEN")
    if token is not None and (len(token.reveal()) < 16 or any(c.isspace() or not c.isprintable()
                                                              for c in token.reveal())):
        raise SettingsError(f"{token.source}: the webhook token must be at least 16 printable characters "
                            "without spaces (e.g. `openssl rand -hex 24`)")
    return replace(alerts, token=token) if token is not None else alerts


def _slack(doc: YamlDoc, environ: Mapping[str, str]) -> SlackSettings:
    where = ("slack",)
    _refuse_inline_secrets(doc, where)
    doc.only_keys(where, ("api_url", "command", "default_lang", "channels", "verify_token_at_start"))
    default = doc.opt_str((*where, "default_lang")) or default_lang(environ)
    doc.check_choice((*where, "default_lang"), default, ("en", "zh"))
    channels: dict[str, ChannelPolicy] = {}
    for channel in doc.keys((*where, "channels")):
        at = (*where, "channels", channel)
        doc.only_keys(at, ("lang", "namespaces", "watch"))
        lang = doc.opt_str((*at, "lang")) or default
        doc.check_choice((*at, "lang"), lang, ("en", "zh"))
        watch = doc.str_list((*at, "watch"))
        for i, target in enumerate(watch):
            if not _WATCHED.fullmatch(target):
                doc.fail((*at, "watch", i), f"{target!r} is not NAMESPACE/DEPLOYMENT (e.g. llm/vllm-server)")
        channels[channel] = ChannelPolicy(lang=lang, namespaces=doc.str_list((*at, "namespaces")),
                                          watch=tuple(dict.fromkeys(watch)))
    api_url = environ.get("GPUMEM_SLACK_API_URL") or doc.opt_str((*where, "api_url")) or DEFAULT_SLACK_API_URL
    if not api_url.startswith(("http://", "https://")):
        raise SettingsError(f"GPUMEM_SLACK_API_URL / slack.api_url: {api_url!r} is not an http(s) URL")
    if not api_url.endswith("/"):
        api_url += "/"  # urljoin drops the last path segment without it
    command = doc.opt_str((*where, "command")) or "/gpumem"
    if not command.startswith("/"):
        doc.fail((*where, "command"), f"{command!r}: a slash command starts with '/'")
    bot = _secret(environ, "SLACK_BOT_TOKEN")
    if bot is not None and not bot.reveal().startswith("xoxb-"):
        raise SettingsError("SLACK_BOT_TOKEN: expected a bot token (it starts with xoxb-)")
    app = _secret(environ, "SLACK_APP_TOKEN")
    if app is not None and not app.reveal().startswith("xapp-"):
        raise SettingsError("SLACK_APP_TOKEN: expected an app-level token (it starts with xapp-)")
    verify = doc.opt_bool((*where, "verify_token_at_start"))
    return SlackSettings(api_url=api_url, bot_token=bot, signing_secret=_secret(environ, "SLACK_SIGNING_SECRET"),
                         app_token=app, command=command, default_lang=default,
                         channels=MappingProxyType(channels),
                         verify_token_at_start=True if verify is None else verify)


def _cluster(doc: YamlDoc, at: tuple, base: Path) -> ClusterSettings:
    doc.only_keys(at, ("name", "context", "kubeconfig", "prometheus", "namespaces"))
    context = doc.opt_str((*at, "context"))
    if not context:
        doc.fail(at, "each cluster needs a context (the kube context name, or in-cluster)")
    kubeconfig = doc.opt_str((*at, "kubeconfig"))
    return ClusterSettings(context=str(context), kubeconfig=str(base / kubeconfig) if kubeconfig else None,
                           prometheus=_prometheus(doc, (*at, "prometheus"), {}, base),
                           namespaces=doc.str_list((*at, "namespaces")),
                           name=doc.opt_str((*at, "name")) or str(context))


def _prometheus(doc: YamlDoc, at: tuple, environ: Mapping[str, str], base: Path) -> PrometheusSettings | None:
    url = environ.get("GPUMEM_PROMETHEUS_URL") or doc.opt_str((*at, "url"))
    if not doc.has(at) and not url:
        return None
    _refuse_inline_secrets(doc, at)
    doc.only_keys(at, ("url", "bearer_token_file", "username", "password_file", "ca_file", "timeout_s"))
    if not url:
        doc.fail(at, "prometheus needs a url")
    if not str(url).startswith(("http://", "https://")):
        doc.fail((*at, "url"), f"{url!r} is not an http(s) URL")
    token = _secret(environ, "GPUMEM_PROMETHEUS_TOKEN") or _file_secret(doc, (*at, "bearer_token_file"), base)
    ca = doc.opt_str((*at, "ca_file"))
    timeout = doc.floats(at, PrometheusSettings(url=""), only=("timeout_s",)).get("timeout_s", 10.0)
    return PrometheusSettings(url=str(url).rstrip("/"), bearer_token=token, username=doc.opt_str((*at, "username")),
                              password=_file_secret(doc, (*at, "password_file"), base),
                              ca_file=str(base / ca) if ca else None, timeout_s=timeout)


def _http(doc: YamlDoc) -> HttpSettings:
    doc.only_keys(("http",), ("host", "port"))
    port = doc.ints(("http",), HttpSettings(), only=("port",)).get("port", 3000)
    if not 0 <= port <= 65535:
        doc.fail(("http", "port"), f"{port} is not a TCP port")
    return HttpSettings(host=doc.opt_str(("http", "host")) or "0.0.0.0", port=port)


def _refuse_inline_secrets(doc: YamlDoc, at: tuple) -> None:
    for key in _SECRET_KEYS:
        if doc.has((*at, key)):
            doc.fail((*at, key), "secrets do not belong in the config file; use the environment "
                                 "(or a *_FILE variable, or *_file here, naming a mounted secret file)")


def _secret(environ: Mapping[str, str], name: str) -> Secret | None:
    value, file_name = environ.get(name), environ.get(f"{name}_FILE")
    if value and file_name:
        raise SettingsError(f"both {name} and {name}_FILE are set; keep one")
    if value:
        return Secret(value.strip(), name)
    if file_name:
        return Secret(_read_secret_file(Path(file_name), f"{name}_FILE"), f"{name}_FILE")
    return None


def _file_secret(doc: YamlDoc, at: tuple, base: Path) -> Secret | None:
    name = doc.opt_str(at)
    if not name:
        return None
    path = base / name
    try:
        return Secret(_read_secret_file(path, ".".join(map(str, at))), str(path))
    except SettingsError as e:
        doc.fail(at, str(e))
        raise  # pragma: no cover - fail raises


def _read_secret_file(path: Path, what: str) -> str:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise SettingsError(f"{what}: cannot read {path}: {e.strerror or e}") from None
    if not value:
        raise SettingsError(f"{what}: {path} is empty")
    return value

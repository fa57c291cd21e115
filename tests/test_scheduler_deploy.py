"""The bot as a service a platform team applies (deploy/base, rendered through each overlay),
checked property by property: the store on a PVC, secrets by name only, probes, the Lease RBAC
(and every Lease call the scheduler makes is granted by it), a locked-down pod; the config
loads with the schedules it shows, and the bot starts with only the secrets docs/install.md creates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.config.settings import load_settings
from bot.scheduler.leader import LeaderElector
from bot.service.lease import LeaseClient
from tests.support.deploy import (
    DEPLOY,
    OVERLAYS,
    bot_deployment,
    install_doc_commands,
    install_doc_secrets,
    one,
    render,
)
from tests.support.fake_kube_rules import rule_allows
from tests.support.kube_fixtures import running_scenario

DOCS = render("read-only")
#: the Secrets and keys docs/install.md ("Install in a cluster") creates before the first apply
INSTALL_SECRETS = install_doc_secrets()


def _container(docs: list[dict]) -> dict:
    (c,) = bot_deployment(docs)["spec"]["template"]["spec"]["containers"]
    return c


def test_the_deployment_runs_one_bot_with_recreate_its_store_config_and_probes():
    dep = bot_deployment(DOCS)
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    c = _container(DOCS)
    assert c["args"][:2] == ["serve", "--http"] and "/etc/gpumem/gpumem.yaml" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["store"]["mountPath"] == "/var/lib/gpumem"
    assert volumes["store"]["persistentVolumeClaim"]["claimName"] == one(DOCS, "PersistentVolumeClaim")["metadata"]["name"]
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "1Gi" and mounts["tmp"]["mountPath"] == "/tmp"
    config_map = one(DOCS, "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_map["metadata"]["name"].startswith("gpumem-bot-config-")  # the content hash rolls the pod
    assert mounts["config"] == {"name": "config", "mountPath": "/etc/gpumem/gpumem.yaml",
                                "subPath": "gpumem.yaml", "readOnly": True}
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_secrets_are_referenced_by_name_required_ones_as_files_optional_ones_unset_when_absent():
    c = _container(DOCS)
    pod = bot_deployment(DOCS)["spec"]["template"]["spec"]
    env = {e["name"]: e for e in c["env"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"):
        assert name not in env and "value" in env[f"{name}_FILE"]
        assert env[f"{name}_FILE"]["value"].startswith(mounts["slack"]["mountPath"] + "/")
    slack = volumes["slack"]["secret"]
    assert slack["secretName"] == "gpumem-slack" and not slack.get("optional")
    assert {i["key"] for i in slack["items"]} == {"bot-token", "signing-secret"}
    refs = {name: env[name]["valueFrom"]["secretKeyRef"]
            for name in ("SLACK_APP_TOKEN", "GPUMEM_WEBHOOK_TOKEN", "GPUMEM_PROMETHEUS_TOKEN")}
    assert refs == {"SLACK_APP_TOKEN": {"name": "gpumem-slack", "key": "app-token", "optional": True},
                    "GPUMEM_WEBHOOK_TOKEN": {"name": "gpumem-webhook", "key": "token", "optional": True},
                    "GPUMEM_PROMETHEUS_TOKEN": {"name": "gpumem-prometheus", "key": "token", "optional": True}}
    # no secret value anywhere: no Secret with data, no env value that looks like one
    for overlay in OVERLAYS:
        for obj in render(overlay):
            if obj["kind"] == "Secret":
                assert "data" not in obj and "stringData" not in obj
                assert obj["type"] == "kubernetes.io/service-account-token"
    assert not any(str(e.get("value", "")).startswith(("xoxb-", "xapp-")) for e in c["env"])


def _pod_environ(docs: list[dict], secrets: dict[str, dict[str, str]], root: Path) -> dict[str, str]:
    """The environment the bot's container gets when `secrets` exist (name -> key -> value): the
    mounted files written under `root` (their mount paths rewritten there), optional
    secretKeyRefs set only when their Secret and key exist, a missing required one an error."""
    pod = bot_deployment(docs)["spec"]["template"]["spec"]
    c = _container(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in c["volumeMounts"]:
        source = volumes[mount["name"]].get("secret")
        if source is None:
            continue
        present = secrets.get(source["secretName"])
        if present is None:
            assert source.get("optional"), f"the pod would not start: Secret {source['secretName']} is missing"
            continue
        for item in source.get("items") or [{"key": k, "path": k} for k in present]:
            assert item["key"] in present, f"the pod would not start: {source['secretName']} has no {item['key']}"
            target = root / mount["mountPath"].lstrip("/") / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(present[item["key"]] + "\n")
    environ: dict[str, str] = {}
    for e in c["env"]:
        if "value" in e:
            value = e["value"]
            environ[e["name"]] = str(root / value.lstrip("/")) if e["name"].endswith("_FILE") else value
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            value = secrets.get(ref["name"], {}).get(ref["key"])
            assert value is not None or ref.get("optional"), f"the pod would not start: {ref}"
            if value is not None:
                environ[e["name"]] = value
        else:
            assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            environ[e["name"]] = bot_deployment(docs)["metadata"]["namespace"]
    return environ


def test_the_bot_starts_with_only_the_secrets_the_readme_creates(tmp_path):
    assert {"gpumem-slack": {"bot-token", "signing-secret"}, "gpumem-webhook": {"token"}} == INSTALL_SECRETS
    values = {"gpumem-slack": {"bot-token": "xoxb-1-2-abc", "signing-secret": "s1gn"},
              "gpumem-webhook": {"token": "w3bh00k-0123456789abcdef"}}
    config = tmp_path / "gpumem.yaml"
    config.write_text(one(DOCS, "ConfigMap")["data"]["gpumem.yaml"])
    environ = _pod_environ(DOCS, values, tmp_path)
    assert environ["GPUMEM_WEBHOOK_TOKEN"] == "w3bh00k-0123456789abcdef" and "SLACK_APP_TOKEN" not in environ
    settings = load_settings(config, environ)
    settings.require("bot_token", "signing_secret")  # what `gpumem serve --http` requires
    assert settings.slack.bot_token.reveal() == "xoxb-1-2-abc" and settings.slack.signing_secret.reveal() == "s1gn"
    # without the optional Secrets the variables are unset, and the bot starts all the same
    bare = _pod_environ(DOCS, {"gpumem-slack": values["gpumem-slack"]}, tmp_path / "bare")
    assert "GPUMEM_WEBHOOK_TOKEN" not in bare and "GPUMEM_PROMETHEUS_TOKEN" not in bare
    load_settings(config, bare).require("bot_token", "signing_secret")
    with pytest.raises(AssertionError, match="Secret gpumem-slack is missing"):
        _pod_environ(DOCS, {}, tmp_path / "none")


def test_the_pod_is_non_root_with_a_read_only_root_and_only_the_store_and_tmp_writable():
    for overlay in OVERLAYS:
        docs = render(overlay)
        pod = bot_deployment(docs)["spec"]["template"]["spec"]
        c = _container(docs)
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65534
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
        assert writable == {"/var/lib/gpumem", "/tmp"}, overlay


def test_the_lease_rbac_is_get_create_update_on_leases_in_the_bots_namespace():
    role = one(DOCS, "Role", "gpumem-bot-leader-election")
    binding = one(DOCS, "RoleBinding", "gpumem-bot-leader-election")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    dep = bot_deployment(DOCS)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "gpumem"}]


def test_every_lease_call_of_election_takeover_and_release_is_granted_by_the_lease_role(tmp_path):
    role = one(DOCS, "Role", "gpumem-bot-leader-election")
    namespace = role["metadata"]["namespace"]
    lease = "gpumem-scheduler"
    t0 = datetime(2025, 3, 3, 1, 0, tzinfo=UTC)
    with running_scenario(None, tmp_path) as sc:
        sc.kube.grant(role["rules"], namespace=namespace)
        api = LeaseClient(sc.api(), namespace)
        a = LeaderElector(api, lease, "pod-a", 30)
        b = LeaderElector(api, lease, "pod-b", 30)
        assert a.step(t0) and not b.step(t0 + timedelta(seconds=5))
        assert a.step(t0 + timedelta(seconds=10))  # renew
        assert b.step(t0 + timedelta(seconds=41))  # a stopped renewing: b takes over
        assert b.release(t0 + timedelta(seconds=50))
        assert sc.kube.get("Lease", namespace, lease)["spec"]["holderIdentity"] is None
        calls = sc.kube.calls()
    assert {r.verb for r in calls} == {"get", "create", "update"}
    assert all(r.status != 403 and r.namespace == namespace for r in calls)
    for r in calls:
        assert any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                   for rule in role["rules"]), (r.method, r.path)


def test_the_service_and_servicemonitor_reach_the_http_port_and_the_config_loads(tmp_path):
    svc, dep = one(DOCS, "Service", "gpumem-bot"), bot_deployment(DOCS)
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    monitor = one(DOCS, "ServiceMonitor", "gpumem-bot")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    config = tmp_path / "gpumem.yaml"
    config.write_text(one(DOCS, "ConfigMap")["data"]["gpumem.yaml"])
    settings = load_settings(config, {"POD_NAMESPACE": "gpumem", "KUBERNETES_SERVICE_HOST": "127.0.0.1"})
    assert settings.store.path == "/var/lib/gpumem/gpumem.db" and settings.http.port == 3000
    (port,) = dep["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert port["containerPort"] == settings.http.port and settings.http.host == "0.0.0.0"
    (schedule,) = settings.schedules
    assert (schedule.channel, schedule.cron, schedule.timezone, schedule.grace_s) == (
        "C0123ABCD", "0 9,21 * * *", "Asia/Shanghai", 3600)
    assert (settings.scheduler.election, settings.scheduler.lease_name, settings.scheduler.lease_namespace) == (
        "lease", "gpumem-scheduler", "gpumem")
    cluster = settings.cluster(None)
    assert cluster is not None and cluster.context == "in-cluster"  # reads use the pod's ServiceAccount
    assert set(settings.slack.channels) == {schedule.channel}


def test_the_install_steps_name_what_the_manifests_have():
    commands = install_doc_commands()
    applied = [w[3] for w in commands if w[:3] == ["kubectl", "apply", "-k"]]
    assert applied == ["deploy/overlays/read-only"]
    assert all((DEPLOY.parent / path / "kustomization.yaml").is_file() for path in applied)
    assert ["kubectl", "create", "namespace", "gpumem"] in commands
    assert {bot_deployment(render(o))["metadata"]["namespace"] for o in OVERLAYS} == {"gpumem"}
    (forward,) = [w for w in commands if w[:4] == ["kubectl", "-n", "gpumem", "port-forward"]]
    svc = one(DOCS, "Service", "gpumem-bot")
    local, _, remote = forward[5].partition(":")
    assert forward[4] == f"svc/{svc['metadata']['name']}" and int(remote) == svc["spec"]["ports"][0]["port"]
    (curl,) = [w for w in commands if w[0] == "curl"]
    assert curl[-1] == f"http://127.0.0.1:{local}/health"
    (rollout,) = [w for w in commands if w[3:5] == ["rollout", "status"]]
    assert rollout[5] == f"deploy/{bot_deployment(DOCS)['metadata']['name']}"
    # every secret the install page creates is one the bot reads
    env = _container(DOCS)["env"]
    referenced = {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                  for e in env if "secretKeyRef" in e.get("valueFrom", {})}
    volumes = bot_deployment(DOCS)["spec"]["template"]["spec"]["volumes"]
    referenced |= {(v["secret"]["secretName"], i["key"]) for v in volumes if "secret" in v for i in v["secret"]["items"]}
    assert {(name, key) for name, keys in INSTALL_SECRETS.items() for key in keys} <= referenced

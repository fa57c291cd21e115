"""deploy/gpumem-bot.yaml: the bot as a service a platform team applies, checked property by
property (the store on a PVC, secrets as *_FILE, probes, the Lease RBAC, a locked-down pod),
and its config loads with the schedules it shows."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.service.settings import load_settings

DOCS = list(yaml.safe_load_all((Path(__file__).parent.parent / "deploy" / "gpumem-bot.yaml").read_text()))


def _one(kind: str) -> dict:
    found = [d for d in DOCS if d and d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def test_the_deployment_runs_the_bot_with_its_store_config_and_secrets():
    dep = _one("Deployment")
    assert 1 <= dep["spec"]["replicas"] <= 2
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][:2] == ["serve", "--http"] and "/etc/gpumem/gpumem.yaml" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["store"]["mountPath"] == "/var/lib/gpumem"
    assert volumes["store"]["persistentVolumeClaim"]["claimName"] == _one("PersistentVolumeClaim")["metadata"]["name"]
    assert volumes["config"]["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]
    env = {e["name"]: e for e in c["env"]}
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "GPUMEM_PROMETHEUS_TOKEN"):
        assert name not in env and env[f"{name}_FILE"]["value"].startswith("/etc/gpumem/secrets/")
    assert volumes["slack"]["secret"]["secretName"] and volumes["prometheus"]["secret"]["secretName"]
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]


def test_the_pod_is_non_root_with_a_read_only_root_and_only_the_store_and_tmp_writable():
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/gpumem", "/tmp"}


def test_the_lease_rbac_is_get_create_update_on_leases_in_the_bots_namespace():
    role, binding = _one("Role"), _one("RoleBinding")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    sa = _one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa}]
    assert not any(d["kind"] == "ClusterRole" for d in DOCS)


def test_the_service_reaches_the_http_port_and_the_config_loads_with_its_schedules(tmp_path):
    svc, dep = _one("Service"), _one("Deployment")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    config = tmp_path / "gpumem.yaml"
    config.write_text(_one("ConfigMap")["data"]["gpumem.yaml"])
    settings = load_settings(config, {"POD_NAMESPACE": "gpumem"})
    assert settings.store.path == "/var/lib/gpumem/gpumem.db" and settings.http.port == 3000
    (schedule,) = settings.schedules
    assert (schedule.channel, schedule.cron, schedule.timezone, schedule.grace_s) == (
        "C0123ABCD", "0 9,21 * * *", "Asia/Shanghai", 3600)
    assert (settings.scheduler.lease_name, settings.scheduler.lease_namespace) == ("gpumem-scheduler", "gpumem")

"""The deployment artefacts (deploy/) checked without a cluster: the rendered kustomizations against Kubernetes'
own schemas, the custom resources (KEDA, Prometheus Operator) against the worker they point at, the alert rules
and the dashboard against the metric catalogue (observability/metrics.py), and the Temporal Helm values
against the search attributes the workflows set. Quick: no servers, a few kubectl and promtool runs.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # ships no type hints
import promql_parser
import pytest
import yaml

from config.settings import ServiceSettings
from observability import metrics
from protocol.names import SEARCH_ATTRIBUTES, follows_task_queue

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "k8s"
KUSTOMIZATIONS = [BASE, BASE / "storage", BASE / "migrate"]
RULES = BASE / "prometheus-rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "helper-runtime.json"
TEMPORAL_VALUES = ROOT / "deploy" / "temporal" / "values.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
# Kubernetes versions in support when this was written: the oldest we promise and the newest the schemas know.
KUBERNETES_VERSIONS = ["1.34", kubernetes_validate.utils.latest_version()]
CUSTOM_KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}
# The Temporal SDK's own series the dashboard must show (names as its Prometheus exporter serves them).
SDK_HEALTH_SERIES = {
    "temporal_workflow_task_schedule_to_start_latency_bucket",
    "temporal_activity_schedule_to_start_latency_bucket",
    "temporal_worker_task_slots_available",
    "temporal_num_pollers",
    "temporal_workflow_task_execution_failed",
    "temporal_sticky_cache_size",
}
KUBECTL = shutil.which("kubectl")
PROMTOOL = shutil.which("promtool")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

Manifest = dict[str, Any]


@functools.cache
def rendered(directory: Path) -> tuple[Manifest, ...]:
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(directory)], check=True, capture_output=True, text=True).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def one(kind: str, name: str, directory: Path = BASE) -> Manifest:
    found = [m for m in rendered(directory) if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name} in {directory}: {len(found)} found"
    return found[0]


def config() -> dict[str, str]:
    data: dict[str, str] = one("ConfigMap", "helper-runtime-config")["data"]
    return data


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def pod_labels(deployment: str) -> dict[str, str]:
    labels: dict[str, str] = one("Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
    return labels


def helper_runtime_names(text: str) -> set[str]:
    return set(re.findall(r"\bhelper_runtime_[a-z0-9_]+", text))


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    return groups


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def promql_problems(queries: dict[str, str]) -> dict[str, str]:
    """Each query that does not parse as PromQL (an unknown function, a bad duration, a stray bracket), by name."""
    problems = {}
    for name, query in queries.items():
        try:
            promql_parser.parse(query)
        except ValueError as error:
            problems[name] = str(error)
    return problems


def promtool_check(tmp_path: Path, groups: list[dict[str, Any]]) -> None:
    """Where Prometheus's promtool is installed (Debian: prometheus), its rule check as well, which also parses the
    annotations' templates."""
    if PROMTOOL is None:
        return
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- Kubernetes' own kinds ----------------------------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_rendered_manifest_is_valid_for_kubernetes(directory: Path, version: str) -> None:
    custom = set()
    for manifest in rendered(directory):
        if manifest["kind"] in CUSTOM_KINDS:
            custom.add(manifest["kind"])
            continue
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']} ({version}): {error.message}")
    if directory == BASE:
        assert custom == CUSTOM_KINDS


@needs_kubectl
def test_deleting_the_base_keeps_the_namespace_and_the_outcomes() -> None:
    assert {m["kind"] for m in rendered(BASE)}.isdisjoint({"Namespace", "PersistentVolumeClaim"})
    assert one("PersistentVolumeClaim", "helper-results", BASE / "storage")["spec"]["accessModes"] == ["ReadWriteMany"]
    labels = one("Namespace", "helpers", BASE / "storage")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


@needs_kubectl
def test_worker_liveness_asks_only_the_event_loop() -> None:
    """/livez answers while the loop runs; /readyz asks the store and Temporal (replica/health.py)."""
    container = one("Deployment", "helper-worker")["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    source = (ROOT / "replica" / "health.py").read_text()
    livez = source[source.index('if path == "/livez"') : source.index('elif path == "/readyz"')]
    assert "_readiness" not in livez


@needs_kubectl
def test_disruption_budgets_cover_their_pods_and_let_unhealthy_ones_go() -> None:
    for name in ("helper-worker", "helper-codec-server", "helper-api"):
        budget = one("PodDisruptionBudget", name)["spec"]
        assert matches(budget["selector"]["matchLabels"], pod_labels(name))
        assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert one("Deployment", "helper-codec-server")["spec"]["replicas"] >= 2
    assert one("Deployment", "helper-api")["spec"]["replicas"] >= 2


@needs_kubectl
def test_codec_server_memory_covers_its_body_cap() -> None:
    """docs/performance.md: a 3.8 MiB body (the cap is 4 MiB) peaks at 96 MB resident."""
    container = one("Deployment", "helper-codec-server")["spec"]["template"]["spec"]["containers"][0]
    mebibytes = {k: int(v.removesuffix("Mi")) for k, v in container["resources"]["requests"].items() if k == "memory"}
    assert mebibytes["memory"] * 2**20 >= 96 * 10**6
    assert int(container["resources"]["limits"]["memory"].removesuffix("Mi")) > mebibytes["memory"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"


@needs_kubectl
def test_network_policies_select_the_pods_and_open_only_their_ports() -> None:
    for name in ("helper-worker", "helper-codec-server", "helper-api"):
        policy = one("NetworkPolicy", name)["spec"]
        assert matches(policy["podSelector"]["matchLabels"], pod_labels(name))
        assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
        assert any(p["port"] == 53 for rule in policy["egress"] for p in rule.get("ports", []))
    worker = one("NetworkPolicy", "helper-worker")["spec"]
    assert {p["port"] for rule in worker["ingress"] for p in rule["ports"]} == {"metrics", "health"}
    ports = {p["port"] for rule in worker["egress"] for p in rule["ports"]}
    assert {7233, 5432, 8310, 8320} <= ports
    # The example ports are those of the ConfigMap's example addresses.
    assert config()["HELPER_CORE_URL"].endswith(":8310") and config()["HELPER_CHAT_URL"].endswith(":8320")


@needs_kubectl
def test_the_starter_api_is_deployed_safe_by_default() -> None:
    """R47: the API listens beyond loopback only with its token, reads the store as the read-only role, answers its
    probes without the store or Temporal for liveness, gets its SIGTERM grace, and only Iva and Prometheus reach it."""
    pod = one("Deployment", "helper-api")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:2] == ["helper-starter", "serve"]
    token = [e for e in container["env"] if e["name"] == "HELPER_API_TOKEN"]
    assert token and not token[0]["valueFrom"]["secretKeyRef"].get("optional", False)
    secrets = {source["secretRef"]["name"] for source in container["envFrom"] if "secretRef" in source}
    assert "helper-store-reader" in secrets and "helper-store" not in secrets
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert all(mount.get("readOnly") for mount in container["volumeMounts"] if mount["name"] == "results")
    grace_s = ServiceSettings().shutdown_grace_ms / 1000
    assert pod["terminationGracePeriodSeconds"] > grace_s + container["lifecycle"]["preStop"]["sleep"]["seconds"]

    port = container["ports"][0]
    assert port["containerPort"] == int(container["command"][-1].rpartition(":")[2])
    service = one("Service", "helper-api")
    assert matches(service["spec"]["selector"], pod_labels("helper-api"))
    monitor = one("ServiceMonitor", "helper-api")["spec"]
    assert matches(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    assert [e["path"] for e in monitor["endpoints"]] == ["/metrics"]
    policy = one("NetworkPolicy", "helper-api")["spec"]
    assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} == {port["name"]}
    assert {7233, 5432, 8310} <= {p["port"] for rule in policy["egress"] for p in rule["ports"]}


# --- the custom resources -----------------------------------------------------------------------------------


@needs_kubectl
def test_scaled_object_scales_the_worker_on_its_task_queue() -> None:
    scaled = one("ScaledObject", "helper-worker")["spec"]
    target = scaled["scaleTargetRef"]
    assert (target.get("kind", "Deployment"), target["name"]) == ("Deployment", "helper-worker")
    assert "replicas" not in one("Deployment", "helper-worker")["spec"], "the HPA owns the count"
    assert 2 <= scaled["minReplicaCount"] <= scaled["maxReplicaCount"]

    # The backlog of both task queues: the workflows and short activities, and the follows (protocol.names).
    task_queue = config()["HELPER_TASK_QUEUE"]
    follows = follows_task_queue(task_queue)
    temporal = {t["metadata"]["taskQueue"]: t["metadata"] for t in scaled["triggers"] if t["type"] == "temporal"}
    assert set(temporal) == {task_queue, follows}
    assert set(temporal[task_queue]["queueTypes"].split(",")) == {"workflow", "activity"}
    assert temporal[follows]["queueTypes"] == "activity"
    for meta in temporal.values():
        assert meta["namespace"] == config()["TEMPORAL_NAMESPACE"]
        assert meta.get("endpoint") or meta["endpointFromEnv"] in config()
    # The sizing signal: the follow slots in use, 75 % of each replica's follow slots.
    prometheus = [t["metadata"] for t in scaled["triggers"] if t["type"] == "prometheus"]
    assert len(prometheus) == 1
    assert f'task_queue="{follows}"' in prometheus[0]["query"]
    assert int(prometheus[0]["threshold"]) == int(config()["HELPER_MAX_CONCURRENT_FOLLOWS"]) * 3 // 4
    for trigger in scaled["triggers"]:
        assert all(isinstance(value, str) for value in trigger["metadata"].values()), "KEDA metadata are strings"

    # Scale down no sooner than a helper's whole run: deadline + grace (the hard ceiling).
    hard_ceiling_s = (int(config()["HELPER_DEADLINE_MS"]) + int(config()["HELPER_GRACE_MS"])) // 1000
    behavior = scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert hard_ceiling_s <= behavior["scaleDown"]["stabilizationWindowSeconds"] <= 3600


@needs_kubectl
def test_service_monitor_scrapes_the_worker_metrics_port() -> None:
    service = one("Service", "helper-worker-metrics")
    monitor = one("ServiceMonitor", "helper-worker")["spec"]
    assert matches(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    assert matches(service["spec"]["selector"], pod_labels("helper-worker"))
    assert {e["port"] for e in monitor["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}

    container = one("Deployment", "helper-worker")["spec"]["template"]["spec"]["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    bind_port = int(config()["HELPER_METRICS_BIND"].rpartition(":")[2])
    assert container_ports["metrics"] == bind_port
    assert all(p["targetPort"] in container_ports for p in service["spec"]["ports"])
    # The alerts and the dashboard select the scrape job by the Service's name (the operator's default job).
    assert 'job="helper-worker-metrics"' in RULES.read_text()


@needs_kubectl
def test_prometheus_rule_is_rendered_whole() -> None:
    assert one("PrometheusRule", "helper-runtime")["spec"]["groups"] == rule_groups()


# --- alerts, dashboard, metric catalogue ----------------------------------------------------------------------


def test_metric_catalogue_uses_its_own_registry_and_prefix() -> None:
    from prometheus_client import REGISTRY as GLOBAL

    assert metrics.REGISTRY is not GLOBAL
    families = list(metrics.REGISTRY.collect())
    assert len(families) == 16
    assert all(f.name.startswith("helper_runtime_") for f in families)
    assert not any(f.name.startswith("helper_runtime_") for f in GLOBAL.collect())


def declared_series() -> frozenset[str]:
    """Every series name the worker's registry exposes (`_total`, `_bucket`, ... included)."""
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.update({f"{family.name}_total", f"{family.name}_created"})
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_count", "_sum", "_created"))
    return frozenset(names)


def test_every_alert_has_a_runbook_and_uses_declared_metrics() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", OPERATIONS.read_text(), flags=re.S), re.M)
    }
    declared = declared_series()
    alerts = [rule for group in rule_groups() for rule in group["rules"]]
    assert len(alerts) >= 10
    for rule in alerts:
        assert rule["labels"]["severity"] in {"warning", "critical"}
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in anchors, f"no runbook section for {rule['alert']}"
        assert helper_runtime_names(rule["expr"]) <= declared, rule["alert"]


def test_alert_rules_are_valid_prometheus_rules(tmp_path: Path) -> None:
    rules = [rule for group in rule_groups() for rule in group["rules"]]
    assert promql_problems({rule["alert"]: rule["expr"] for rule in rules}) == {}
    for rule in rules:
        if "for" in rule:
            assert promql_parser.parse_duration(rule["for"]).total_seconds() > 0, rule["alert"]
    promtool_check(tmp_path, rule_groups())


def test_a_broken_query_is_caught() -> None:
    """The check above fails on the mistakes a hand-edited rule makes."""
    broken = {"function": "rat(helper_runtime_x_total[5m])", "duration": "x[5q]", "bracket": "sum(rate(x[5m])"}
    assert set(promql_problems(broken)) == set(broken)


def test_dashboard_shows_declared_metrics_and_worker_health() -> None:
    exprs = dashboard_exprs()
    used = set().union(*(helper_runtime_names(e) for e in exprs))
    assert used <= declared_series(), used - declared_series()
    # Every declared metric has a panel.
    for family in metrics.REGISTRY.collect():
        series = re.compile(rf"\b{family.name}(_total|_bucket|_count|_sum)?\b")
        assert any(series.search(e) for e in exprs), f"no panel shows {family.name}"
    assert all(any(series in e for e in exprs) for series in SDK_HEALTH_SERIES)


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    assert promql_problems({f"panel query {i}": expr for i, expr in enumerate(dashboard_exprs())}) == {}
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(dashboard_exprs())]
    promtool_check(tmp_path, [{"name": "dashboard", "rules": rules}])


# --- Temporal ---------------------------------------------------------------------------------------------


@needs_kubectl
def test_temporal_values_register_the_search_attributes_of_the_workflows() -> None:
    values = yaml.safe_load(TEMPORAL_VALUES.read_text())
    stores = values["server"]["config"]["persistence"]["datastores"]
    assert {stores[s]["sql"]["pluginName"] for s in ("default", "visibility")} == {"postgres12"}
    assert [n["name"] for n in values["server"]["config"]["namespaces"]["namespace"]] == [
        config()["TEMPORAL_NAMESPACE"]
    ]
    assert values["server"]["tls"]["frontend"]["enabled"] is True
    job = "\n".join(values["extraObjects"])
    registered = dict(re.findall(r"--name (\w+) --type (\w+)", job))
    assert registered == SEARCH_ATTRIBUTES
    assert f"--namespace {config()['TEMPORAL_NAMESPACE']} " in job


def test_docs_name_the_temporal_values_that_exist() -> None:
    text = OPERATIONS.read_text()
    assert "temporal-values.yaml" not in text
    assert "deploy/temporal/values.yaml" in text

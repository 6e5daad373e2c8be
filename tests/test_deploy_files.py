"""The deploy files, read as Kubernetes and compose would read them (no cluster here).

What an operator applies must mean what the docs say: every variable a manifest sets is one
Companion reads, the Discord StatefulSet's pods run every shard exactly once and no Slack,
and the Services reach only the pods meant for them.
"""

from __future__ import annotations

import pytest
import yaml
from aiohttp import web

from bot.health import add_health_routes
from bot.settings import Settings
from tests.conftest import ROOT
from tests.test_docs import settings_read

K8S = ROOT / "deploy" / "k8s"
FOR_POSTGRES = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}  # postgres.yaml's own


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def one(name: str, kind: str) -> dict:
    (found,) = [d for d in documents(name) if d["kind"] == kind]
    return found


def container(workload: dict) -> dict:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return only


def env_of(workload: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container(workload).get("env", [])}


def test_every_variable_the_manifests_set_is_one_companion_reads():
    known = settings_read() | {"DATABASE_URL"}
    config = one("configmap.yaml", "ConfigMap")["data"]
    secret = one("secret.example.yaml", "Secret")["stringData"]
    derived = {"POD_INDEX"}  # the StatefulSet's ordinal, used inside COMPANION_DISCORD_SHARDS
    pods = set(env_of(one("deployment.yaml", "Deployment")))
    pods |= set(env_of(one("discord-shards.yaml", "StatefulSet"))) - derived
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    bot = set(compose["services"]["bot"].get("environment", {}))
    unknown = sorted((set(config) | (set(secret) - FOR_POSTGRES) | pods | bot) - known)
    assert unknown == [], f"the deploy files set variables Companion never reads: {unknown}"


def test_the_discord_statefulset_runs_every_shard_once_and_no_slack():
    shards = one("discord-shards.yaml", "StatefulSet")
    replicas = shards["spec"]["replicas"]
    env = env_of(shards)
    ordinal = env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ordinal == "metadata.labels['apps.kubernetes.io/pod-index']"
    template = env["COMPANION_DISCORD_SHARDS"]["value"]
    assert "$(POD_INDEX)" in template  # Kubernetes expands $(NAME) of an earlier variable

    # A Secret with every Slack mode filled in, as one shared with the Slack Deployment is.
    secret = {k: "x" for k in one("secret.example.yaml", "Secret")["stringData"]}
    ran: list[int] = []
    for pod in range(replicas):
        pod_env = {**secret, **{k: e.get("value", "") for k, e in env.items()}}
        pod_env["COMPANION_DISCORD_SHARDS"] = template.replace("$(POD_INDEX)", str(pod))
        settings = Settings.from_env(pod_env)
        shards_of_pod = settings.discord_shards
        assert shards_of_pod is not None and shards_of_pod.ids is not None
        assert shards_of_pod.count == replicas, "keep replicas equal to the shard count"
        ran.extend(shards_of_pod.ids)
        assert not settings.slack, f"pod {pod} would also serve Slack"
        assert settings.discord_token
    assert sorted(ran) == list(range(replicas))


@pytest.mark.parametrize("service", ["service.yaml", "discord-shards.yaml"])
def test_each_service_reaches_only_its_own_pods(service):
    selector = one(service, "Service")["spec"]["selector"]
    workloads = [one("deployment.yaml", "Deployment"), one("discord-shards.yaml", "StatefulSet")]
    workloads += [one("postgres.yaml", "StatefulSet")]
    reached = [
        w["metadata"]["name"]
        for w in workloads
        if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(reached) == 1, f"{service} selects the pods of {reached}"
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_probes_and_ports_are_the_ones_companion_serves():
    data = one("configmap.yaml", "ConfigMap")["data"]
    port, ops = int(data["COMPANION_HTTP_PORT"]), int(data["COMPANION_OPS_PORT"])
    assert Settings.from_env({"OPENAI_API_KEY": "x"}).http_port == port  # compose's default
    assert Settings.from_env(data | {"OPENAI_API_KEY": "x"}).ops_public is False
    public = add_health_routes(web.Application(), health=None, details=False)  # type: ignore[arg-type]
    served = {route.resource.canonical for route in public.router.routes() if route.resource}
    assert "/metrics" not in served  # issue 27, finding 9: only on the ops port
    for workload in (
        one("deployment.yaml", "Deployment"),
        one("discord-shards.yaml", "StatefulSet"),
    ):
        spec = container(workload)
        assert {p["name"]: p["containerPort"] for p in spec["ports"]} == {"http": port, "ops": ops}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert spec[probe]["httpGet"]["path"] in served, f"{probe} asks for a page not served"

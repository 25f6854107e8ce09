"""The executor on Pods: the same results, statuses and refusals as on Docker, with the
cluster enforcing the policy (PodSecurity, RBAC) and the bot's own identity driving it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from bot.ops.doctor import _kubernetes
from bot.sandbox_words import spoken
from bot.settings import Settings, load_settings
from executor import Executor, PoolSettings, Status, default_tag
from executor.kubernetes_backend import KubernetesBackend, pod_manifest
from executor.limits import SandboxLimits
from tests.kubernetes.conftest import (
    NAMESPACE,
    TEST_INSTANCE,
    bot_client,
    make_executor,
    sandbox_pods,
    settings,
    wait_until,
)
from tests.support.network import listening_on_host, reach_code

pytestmark = pytest.mark.kubernetes


def test_the_sandbox_namespace_refuses_a_privileged_pod(
    admin: k8s.ApiClient, deployed: str
) -> None:
    manifest = pod_manifest(default_tag(), "privileged", SandboxLimits(), {}, settings("unused"))
    container = manifest["spec"]["containers"][0]
    for change in (
        {"privileged": True, "allowPrivilegeEscalation": True},
        {"runAsUser": 0, "runAsNonRoot": False},
        {"capabilities": {"add": ["SYS_ADMIN"]}},
    ):
        container["securityContext"] = {**container["securityContext"], **change}
        with pytest.raises(ApiException) as refused:
            k8s.CoreV1Api(admin).create_namespaced_pod(NAMESPACE, manifest)
        assert refused.value.status == 403
        assert "violates PodSecurity" in refused.value.body


def test_the_bots_identity_runs_sandboxes_and_nothing_more(bot_kubeconfig: str) -> None:
    with bot_client(bot_kubeconfig) as api:
        core = k8s.CoreV1Api(api)
        core.list_namespaced_pod(NAMESPACE)  # allowed
        for forbidden in (
            lambda: core.list_namespaced_secret(NAMESPACE),
            lambda: core.list_namespaced_secret("cellmate"),
            lambda: core.list_namespaced_pod("default"),
            lambda: core.create_namespaced_pod("default", {"metadata": {"name": "x"}}),
            lambda: core.list_namespaced_config_map(NAMESPACE),
            lambda: k8s.RbacAuthorizationV1Api(api).list_namespaced_role(NAMESPACE),
        ):
            with pytest.raises(ApiException) as refused:
                forbidden()
            assert refused.value.status == 403


async def test_a_notebook_run_returns_output_and_files_in_a_locked_down_pod(
    bot_kubeconfig: str, runtime: str
) -> None:
    probe = (
        "import os\n"
        "print('uid', os.getuid(), os.getgid())\n"
        "print('token', os.path.exists('/var/run/secrets/kubernetes.io'))\n"
        "words = ('TOKEN', 'SECRET', 'KEY', 'PASSWORD', 'OPENAI', 'SLACK', 'DISCORD', 'AZURE')\n"
        "print('env', sorted(k for k in os.environ if any(w in k.upper() for w in words)))\n"
        "try:\n    open('/etc/x', 'w')\nexcept OSError:\n    print('root', 'refused')\n"
    )
    async with listening_on_host() as listeners, make_executor(bot_kubeconfig, runtime) as ex:
        result = await ex.run_notebook(
            [
                "import pandas as pd\ndf = pd.read_csv('sales.csv')\nint(df.total.sum())",
                "df.to_csv('out/doubled.csv') if __import__('os').makedirs('out') is None "
                "else None",
                probe,
                reach_code(listeners.targets),
            ],
            files={"sales.csv": b"month,total\n1,10\n2,32\n"},
        )
    assert result.status is Status.OK, result.message
    assert result.results[0].text == "42"
    assert [f.path for f in result.files] == ["out/doubled.csv"]
    lines = result.stdout.splitlines()
    assert "uid 61000 61000" in lines
    assert "token False" in lines
    assert "env []" in lines
    assert "root refused" in lines
    # Neither the test's listeners on the host's addresses nor any route out of the Pod's
    # subnet (a default route, a DNS server) are within reach.
    network = json.loads(lines[-1])
    assert "connected" not in network["outcomes"].values(), network
    assert listeners.reached_by == []
    assert network["default_route"] is False
    assert network["routed_dns_servers"] == []
    assert result.runtime == runtime


async def test_code_that_ignores_the_time_limit_is_killed_and_the_next_run_says_so(
    bot_kubeconfig: str,
) -> None:
    async with make_executor(bot_kubeconfig, timeout_s=3, interrupt_grace_s=1) as executor:
        session = executor.session("stubborn")
        await session.run("precious = 1")
        result = await session.run(
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
        )
        assert result.status is Status.TIMEOUT
        assert "it was stopped" in result.message
        after = spoken(await session.run("'precious' in globals()"))
        assert after.session_restarted
        assert after.results[-1].text == "False"
        assert "the previous run was stopped at the time limit" in after.message


async def test_a_pod_deleted_from_outside_gives_a_new_session_that_says_so(
    admin: k8s.ApiClient, executor: Executor
) -> None:
    session = executor.session("deleted")
    await session.run("precious = 1")
    (name,) = sandbox_pods(admin)
    k8s.CoreV1Api(admin).delete_namespaced_pod(name, NAMESPACE)
    # With no grace period the object goes at once, and the kubelet stops the container a
    # moment later: until then the session still answers, with its state.
    deadline = time.monotonic() + 60
    result = spoken(await session.run("'precious' in globals()"))
    while not result.session_restarted and time.monotonic() < deadline:
        assert result.status in (Status.OK, Status.KILLED), result
        await asyncio.sleep(0.5)
        result = spoken(await session.run("'precious' in globals()"))
    assert result.session_restarted, result
    assert result.results[-1].text == "False"
    assert "its sandbox had stopped" in result.message


async def test_links_fifos_and_oversized_files_do_not_come_back(executor: Executor) -> None:
    result = await executor.run_notebook(
        [
            "import os\n"
            "os.symlink('/etc/passwd', 'passwd')\n"
            "os.mkfifo('pipe')\n"
            "open('big.bin', 'wb').write(b'x' * (60 * 1000 * 1000))\n"
            "open('fine.txt', 'w').write('ok')"
        ]
    )
    assert result.status is Status.OK, result.message
    assert [(f.path, f.content) for f in result.files] == [("fine.txt", b"ok")]
    skipped = {s.path: s.reason for s in result.skipped_files}
    assert "big.bin" in skipped
    assert "passwd" in skipped
    assert "pipe" in skipped


async def test_leftovers_of_this_instance_are_removed_and_others_are_spared(
    admin: k8s.ApiClient, bot_kubeconfig: str
) -> None:
    other = f"{TEST_INSTANCE}-other"
    crashed = KubernetesBackend(default_tag(), settings(bot_kubeconfig), instance=TEST_INSTANCE)
    spared = KubernetesBackend(default_tag(), settings(bot_kubeconfig), instance=other)
    left: list[Any] = []
    try:
        left.append(await crashed.start(SandboxLimits(), None))
        kept = await spared.start(SandboxLimits(), None)
        left.append(kept)
        assert len(sandbox_pods(admin)) == 1
        async with make_executor(bot_kubeconfig) as executor:
            await wait_until(lambda: not sandbox_pods(admin), 30)
            assert sandbox_pods(admin, other) == [kept.id]
            result = await executor.session("after").run("1 + 1")
            assert result.results[-1].text == "2"
    finally:
        for sandbox in left:
            await sandbox.destroy()
        await crashed.close()
        await spared.close()


async def test_a_warm_pool_hands_out_ready_pods(bot_kubeconfig: str) -> None:
    async with make_executor(bot_kubeconfig, pool=PoolSettings(size=1, max_live=2)) as executor:
        await wait_until(lambda: executor.pool.ready == 1)
        result = await executor.session("warm").run("21 * 2")
        assert result.results[-1].text == "42"


async def test_doctor_checks_the_cluster_the_policy_and_a_real_sandbox(
    bot_kubeconfig: str, tmp_path: Path
) -> None:
    from tests.kubernetes.conftest import KUBECONFIG

    def chosen(kubeconfig: str, **extra: str) -> Settings:
        return load_settings(
            {
                "CELLMATE_EXECUTOR_BACKEND": "kubernetes",
                "CELLMATE_KUBERNETES_NAMESPACE": NAMESPACE,
                "CELLMATE_KUBERNETES_KUBECONFIG": kubeconfig,
                "CELLMATE_KUBERNETES_RUNTIME_CLASS_RUNC": "runc",
                "CELLMATE_KUBERNETES_IMAGE_PULL_POLICY": "Never",
                "CELLMATE_INSTANCE": TEST_INSTANCE,
                "CELLMATE_DATA_DIR": str(tmp_path),
                **extra,
            },
            env_file=None,
        )

    async def findings(settings: Settings) -> dict[str, tuple[bool, str]]:
        found = await _kubernetes(settings)
        return {f.name: (f.ok, f.detail) for f in found}

    as_admin = await findings(chosen(KUBECONFIG))
    assert as_admin["cluster"][0], as_admin
    assert as_admin["policy"] == (True, f"{NAMESPACE} enforces PodSecurity 'restricted'")
    assert as_admin["sandbox"][0], as_admin
    as_bot = await findings(chosen(bot_kubeconfig))
    assert as_bot["cluster"][0], as_bot
    assert not as_bot["policy"][0]  # the bot may not read namespaces: a note, not a failure
    assert as_bot["sandbox"][0], as_bot
    # Its runc sandboxes (the default runtime) share the Pod bridge, and no plugin enforces
    # the policies: tried, not guessed, the doctor says so.
    assert as_bot["isolation"][0] is False, as_bot["isolation"]
    assert "REACHED ANOTHER SANDBOX'S LISTENER BY POD ADDRESS" in as_bot["isolation"][1]
    # The kit's gVisor has no network at all: one sandbox cannot reach another.
    on_gvisor = await findings(chosen(bot_kubeconfig, CELLMATE_SANDBOX_RUNTIME="runsc"))
    assert on_gvisor["isolation"][0], on_gvisor["isolation"]
    assert "could not reach another sandbox's listener" in on_gvisor["isolation"][1]
    assert as_bot["restarts"] == (False, "sessions end when the bot restarts")
    keeping = await findings(chosen(bot_kubeconfig, CELLMATE_KUBERNETES_SESSION_SECRET="s" * 64))
    assert keeping["restarts"] == (True, "sessions carry on when the bot restarts")
    missing = await findings(chosen(bot_kubeconfig, CELLMATE_SANDBOX_IMAGE="cellmate-sandbox:none"))
    assert missing["sandbox"][0] is False
    assert "cannot run the sandbox image cellmate-sandbox:none" in missing["sandbox"][1]
    elsewhere = await findings(chosen(bot_kubeconfig, CELLMATE_KUBERNETES_NAMESPACE="default"))
    assert elsewhere["cluster"][0] is False
    assert "may not create pods" in elsewhere["cluster"][1]

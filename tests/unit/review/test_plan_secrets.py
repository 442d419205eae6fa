"""Secrets planted in a stack, a site and the pins appear in no plan, diff or other output of
the CLI (``versions show``, ``config check``, ``addons render``, ``cost``), in any format, nor
in the line that refuses a planted value.

The plants: credentials in URL userinfo (a chart repository in versions.yaml, a site's
package mirror), values under names that say password, token, secret or key (resource inputs
the stack program registers, Helm values), a Kubernetes Secret's data, and Pulumi secrets (an
``Output.secret`` input and export; the Grafana password pulumi-random generates, which the
mock runtime fills in as ``<name>-password``), and the prod stack's alerting credentials given
as Pulumi secret config (encrypted in the stack file as ``pulumi config set --secret`` writes
them, their plaintext in ``PULUMI_CONFIG`` as the engine would pass it to the program).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpuinfra import secrets
from tests.conftest import SUPPORT_TABLE_DAY, run_cli

PLANTED = {
    "url-userinfo-chart": "PlantedChartPw",
    "url-userinfo-mirror": "PlantedMirrorPw",
    "password-name": "PlantedDbPassword",
    "token-name": "PlantedApiToken",
    "secret-name": "PlantedClientSecret",
    "key-name": "PlantedAccessKey",
    "helm-value": "PlantedGrafanaPw",
    "kubernetes-secret": "PlantedSecretData",
    "pulumi-secret-input": "PlantedPulumiInput",
    "pulumi-secret-export": "PlantedPulumiExport",
    "random-password": "gpuinfra-prod-grafana-admin-password",
    "secret-config-pager": "PlantedPagerRoutingKey",
    "secret-config-slack": "https://hooks.slack.com/services/T0/B0/PlantedSlackHook",
    "secret-config-ciphertext": "v1:PlantedCiphertext",
}
# The plaintext of the prod stack's secret config, as the Pulumi engine hands it to the program.
SECRET_CONFIG = {
    "gpuinfra:alerting-pagerduty-routing-key": PLANTED["secret-config-pager"],
    "gpuinfra:alerting-slack-webhook-url": PLANTED["secret-config-slack"],
}

PROGRAM = f'''

_original_main = main


def main(cfg, pins, renders=None, **named):  # noqa: F811
    import pulumi_kubernetes as k8s

    _original_main(cfg, pins, renders, **named)
    k8s.core.v1.ConfigMap(
        "planted",
        metadata={{"name": "planted", "namespace": "default"}},
        data={{
            "db_password": "{PLANTED["password-name"]}",
            "apiToken": "{PLANTED["token-name"]}",
            "client-secret": "{PLANTED["secret-name"]}",
            "AWS_SECRET_ACCESS_KEY": "{PLANTED["key-name"]}",
            "mirror": "https://ci:{PLANTED["url-userinfo-mirror"]}@mirror.example.internal/",
        }},
    )
    k8s.core.v1.Secret(
        "planted",
        metadata={{"name": "planted", "namespace": "default"}},
        string_data={{"anything": "{PLANTED["kubernetes-secret"]}"}},
    )
    k8s.helm.v3.Release(
        "planted",
        chart="grafana",
        version="10.1.4",
        repository_opts={{"repo": "https://grafana.github.io/helm-charts"}},
        values={{"adminPassword": "{PLANTED["helm-value"]}"}},
    )
    k8s.core.v1.ConfigMap(
        "planted-pulumi-secret",
        metadata={{"name": "pulumi-secret", "namespace": "default"}},
        data={{"value": pulumi.Output.secret("{PLANTED["pulumi-secret-input"]}")}},
    )
    pulumi.export("planted", pulumi.Output.secret("{PLANTED["pulumi-secret-export"]}"))
'''


def plant(root: Path) -> None:
    versions = root / "versions.yaml"
    text = versions.read_text()
    chart = "repository: https://helm.ngc.nvidia.com/nvidia"
    assert chart in text
    versions.write_text(
        text.replace(
            chart,
            f"repository: https://deploy:{PLANTED['url-userinfo-chart']}@helm.ngc.nvidia.com/nvidia",
        )
    )
    stack = root / "stacks" / "Pulumi.prod.yaml"
    encrypted = "".join(
        f"  {key}:\n    secure: {PLANTED['secret-config-ciphertext']}{i}\n"
        for i, key in enumerate(SECRET_CONFIG)
    )
    stack.write_text(stack.read_text() + encrypted)
    program = root / "stacks" / "__main__.py"
    head, sep, tail = program.read_text().partition('\nif __name__ == "__main__":')
    program.write_text(head + PROGRAM + sep + tail)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory, base_repo: Path) -> dict[str, str]:
    """Every plan and diff of the planted repository, by command and format."""
    repo = tmp_path_factory.mktemp("planted") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(base_repo), str(repo)], check=True)
    plant(repo)
    found: dict[str, str] = {}
    commands: dict[str, list[str]] = {}
    site = ["--site", "inventory/example"]
    day = ["--as-of", SUPPORT_TABLE_DAY]
    for fmt in ("table", "json", "markdown"):
        commands[f"plan --stack prod --format {fmt}"] = [
            "plan",
            "--stack",
            "prod",
            "--format",
            fmt,
            *day,
        ]
        commands[f"plan --site --format {fmt}"] = ["plan", *site, "--format", fmt]
    # What CI posts on a pull request, and the other forms once each.
    diff = ["diff", "--base", "HEAD"]
    commands["diff --stack prod --format markdown"] = [
        *diff,
        "--stack",
        "prod",
        "--format",
        "markdown",
    ]
    commands["diff --site --format markdown"] = [*diff, *site, "--format", "markdown"]
    commands["diff --stack prod --format json"] = [*diff, "--stack", "prod", "--format", "json"]
    commands["diff --site --format table"] = [*diff, *site, "--format", "table"]
    # Everything else that reads the planted files and prints.
    for fmt in ("table", "json"):
        commands[f"versions show --format {fmt}"] = ["versions", "show", "--format", fmt]
    commands["versions check"] = ["versions", "check"]
    commands["config check --stack prod"] = ["config", "check", "--stack", "prod", *day]
    commands["config check --site"] = ["config", "check", *site]
    commands["addons render --stack prod"] = ["addons", "render", "--stack", "prod"]
    commands["cost --stack prod"] = ["cost", "--stack", "prod"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PULUMI_CONFIG", json.dumps(SECRET_CONFIG))
        for label, args in commands.items():
            result = run_cli(*args, root=repo, cwd=repo)
            assert result.code in (0, 1), f"{label}: {result.stderr}"
            found[label] = result.stdout + result.stderr
    return found


ERROR_PLANTS = {
    "url-userinfo-in-a-refused-value": "PlantedArnPw",
    "secret-named-refused-value": "PlantedApiSecretKey",
    "secret-under-an-unknown-key": "PlantedExtraSecret",
}


@pytest.fixture(scope="module")
def error_lines(tmp_path_factory: pytest.TempPathFactory, base_repo: Path) -> dict[str, str]:
    """What config check and plan print when they refuse a planted value: a URL with a login
    where an ARN belongs, and a bad value under a name that says secret."""
    repo = tmp_path_factory.mktemp("planted-errors") / "repo"
    subprocess.run(["git", "clone", "--quiet", str(base_repo), str(repo)], check=True)
    stack = repo / "stacks" / "Pulumi.prod.yaml"
    arn = "adminRoleArn: arn:aws:iam::123456789012:role/gpuinfra-admin"
    assert arn in stack.read_text()
    login = f"adminRoleArn: https://ci:{ERROR_PLANTS['url-userinfo-in-a-refused-value']}@x.example/"
    stack.write_text(stack.read_text().replace(arn, login))
    alerting = repo / "inventory" / "example" / "group_vars" / "all" / "prometheus_stack.yml"
    key = "api_secret_key: wecom-api-secret"
    assert key in alerting.read_text()
    bad = (
        f'api_secret_key: "{ERROR_PLANTS["secret-named-refused-value"]} !"\n'
        f"      api_secret: {ERROR_PLANTS['secret-under-an-unknown-key']}"
    )
    alerting.write_text(alerting.read_text().replace(key, bad))
    found: dict[str, str] = {}
    for argv in (("config", "check"), ("plan",)):
        for target in (("--stack", "prod"), ("--site", "inventory/example")):
            result = run_cli(*argv, *target, root=repo, cwd=repo)
            label = " ".join((*argv, *target))
            assert result.code == 2, f"{label}: {result.stderr}"
            found[label] = result.stdout + result.stderr
    return found


def test_refusals_still_say_which_key_and_why(error_lines: dict[str, str]) -> None:
    stack = error_lines["config check --stack prod"]
    assert "config.gpuinfra:cluster.adminRoleArn: string should match pattern" in stack
    assert "got 'https://<redacted>@x.example/'" in stack
    site = error_lines["config check --site inventory/example"]
    assert "receivers[1].wecom.api_secret_key: string should match pattern" in site
    assert "got '<redacted>'" in site
    # A key no receiver type knows is one line too, not a defect's traceback.
    assert "receivers[1].wecom.api_secret: unknown key 'api_secret'" in site
    assert "Traceback" not in site and "internal error" not in site


@pytest.mark.parametrize(
    ("path", "message", "shown"),
    [
        ("a.db_password", "got 'hunter2'", "got '<redacted>'"),
        ("a.db_password", 'got "it\'s"', "got '<redacted>'"),
        ("tags.db_password", "unknown key 'db_password' (allowed: 'team')", None),
        (
            "a.mirror",
            "'https://u:p@m.example/' is not allowed",
            "'https://<redacted>@m.example/' is not allowed",
        ),
        ("a.mirror", "got 'plain'", None),
    ],
)
def test_error_messages_lose_secrets_and_keep_key_names(
    path: str, message: str, shown: str | None
) -> None:
    assert secrets.redact_message(path, message) == (shown or message)


@pytest.mark.parametrize("kind", sorted(ERROR_PLANTS))
def test_no_planted_secret_in_any_refusal(error_lines: dict[str, str], kind: str) -> None:
    value = ERROR_PLANTS[kind]
    leaked = [label for label, text in error_lines.items() if value in text]
    assert leaked == [], f"{kind} ({value}) appears in {leaked}"


def test_the_plants_reach_the_plans_as_redacted(outputs: dict[str, str]) -> None:
    """The planted values are there to be hidden: the plans show where they were."""
    plan = outputs["plan --stack prod --format json"]
    assert '"planted": "[secret]"' in plan
    # The alerting Secret is planned, made from the secret config, its data a Pulumi secret.
    resources = json.loads(plan)["resources"]
    (alerting,) = [
        r for r in resources if r["properties"].get("metadata", {}).get("name") == "alerting"
    ]
    assert alerting["type"] == "kubernetes:core/v1:Secret"
    assert alerting["properties"]["stringData"] == "[secret]"
    assert '"db_password": "<redacted>"' in plan
    assert "https://<redacted>@helm.ngc.nvidia.com/nvidia" in plan
    assert "https://<redacted>@mirror.example.internal/" in plan
    assert "<redacted>" in outputs["diff --stack prod --format markdown"]
    # A site's repository URL may carry no login at all (see the test below); its chart URL,
    # from versions.yaml, is redacted in the site's plan too.
    assert "https://<redacted>@helm.ngc.nvidia.com/nvidia" in outputs["plan --site --format json"]


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_no_planted_secret_in_any_output(outputs: dict[str, str], kind: str) -> None:
    value = PLANTED[kind]
    leaked = [label for label, text in outputs.items() if value in text]
    assert leaked == [], f"{kind} ({value}) appears in {leaked}"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("password", True),
        ("db_password", True),
        ("adminPassword", True),
        ("apiToken", True),
        ("client-secret", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("api_key", True),
        ("privateKey", True),
        ("secretName", False),
        ("existingSecret", False),
        ("password_file", False),
        ("nvidia_driver_cuda_repo_key_url", False),
        ("passwordKey", False),
        ("key", False),
        ("kmsKeyId", False),
        ("enableKeyRotation", False),
        ("httpTokens", False),
        ("automountServiceAccountToken", True),
    ],
)
def test_which_names_say_they_hold_a_secret(name: str, secret: bool) -> None:
    assert secrets.secret_name(name) is secret


def test_redaction_keeps_flags_and_markers_and_is_idempotent() -> None:
    doc = {
        "automountServiceAccountToken": False,
        "token": "<computed>",
        "password": "[secret]",
        "url": "git+ssh://git:hunter2@example.com/repo.git and https://example.com/x@y",
        "apiVersion": "v1",
    }
    once = secrets.redact(doc)
    assert once == {
        "automountServiceAccountToken": False,
        "token": "<computed>",
        "password": "[secret]",
        "url": "git+ssh://<redacted>@example.com/repo.git and https://example.com/x@y",
        "apiVersion": "v1",
    }
    assert secrets.redact(once) == once


def test_a_login_in_a_site_mirror_url_is_refused_without_printing_it(
    tmp_path: Path, base_repo: Path
) -> None:
    """A repository URL with a login is refused (apt's auth.conf.d holds logins), and the
    refusal names the URL without the password."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(base_repo), str(repo)], check=True)
    toolkit = repo / "inventory" / "example" / "group_vars" / "gpu_nodes" / "container_toolkit.yml"
    toolkit.write_text(
        toolkit.read_text()
        + "nvidia_container_toolkit_repo_url: "
        + f"https://deploy:{PLANTED['url-userinfo-mirror']}@mirror.example.internal/deb/amd64\n"
    )
    for argv in (("config", "check"), ("plan",)):
        result = run_cli(*argv, "--site", "inventory/example", root=repo, cwd=repo)
        assert result.code == 2, result.stderr
        assert "carries credentials" in result.stderr
        assert "<redacted>@mirror.example.internal" in result.stderr
        assert PLANTED["url-userinfo-mirror"] not in result.stdout + result.stderr

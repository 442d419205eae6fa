"""A refusal about a key whose name says secret hides the value and keeps the program's words.

Hidden: what the user wrote under the key (a credential pasted where a Secret's key name
belongs is exactly the value a refusal would echo). Shown: the key path, the pattern the value
must match, a did-you-mean suggestion and what is allowed, such as the names of the secret
config entries a stack's Secret reads (names, not secrets).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuinfra import secrets, site, versions
from tests.conftest import run_main, user_repo

PLANTED = "R0ut1ngKey/Planted+Value"
PROD = "stacks/Pulumi.prod.yaml"
ALERTING = "inventory/example/group_vars/all/prometheus_stack.yml"
KEY_PATTERN = "string should match pattern '^[-._a-zA-Z0-9]+$'"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The files a user edits, copied; what the checks only read, linked."""
    root = user_repo(tmp_path / "repo", monkeypatch, site=True)
    versions.pinned.cache_clear()
    site.role_specs.cache_clear()
    yield root
    versions.pinned.cache_clear()
    site.role_specs.cache_clear()


def edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{rel} has no {old!r}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run_main(capsys, *argv)
    assert code == 2, err
    assert PLANTED not in out + err
    (line,) = err.splitlines()
    return line


@pytest.mark.parametrize(
    ("argv", "rel", "old", "new", "key"),
    [
        (
            ("config", "check", "--stack", "prod"),
            PROD,
            "routingKeyKey: pagerduty-routing-key",
            f'routingKeyKey: "{PLANTED}"',
            f"error: {PROD}: config.gpuinfra:addons.prometheusStack.alerting.receivers[0]"
            ".pagerduty.routingKeyKey",
        ),
        (
            ("config", "check", "--site", "inventory/example"),
            ALERTING,
            "routing_key_key: pagerduty-routing-key",
            f'routing_key_key: "{PLANTED}"',
            f"error: {ALERTING}: prometheus_stack_alerting.receivers[0].pagerduty.routing_key_key",
        ),
    ],
    ids=["stack", "site"],
)
def test_a_bad_secret_key_name_shows_the_pattern_not_the_value(
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    rel: str,
    old: str,
    new: str,
    key: str,
) -> None:
    edit(repo, rel, old, new)
    assert refusal(capsys, *argv) == f"{key}: {KEY_PATTERN}, got '<redacted>'"


def test_an_unread_secret_config_entry_names_the_entries_that_are_read(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(
        repo,
        PROD,
        "config:\n",
        f"config:\n  gpuinfra:alerting-pagerduty-routng-key:\n    secure: v1:{PLANTED}\n",
    )
    line = refusal(capsys, "config", "check", "--stack", "prod")
    assert line.startswith(
        f"error: {PROD}: config.gpuinfra:alerting-pagerduty-routng-key: secret config "
        "'alerting-pagerduty-routng-key' is read by no Secret; "
        "did you mean 'alerting-pagerduty-routing-key'? "
        "(allowed: 'alerting-pagerduty-routing-key' or 'alerting-slack-webhook-url')"
    ), line


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        # The value is hidden however it is written.
        ("got 'x (allowed: y)'", "got '<redacted>'"),
        ("got 'x', " + repr('it\'s "PlantedMixed"'), "got '<redacted>', '<redacted>'"),
        ("expected str, got 2417; quote it", "expected str, got '<redacted>'; quote it"),
        ("a Secret's value, got 'PlantedAfterProse'", "a Secret's value, got '<redacted>'"),
        ("got 'PlantedNeverClosed", "got '<redacted>'"),
        # What the program wrote stays: the pattern, a suggestion, what is allowed.
        (
            "string should match pattern '^[a-z]+$', got 'Planted!' (allowed: 'a' or 'b')",
            "string should match pattern '^[a-z]+$', got '<redacted>' (allowed: 'a' or 'b')",
        ),
        (
            "'Plantd' is not allowed; did you mean 'planted'? (allowed: 'planted')",
            "'<redacted>' is not allowed; did you mean 'planted'? (allowed: 'planted')",
        ),
    ],
)
def test_redact_message_hides_the_value_and_keeps_the_rest(message: str, shown: str) -> None:
    redacted = secrets.redact_message("receivers[0].routingKeyKey", message)
    assert redacted == shown
    assert "Planted" not in redacted and "2417" not in redacted

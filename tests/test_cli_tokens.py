"""``helix-dbos approver-token``: approver tokens for the server's secret, one per principal,
holding the roles given; a missing secret or tenant, or a bad duration, is one line (exit 2)."""

from __future__ import annotations

import pytest

from helix_dbos.cli import EXIT_OK, EXIT_USAGE, main
from helix_dbos.http import SessionTokens

SECRET = "t" * 40


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["approver-token", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_it_issues_one_token_per_principal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_AUTH_SECRET", SECRET)
    monkeypatch.setenv("HELIX_TENANT", "demo")
    code, out, _ = run(
        capsys, "--principal", "ann@example.com", "--principal", "bo@example.com",
        "--role", "finance", "--role", "cfo",
    )  # fmt: skip
    assert code == EXIT_OK
    claims = [SessionTokens(SECRET).verify_approver(t) for t in out.split()]
    assert claims == [
        ("demo", "ann@example.com", ("cfo", "finance")),
        ("demo", "bo@example.com", ("cfo", "finance")),
    ]
    code, out, _ = run(capsys, "--principal", "cy", "--tenant", "acme", "--ttl", "90m")
    assert SessionTokens(SECRET).verify_approver(out.strip()) == ("acme", "cy", ())
    assert SessionTokens("x" * 40).verify_approver(out.strip()) is None  # another secret


def test_what_it_refuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HELIX_AUTH_SECRET", raising=False)
    monkeypatch.delenv("HELIX_TENANT", raising=False)
    code, _, err = run(capsys, "--principal", "ann", "--tenant", "demo")
    assert code == EXIT_USAGE and "HELIX_AUTH_SECRET" in err
    monkeypatch.setenv("HELIX_AUTH_SECRET", SECRET)
    code, _, err = run(capsys, "--principal", "ann")
    assert code == EXIT_USAGE and "--tenant" in err
    for ttl in ("soon", "0s", "never"):
        code, _, err = run(capsys, "--principal", "ann", "--tenant", "demo", "--ttl", ttl)
        assert code == EXIT_USAGE and "--ttl" in err, ttl
    code, _, err = run(capsys, "--principal", "ann", "--tenant", "demo", "--role", "")
    assert code == EXIT_USAGE and "roles" in err
    monkeypatch.setenv("HELIX_AUTH_SECRET", "short")
    code, _, err = run(capsys, "--principal", "ann", "--tenant", "demo")
    assert code == EXIT_USAGE and "32 bytes" in err

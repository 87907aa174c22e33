"""An enabled remote tier must be given ``tiers.remote.deployment``: with the old
default ("tiermem") two unrelated deployments that both kept it wrote under the
same names in a shared store and overwrote each other's values. The remote
tier is off by default, so the built-in config (``make serve``) needs no name."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import ValidationError

from tiermem.cli.serve import serve
from tiermem.server.config import load_config


def test_the_default_config_starts_without_a_deployment_name() -> None:
    remote = load_config().tiers.remote
    assert not remote.enabled and remote.deployment == ""


@pytest.mark.parametrize("deployment", [None, ""])
def test_an_enabled_remote_tier_without_a_name_is_a_config_error_naming_the_option(
    deployment: str | None,
) -> None:
    remote: dict[str, object] = {"enabled": True}
    if deployment is not None:
        remote["deployment"] = deployment
    with pytest.raises(ValidationError, match=r"tiers\.remote\.deployment"):
        load_config(tiers={"remote": remote})


def test_an_enabled_remote_tier_from_the_environment_needs_the_name_there_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIERMEM_TIERS__REMOTE__ENABLED", "true")
    with pytest.raises(ValidationError, match=r"tiers\.remote\.deployment"):
        load_config()
    monkeypatch.setenv("TIERMEM_TIERS__REMOTE__DEPLOYMENT", "prod-llama")
    assert load_config().tiers.remote.deployment == "prod-llama"


def test_serve_refuses_to_start_and_says_which_option_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_daemon(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("serve built a daemon from a config it should refuse")

    monkeypatch.setattr("tiermem.server.app.Daemon", no_daemon)
    config = tmp_path / "tiermem.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[tiers.remote]\nenabled = true\n')
    args = argparse.Namespace(
        config=str(config), data_dir="", listen="127.0.0.1:0", metrics_listen="", log_json=False
    )
    assert serve(args) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and "tiers.remote.deployment" in err
    assert not (tmp_path / "data").exists()  # refused before opening anything


def test_a_named_deployment_is_accepted_and_a_bad_name_is_not() -> None:
    ok = load_config(tiers={"remote": {"enabled": True, "deployment": "prod-llama.v2"}})
    assert ok.tiers.remote.deployment == "prod-llama.v2"
    with pytest.raises(ValidationError, match="deployment"):
        load_config(tiers={"remote": {"enabled": True, "deployment": "a/b"}})

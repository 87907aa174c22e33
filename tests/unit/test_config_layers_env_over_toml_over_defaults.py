from pathlib import Path

import pytest
from pydantic import ValidationError

from tiermem.server.config import load_config


def test_defaults_are_valid() -> None:
    cfg = load_config()
    assert cfg.tiers.dram.capacity_bytes == 1 << 30
    assert cfg.tiers.ssd.enabled and not cfg.tiers.hbm.enabled


def test_toml_then_env_then_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "t.toml"
    toml.write_text(
        'data_dir = "/srv/x"\n[tiers.dram]\ncapacity_bytes = "256MiB"\n[server]\nmax_workers = 8\n'
    )
    cfg = load_config(toml)
    assert cfg.tiers.dram.capacity_bytes == 256 << 20 and cfg.server.max_workers == 8
    monkeypatch.setenv("TIERMEM_SERVER__MAX_WORKERS", "16")
    assert load_config(toml).server.max_workers == 16
    assert load_config(toml, server={"max_workers": 4}).server.max_workers == 4
    assert str(load_config(toml).data_dir) == "/srv/x"


def test_bad_values_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="low_watermark"):
        load_config(tiers={"dram": {"high_watermark": 0.5, "low_watermark": 0.9}})
    with pytest.raises(ValidationError, match="max_workers"):
        load_config(server={"max_workers": 0})
    with pytest.raises(ValidationError, match=r"unknown_field|extra"):
        load_config(tiers={"dram": {"unknown_field": 1}})
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.toml")


def test_every_config_field_is_documented() -> None:
    from pydantic import BaseModel

    from tiermem.server.config import Config

    def walk(model: type[BaseModel], path: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{path}{name}.")
            else:
                assert field.description, f"{path}{name} has no docstring"

    walk(Config, "")

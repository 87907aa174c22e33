import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = config["package-dir"]
    found = set()
    for package, folder in roots.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            if (
                any(part in ("server", "client", "placement") for part in rel.parts[:1])
                and package == "tiermem"
            ):
                continue  # reached through the symlinks, mapped separately
            found.add(".".join([package, *rel.parts]))
    assert found == listed, {"missing": found - listed, "stale": listed - found}

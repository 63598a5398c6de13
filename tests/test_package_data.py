"""Every C source that an op compiles on first use ships in the package (pyproject's package-data): a wheel
without one would silently fall back to the slower PyTorch path."""

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_c_source_is_package_data():
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f"{pkg.replace('.', '/')}/{name}" for pkg, names in listed.items() for name in names}
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "seqzoo").rglob("*.c")}
    assert sources, "no C sources found: the test looks in the wrong place"
    assert sources <= shipped, f"C sources missing from package-data: {sorted(sources - shipped)}"

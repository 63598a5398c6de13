"""Every shipped C file builds where a C compiler exists; without one the ops fall back, logged.

The ops' C paths are their CPU defaults and fall back to PyTorch when the library is unavailable, so a C file that
stopped compiling would otherwise leave every test green (the C-vs-PyTorch comparisons skipped, or comparing the
PyTorch path with itself). ``NativeLibrary.build_error`` separates "no compiler here" (a skip) from "a compiler
refused the file" (a failure).
"""

import importlib
import logging
import os
import re
import shutil
from pathlib import Path

import pytest

from seqzoo.ops import native_build
from seqzoo.ops.native_build import BuildError, NativeLibrary, compiled, compiler

PACKAGE = Path(native_build.__file__).resolve().parents[1]
C_FILES = sorted(PACKAGE.rglob("*.c"))
HAS_CC = shutil.which(compiler()) is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason=f"no C compiler {compiler()!r} on this machine")


def _wrapper_module(source) -> str:
    """The module beside ``source`` that builds it (``Path(__file__).with_name("<file>.c")``)."""
    for py in sorted(source.parent.glob("*.py")):
        if re.search(rf'with_name\("{re.escape(source.name)}"\)', py.read_text()):
            return ".".join(py.relative_to(PACKAGE.parent).with_suffix("").parts)
    raise AssertionError(f"no module beside {source} builds it")


def test_the_package_ships_its_c_files():
    names = {str(f.relative_to(PACKAGE)) for f in C_FILES}
    assert {"ops/gateloop/scores.c", "ops/gateloop/levels.c", "ops/gateloop/rotation.c", "ops/mlstm/headwise.c",
            "ops/mlstm/output.c", "ops/slstm/native.c", "ops/causal_conv/native.c"} <= names  # fmt: skip


@needs_cc
def test_every_shipped_c_file_compiles_where_a_compiler_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQZOO_CACHE", str(tmp_path))  # a fresh cache: each file is really compiled
    failures = []
    for source in C_FILES:
        try:
            assert compiled(source, source.stem).exists()
        except BuildError as e:
            failures.append(f"{source.relative_to(PACKAGE)}: {e}")
    assert not failures, "\n".join(failures)


@needs_cc
@pytest.mark.skipif(os.environ.get("SEQZOO_NATIVE") == "0", reason="the C paths are turned off by SEQZOO_NATIVE=0")
@pytest.mark.parametrize("source", C_FILES, ids=lambda f: str(f.relative_to(PACKAGE)))
def test_every_c_library_loads_with_the_functions_its_wrapper_calls(source):
    importlib.import_module(_wrapper_module(source))
    (lib,) = [lib for lib in native_build.LIBRARIES.values() if lib.source == source]
    assert lib.build_error() is None
    assert lib.library() is not None, lib.unavailable()


@needs_cc
def test_a_c_file_that_does_not_build_is_a_build_error_logged_as_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SEQZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SEQZOO_NATIVE", raising=False)
    monkeypatch.setattr(native_build, "LIBRARIES", {})
    bad = tmp_path / "broken.c"
    bad.write_text('#error "a shipped file that stopped compiling"\nint f(void) { return 0; }\n')
    lib = NativeLibrary(bad, "broken", {"f": []})
    with caplog.at_level(logging.INFO, logger="seqzoo.native"):
        assert lib.library() is None
    assert "stopped compiling" in lib.build_error() and lib.unavailable() == lib.build_error()
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and "broken.c" in caplog.text
    assert native_build.LIBRARIES == {"broken": lib}
    assert not list((tmp_path / "cache").glob("native/*.so"))  # nothing half-written left behind


def test_no_compiler_or_turned_off_is_not_a_build_error_and_is_logged_at_info(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SEQZOO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native_build, "LIBRARIES", {})
    source = PACKAGE / "ops" / "mlstm" / "output.c"
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with caplog.at_level(logging.INFO, logger="seqzoo.native"):
        missing = NativeLibrary(source, "missing-cc", {})
        assert missing.library() is None and missing.build_error() is None
        assert "cannot run the C compiler" in missing.unavailable()
        monkeypatch.delenv("CC")
        monkeypatch.setenv("SEQZOO_NATIVE", "0")
        off = NativeLibrary(source, "turned-off", {})
        assert off.library() is None and off.build_error() is None
        assert off.unavailable() == "turned off by SEQZOO_NATIVE=0"
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]


@needs_cc
def test_a_cache_folder_that_cannot_be_written_falls_back_without_a_build_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SEQZOO_NATIVE", raising=False)
    monkeypatch.setattr(native_build, "LIBRARIES", {})
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SEQZOO_CACHE", str(tmp_path / "a-file"))  # the cache would be a folder inside a file
    lib = NativeLibrary(PACKAGE / "ops" / "mlstm" / "output.c", "unwritable-cache", {})
    assert lib.library() is None and lib.build_error() is None
    assert "cannot write the build cache" in lib.unavailable()

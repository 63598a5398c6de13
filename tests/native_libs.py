"""Skipping a test of a C path: allowed only where no C compiler runs (or ``SEQZOO_NATIVE=0``); a shipped C file
that fails to build with a compiler present fails the test instead (``NativeLibrary.build_error``)."""

import pytest

from seqzoo.ops.native_build import NativeLibrary


def _skippable(lib: NativeLibrary) -> bool:
    return lib.library() is None and lib.build_error() is None


def require_built(lib: NativeLibrary) -> None:
    """Inside a test or fixture: return when ``lib`` is built, skip without a compiler, fail on a build error."""
    if lib.library() is not None:
        return
    why = lib.build_error()
    if why is not None:
        pytest.fail(f"{lib.source.name} does not build although a C compiler is present: {why}")
    pytest.skip(f"{lib.source.name} not built: {lib.unavailable()}")


def needs_built(lib: NativeLibrary) -> pytest.MarkDecorator:
    """A mark for tests of ``lib``'s C path: skipped without a compiler; run (and failing) when a compiler is
    present and the file does not build."""
    return pytest.mark.skipif(_skippable(lib), reason=f"no C compiler builds {lib.source.name}: {lib.unavailable()}")

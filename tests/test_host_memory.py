"""``seqzoo.host_memory``: freed blocks stay in the process (no page faults when a step reallocates them)."""

import os
import platform
import subprocess
import sys

import pytest

from seqzoo.errors import InputError
from seqzoo.host_memory import retain_freed_memory

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="mallopt needs Linux with glibc"
)

# a fresh process: apply the setting as the command line does, then allocate, touch and free a 64 MiB tensor four
# times and report the minor page faults of the last allocation (what a training step pays once the heap has
# settled: how many rounds that takes depends on what else the process allocated in between, one or two here)
_PROBE = """
import resource, torch
from seqzoo.host_memory import apply_malloc_setting
print("applied", apply_malloc_setting())
def touch():
    x = torch.empty(16 * 2**20)  # 64 MiB of float32
    x.fill_(1.0)
    del x
for _ in range(3):
    touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print("faults", resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(setting: str) -> tuple[str, int]:
    env = {**os.environ, "SEQZOO_MALLOC": setting}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True).stdout
    lines = dict(line.split() for line in out.splitlines())
    return lines["applied"], int(lines["faults"])


@glibc
def test_retained_memory_is_reused_without_page_faults():
    pages = 64 * 2**20 // 4096
    applied, faults = _probe("retain")
    assert applied == "True"
    assert faults < pages // 10, f"{faults} faults for {pages} pages of reallocated memory"
    applied, faults = _probe("system")  # glibc's default returns the block to the kernel: every page faults again
    assert applied == "False"
    assert faults > pages // 2, f"only {faults} faults for {pages} pages: the control does not show the effect"


def test_bad_setting_and_threshold_are_refused(monkeypatch):
    from seqzoo.host_memory import apply_malloc_setting

    monkeypatch.setenv("SEQZOO_MALLOC", "always")
    with pytest.raises(InputError, match="SEQZOO_MALLOC must be one of retain, system"):
        apply_malloc_setting()
    for bad in (0, -5, 2**31, 1.5, True):
        with pytest.raises(InputError, match="threshold"):
            retain_freed_memory(bad)


def test_command_line_reports_a_bad_setting_in_one_line():
    env = {**os.environ, "SEQZOO_MALLOC": "always"}
    proc = subprocess.run(
        [sys.executable, "-m", "seqzoo", "list", "mixers"], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "SEQZOO_MALLOC must be one of retain, system" in proc.stderr
    assert "Traceback" not in proc.stderr

"""tools/profile_step.py (the command behind docs/benchmarks.md "Why a conv kernel") at a tiny size: a model and a
mixer profile print their rows with shares that add up, and bad input is one line on stderr with exit code 2."""

import re

from helpers import run_tool

ROW = re.compile(r"^\| `(.+)` \| ([0-9.]+) \| ([0-9.]+) % \|$")


def tool(*args):
    return run_tool("profile_step.py", *args)


def rows(stdout: str) -> list[tuple[str, float, float]]:
    return [(m[1], float(m[2]), float(m[3])) for m in map(ROW.match, stdout.splitlines()) if m]


def test_model_and_mixer_profiles_print_their_top_ops():
    model = tool("--model", "hawk-tiny", "--batch", "1", "--T", "32", "--steps", "1", "--top", "200")
    assert model.returncode == 0, model.stderr
    got = rows(model.stdout)
    assert 95.0 <= sum(share for _, _, share in got) <= 100.5  # every op with self time (each rounded to 0.1 %)
    assert any(name.startswith("aten::") for name, _, _ in got)
    assert [share for _, _, share in got] == sorted((share for _, _, share in got), reverse=True)
    mixer = tool("--mixer", "local_attention", "--d-model", "32", "--mixer-arg", "n_heads=4", "--mixer-arg",
                 "window=8", "--batch", "1", "--T", "32", "--steps", "1", "--top", "3")  # fmt: skip
    assert mixer.returncode == 0, mixer.stderr
    assert len(rows(mixer.stdout)) == 3


def test_bad_input_is_one_line_and_exit_code_2():
    for args, arg in [
        (["--model", "no-such-preset"], "--model"),
        (["--mixer", "no_such_mixer"], "--mixer"),
        (["--model", "hawk-tiny", "--T", "0"], "--batch and --T"),
        (["--mixer", "attention", "--mixer-arg", "n_heads"], "--mixer-arg"),
    ]:
        res = tool(*args)
        assert res.returncode == 2 and res.stderr.startswith(f"error: {arg}"), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1

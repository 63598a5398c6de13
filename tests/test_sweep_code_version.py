"""The sweep's code version follows every computing source: Python, the C files of the CPU paths, kernels/."""

import shutil

from seqzoo.sweep.grid import COMPUTE_PACKAGES, PACKAGE, _tree_hash


def _copy_of_the_package(tmp_path):
    """The package copied under ``tmp_path`` (caches left out)."""
    root = tmp_path / "seqzoo"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def _edited(path, extra):
    path.write_bytes(path.read_bytes() + extra)


def test_the_code_version_changes_with_a_c_file_or_a_kernels_file_and_not_with_a_readme(tmp_path):
    root = _copy_of_the_package(tmp_path)
    before = _tree_hash(root)
    assert before == _tree_hash(PACKAGE)  # the copy hashes as the package itself

    _edited(root / "ops" / "causal_conv" / "native.c", b"/* an edit of the default CPU path */\n")
    after_c = _tree_hash.__wrapped__(root)  # uncached: the same folder, new contents
    assert after_c != before

    _edited(root / "kernels" / "switch.py", b"# an edit of the kernels switch\n")
    after_kernels = _tree_hash.__wrapped__(root)
    assert after_kernels not in (before, after_c)

    _edited(root / "ops" / "mlstm" / "README.md", b"\nA sentence of prose.\n")
    assert _tree_hash.__wrapped__(root) == after_kernels  # docs change no number


def test_every_shipped_c_file_is_hashed():
    c_files = sorted(PACKAGE.rglob("*.c"))
    assert c_files, "the package ships C sources"
    assert all(f.relative_to(PACKAGE).parts[0] in COMPUTE_PACKAGES for f in c_files)

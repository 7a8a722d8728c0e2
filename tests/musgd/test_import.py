"""Import contracts: ``musgd`` without torch says what to install.

That ``wpgate`` and its command line never pull in torch is tests/wpgate/test_import.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import musgd


def _python(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )


def test_import_musgd_without_torch_says_how_to_install(tmp_path: Path) -> None:
    # A `torch` module that fails to import, first on sys.path, stands in for "not installed".
    (tmp_path / "torch.py").write_text("raise ImportError('No module named torch')\n")
    code = (
        "try:\n"
        "    import musgd\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('import musgd succeeded without torch')\n"
    )
    result = _python(code, extra_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'pip install "wpgate[optim]"' in result.stdout
    assert "PyTorch" in result.stdout


def test_the_fake_torch_is_what_made_the_import_fail(tmp_path: Path) -> None:
    # Control for the test above: the same subprocess without the fake imports musgd fine.
    result = _python("import musgd; print(musgd.MuSGD.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "MuSGD"


def test_public_api() -> None:
    assert set(musgd.__all__) >= {"MuSGD", "orthogonalize", "orthogonalize_batched", "param_groups"}
    for name in musgd.__all__:
        assert getattr(musgd, name) is not None

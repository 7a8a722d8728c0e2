"""Import contracts: ``musgd`` without torch says what to install.

That ``wpgate`` and its command line never pull in torch is tests/wpgate/test_import.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import musgd

# Put first on sys.meta_path by a sitecustomize: any import of torch fails as if not installed.
_BLOCK_TORCH = """\
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""
CPU_ROUTE = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def _python(*args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, check=False
    )


def _without_torch(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(_BLOCK_TORCH)
    return tmp_path


def test_import_musgd_without_torch_says_how_to_install(tmp_path: Path) -> None:
    code = (
        "try:\n"
        "    import musgd\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "    print(exc.__cause__, exc.__suppress_context__)\n"
        "else:\n"
        "    raise SystemExit('import musgd succeeded without torch')\n"
    )
    result = _python("-c", code, extra_path=_without_torch(tmp_path))
    assert result.returncode == 0, result.stderr
    message, chain = result.stdout.splitlines()
    assert "PyTorch" in message
    # The CPU wheels first (a plain torch requirement pulls the CUDA build), then the extra.
    assert message.index(CPU_ROUTE) < message.index('pip install "wpgate[optim]"')
    assert chain == "None True"  # one line: no "during handling of the above exception"


def test_a_musgd_command_without_torch_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    result = _python("-m", "musgd.bench", "--help", extra_path=_without_torch(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: musgd needs PyTorch")
    assert CPU_ROUTE in lines[0]


def test_the_fake_torch_is_what_made_the_import_fail(tmp_path: Path) -> None:
    # Control for the test above: the same subprocess without the fake imports musgd fine.
    result = _python("-c", "import musgd; print(musgd.MuSGD.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "MuSGD"


def test_public_api() -> None:
    assert set(musgd.__all__) >= {"MuSGD", "orthogonalize", "orthogonalize_batched", "param_groups"}
    for name in musgd.__all__:
        assert getattr(musgd, name) is not None

"""The test tiers of tests/conftest.py and pyproject.toml, in a scratch tree run by a real pytest:
a test gets its folder's tier unless its file marks one; no tier, two tiers or an unknown marker
stop the run."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


@pytest.fixture
def tree(pytester: pytest.Pytester) -> Path:
    """A scratch tests/ folder with the project's conftest and its registered markers."""
    markers = "".join(f"\n    {m}" for m in OPTIONS["markers"])
    pytester.makeini(f"[pytest]\naddopts = {' '.join(OPTIONS['addopts'])}\nmarkers ={markers}\n")
    tests = pytester.mkdir("tests")
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")
    for folder, body in {
        "unit": "def test_u():\n    pass\n",
        "integration": "def test_i():\n    pass\n",
        "infra": "def test_h():\n    pass\n",
    }.items():
        (tests / folder).mkdir()
        (tests / folder / f"test_{folder}.py").write_text(body)
    (tests / "unit" / "test_live.py").write_text(
        "import pytest\n\npytestmark = [pytest.mark.integration, pytest.mark.slow]\n\n\ndef test_live():\n    pass\n"
    )
    return tests


def _selected(pytester: pytest.Pytester, expr: str) -> list[str]:
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-m", expr, "tests")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), result.stdout.str() + result.stderr.str()
    return sorted(line for line in result.stdout.lines if "::" in line)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("unit", ["tests/unit/test_unit.py::test_u"]),
        ("integration", ["tests/integration/test_integration.py::test_i", "tests/unit/test_live.py::test_live"]),
        ("host", ["tests/infra/test_infra.py::test_h"]),
        ("integration and not slow", ["tests/integration/test_integration.py::test_i"]),
        ("not unit and not integration and not host", []),
    ],
)
def test_folder_tier_unless_the_file_marks_one(tree: Path, pytester: pytest.Pytester, expr: str,
                                               expected: list[str]) -> None:
    assert _selected(pytester, expr) == expected


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("other/test_x.py", "def test_x():\n    pass\n", "no tier marker"),
        ("unit/test_x.py", "import pytest\n\n\n@pytest.mark.integration\n@pytest.mark.host\ndef test_x():\n    pass\n",
         "more than one tier marker (host, integration)"),
        ("unit/test_x.py", "import pytest\n\n\n@pytest.mark.intgration\ndef test_x():\n    pass\n",
         "'intgration' not found in `markers`"),
    ],
)
def test_a_test_without_one_known_tier_stops_the_run(tree: Path, pytester: pytest.Pytester, path: str, body: str,
                                                     message: str) -> None:
    (tree / path).parent.mkdir(exist_ok=True)
    (tree / path).write_text(body)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "tests")
    assert result.ret != 0
    assert message in result.stdout.str() + result.stderr.str()

import re
from pathlib import Path

from click.testing import CliRunner

from streambhmm.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_demo_recovers_states():
    result = CliRunner().invoke(main, ["demo", "--bins-per-chromosome", "30000", "--seed", "1"])
    assert result.exit_code == 0, result.output
    err = float(re.search(r"methylation error \(sum \|p - p_hat\|\): ([0-9.]+)", result.output).group(1))
    assert err < 0.05


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^TEST_COMMAND='(.+)'$", ci, re.M).group(1)
    assert command in (ROOT / "README.md").read_text()

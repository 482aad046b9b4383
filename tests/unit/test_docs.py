"""The documentation: a README that is a front page, a site that builds with ``mkdocs build --strict``, and a
configuration reference generated from the models, so that every setting a form reaches is in it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from swerl.util.config_reference import configuration_reference, form_models, model_section, reachable

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#:]+)(#[^)]*)?\)")


def test_the_site_builds_strictly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    assert 'id="gradingconfig"' in reference and "test_timeout_s" in reference
    assert "Grading's threat model" in (tmp_path / "site" / "threat-model" / "index.html").read_text()


def test_every_setting_a_form_reaches_is_in_the_reference():
    text = configuration_reference()
    models = reachable(list(form_models().values()))
    for model in models:
        section = model_section(model)
        assert section in text, model.__name__
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        assert [row.split("`")[1] for row in rows] == list(model.model_fields), model.__name__
    # the grader's settings reach every form that grades, from their one declaration
    from swerl.grading.grader import GradingConfig

    assert GradingConfig in models


def test_a_row_says_type_default_bounds_and_description():
    from swerl.grading.grader import GradingConfig

    row = next(line for line in model_section(GradingConfig).splitlines() if line.startswith("| `test_timeout_s`"))
    assert row.startswith("| `test_timeout_s` | float | `900.0` | &gt; 0, ≤ 86400 | Hard limit on the test command alone")


def test_the_readme_is_a_front_page_and_every_relative_link_resolves():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert "bash scripts/main.sh" in readme and "bash scripts/test.sh" in readme
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        for target, _ in LINK.findall(page.read_text()):
            if target.startswith(("http", "mailto")) or target.endswith("threat-model.md"):
                continue  # the threat model page is made from swerl/grading/THREAT_MODEL.md at build time
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"

"""MkDocs hooks: pages made from the code at build time, so they cannot drift from it.

* ``threat-model.md``: the grader's threat model, kept beside the grader (``swerl/grading/THREAT_MODEL.md``);
* the configuration reference: ``swerl.util.config_reference`` renders every model the flows' forms reach.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- configuration reference: generated from the models -->"


def on_files(files, config):
    files.append(File.generated(config, "threat-model.md", content=(ROOT / "swerl/grading/THREAT_MODEL.md").read_text()))
    return files


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    from swerl.util.config_reference import configuration_reference

    return markdown.replace(MARKER, configuration_reference())

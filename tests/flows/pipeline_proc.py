"""Run the pipeline flow in a process of its own (the kill-and-resume test kills it)."""

import sys
from pathlib import Path

if __name__ == "__main__":
    from flows.pipeline import pipeline
    from swerl.orchestration.params import PipelineParams

    pipeline(PipelineParams.model_validate_json(Path(sys.argv[1]).read_text()))

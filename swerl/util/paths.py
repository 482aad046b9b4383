"""Where swerl keeps its own files in the working folder by default: each path named once, here."""

from __future__ import annotations

from pathlib import Path

STATE = Path(".swerl")
LOG_DIR = STATE / "logs"  # LOG_DIR/builds, LOG_DIR/grading, LOG_DIR/validate, LOG_DIR/grade
IMAGES_MANIFEST = STATE / "images.json"
SERVICES_HOME = STATE / "services"
MLFLOW_DB = STATE / "mlflow.db"
DEMO_DIR = STATE / "demo"

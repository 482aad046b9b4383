"""Prefect flows that compose the tasks in ``tasks/``: build_images, rollout, grade, rft,
dapo_iteration, evaluate, and pipeline (RFT, then N DAPO iterations, each evaluated)."""

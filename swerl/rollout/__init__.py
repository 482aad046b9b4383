"""Rollouts: many agent runs at once, appended to Parquet as they finish."""

"""Evaluation: Pass@1 over k runs with its standard error, and unbiased Pass@k."""

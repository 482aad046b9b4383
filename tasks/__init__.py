"""Thin Prefect tasks over ``swerl`` functions: retries for infrastructure errors only,
timeouts, concurrency tags, content-keyed caching. They pass paths, ids and small records."""

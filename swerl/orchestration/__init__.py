"""What the Prefect flows need that is not Prefect: flow parameters, the stage ledger that
makes a pipeline resumable, and the metrics each stage reports. Importable without Prefect."""

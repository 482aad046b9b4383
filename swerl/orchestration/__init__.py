"""What the Prefect flows need that is not Prefect: flow parameters, the typed results stages
hand each other, the training objectives, the pipeline's stage plan, the stage ledger that
makes a pipeline resumable, and the metrics each stage reports. Importable without Prefect."""

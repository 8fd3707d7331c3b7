"""Windows computed on Apache Spark from the Parquet lake (see docs/monitoring.md, "The spark engine")."""

"""The prediction log as a Parquet lake (a local folder or ``s3://bucket/prefix``): see :mod:`.layout`."""

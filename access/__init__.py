"""API tokens: scoped bearer tokens, stored hashed, created, listed and revoked (``driftwarden tokens``)."""

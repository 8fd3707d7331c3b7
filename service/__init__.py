"""The top floor: the API process (app composition, serving routes) and the `driftwarden` CLI root."""

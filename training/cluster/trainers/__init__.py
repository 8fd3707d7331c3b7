"""One trainer per update mode: async (parameter servers), sync (all-reduce), local (one process)."""

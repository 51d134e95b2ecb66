"""Token-level control: grammars, forced tokens, branches and per-token records."""

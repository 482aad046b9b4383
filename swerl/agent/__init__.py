"""The agent scaffold: action parsing, prompts, in-sandbox tools, the token-exact chat format,
and the multi-turn loop with the trajectory it records."""

"""The agent scaffold: action parsing, in-sandbox tools, the multi-turn loop (issue 3, in progress)."""

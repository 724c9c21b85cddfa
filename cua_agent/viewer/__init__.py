"""See what the agent did: a trajectory viewer over a run's outputs (`python -m cua_agent.viewer`) and its
training plots (`python -m cua_agent.viewer.plots`)."""

"""OSWorld's task format, run in our desktop boxes (no VM).

A task is OSWorld's JSON: `instruction`; `config`, set-up steps (`steps.py`); and `evaluator`: `postconfig`
steps, then getters (`getters.py`) for the result and the expected value, then metric functions
(`metrics/`), combined under `conj` (`evaluate.py`). Names are OSWorld's, so its task files run as they are
when every step, getter, metric and application they name is here; `support.py` says what a task lacks.

Paths under /home/user (OSWorld's VM user) are the box user's home. Nothing is downloaded: a URL maps to a
file the host provides (`TaskEnv.assets`).
"""

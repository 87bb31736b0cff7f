"""Real coding agents (Codex CLI, Claude Code, OpenCode, Aider) on real tasks against `localspec serve`
(issue 57): how each is pointed at the server (clients.py), the tasks checked from outside (tasks.py),
what the server did for a task (record.py), and the grid of tasks x agents (`python -m tools.agents`)."""

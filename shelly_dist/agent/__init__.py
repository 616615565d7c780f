"""Layer 6 — the agent: the ReAct loop as a resumable step machine, the system prompt, the
registry, the orchestration tools (``list_agents``, ``delegate``, ``task_complete``) and middleware.

The agent never knows which runtime runs it: a step can stop at a delegation as *suspended*, and
whoever runs the step decides how the children run.
"""

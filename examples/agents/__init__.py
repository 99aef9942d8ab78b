"""Example user-defined agents for the `agent` workload type (workloads/agent.py)."""

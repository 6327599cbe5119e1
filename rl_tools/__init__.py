"""Agentic RL and tool use. Papers: 2 TRM: tool-call reward model; 6 Executable counterfactuals; 14 A2ASecBench."""

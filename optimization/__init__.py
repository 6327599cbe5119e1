"""Optimisation, bandits and continual learning.

Papers: 7 LGBO: LLM-guided Bayesian optimisation; 8 FedFTRL: federated heterogeneous bandits; 16 DEDUCE: continual
learning with selective unlearning.
"""

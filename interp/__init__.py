"""Interpretability and theory of representations.

Papers: 4 Concept vectors vs function vectors; 15 Scale analysis of feature learning; 17 C2C: cache-to-cache
communication.
"""

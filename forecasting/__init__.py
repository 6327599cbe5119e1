"""Time-series forecasting and spiking video models.

Papers: 10 PhaseFormer; 11 PredNext: self-supervised spiking networks.
"""

"""Generative models and attacks on them.

Papers: 3 Full-head 3D-aware GAN; 9 Multiplicative attack on DeepFake attribution; 12 PTA: plan-then-act CAD
generation; 13 VLM-guided relative movement dynamics for HOI.
"""

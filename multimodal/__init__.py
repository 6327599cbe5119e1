"""Vision-language and multimodal fusion.

Papers: 5 IndicVisionBench; 18 VaseVQA-3D and VaseVLM; 19 DecAlign: hierarchical cross-modal alignment.
"""

"""Brain-to-text decoding. Papers: 1 BIT: end-to-end brain-to-text."""

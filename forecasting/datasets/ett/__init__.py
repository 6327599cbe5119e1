"""The ETT-small CSV files (CC BY-ND 4.0, unmodified); see PROVENANCE.md and LICENSE.md."""

"""Data files shipped with the forecasting area (each folder carries its licence and provenance)."""

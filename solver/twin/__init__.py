"""The digital twin: sensors, message ingestion and validation, assimilation, forecasts.

Host-side only (between chunks); the array math of assimilation lives in ``kernels``.
"""

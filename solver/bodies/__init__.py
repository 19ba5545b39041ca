"""Rigid bodies: scenes, packings, the body step, cases and ensembles."""

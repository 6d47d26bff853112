"""Converted scripts that train for real under torchrun, one file per concern."""

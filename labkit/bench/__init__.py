"""Benchmarks: commands that measure side by side in one run and print JSON.

``launch`` compares labkit's launcher with a bare torchrun of the same script.
"""
